package lease

import "github.com/sluice-dev/sluice/internal/limiter"

// Admit is units admitted at an instant (ms).
type Admit struct {
	At, Units int64
}

// Worst is the interval of a trace that comes closest to the bound (or goes furthest past it).
type Worst struct {
	// From and To are the interval's first and last instants (ms), inclusive.
	From, To int64
	// Admitted is what the trace admitted in it, Bound the most the bound allows there.
	Admitted, Bound int64
}

// Holds reports whether the interval keeps the bound.
func (w Worst) Holds() bool { return w.Admitted <= w.Bound }

// BoundFormula states the bound for lim, as docs/leases.md does.
func BoundFormula(lim limiter.Limit) string {
	switch lim.Algorithm {
	case limiter.FixedWindow, limiter.SlidingWindowCounter:
		return "every aligned window admits at most limit (no excess)"
	default:
		return "any interval of T ms admits at most burst + rate × (T + maxAge)"
	}
}

// WorstInterval finds, in admits (sorted by At) of a leased rule lim with lease maxAge A ms,
// the interval with the least slack under the package's bound: for the buckets the interval
// [s, e] maximising window×admitted − limit×(e − s), its bound floor((burst×window +
// limit×(e − s + A)) / window); for the window algorithms the aligned window that admitted the
// most, its bound limit. O(len(admits)).
func WorstInterval(lim limiter.Limit, maxAgeMs int64, admits []Admit) Worst {
	W, L := lim.WindowMs(), lim.Limit
	var w Worst
	if len(admits) == 0 {
		return Worst{Bound: lim.Capacity()}
	}
	switch lim.Algorithm {
	case limiter.FixedWindow, limiter.SlidingWindowCounter:
		w.Bound = L
		cur, win := int64(0), admits[0].At/W
		for i, a := range admits {
			if a.At/W != win {
				cur, win = 0, a.At/W
			}
			cur += a.Units
			if i == 0 || cur > w.Admitted {
				w.Admitted, w.From, w.To = cur, win*W, (win+1)*W-1
			}
		}
		return w
	}
	// max over i <= j of W*(C_j - C_{i-1}) - L*(a_j - a_i), C the running sum of units:
	// the best start so far maximises L*a_i - W*C_{i-1}.
	var c int64
	bestStart, bestStartAt := L*admits[0].At, admits[0].At
	best := int64(-1 << 62)
	for _, a := range admits {
		if v := L*a.At - W*c; v > bestStart {
			bestStart, bestStartAt = v, a.At
		}
		c += a.Units
		if v := W*c - L*a.At + bestStart; v > best {
			best, w.From, w.To = v, bestStartAt, a.At
		}
	}
	// Recount the interval's units exactly.
	w.Admitted = 0
	for _, a := range admits {
		if a.At >= w.From && a.At <= w.To {
			w.Admitted += a.Units
		}
	}
	w.Bound = (lim.Capacity()*W + L*(w.To-w.From+maxAgeMs)) / W
	return w
}
