package simulate

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/limiter/lease"
)

// Fleet is a leased replay's sidecars: Pods engines sharing one store, each leasing with Lease.
type Fleet struct {
	Pods  int
	Lease lease.Params
}

// Arrival is one request of a fleet trace: its instant (ms) and the pod it reaches.
type Arrival struct {
	At  int64
	Pod int
}

// ReadFleetTrace reads a fleet trace: one arrival per line, "<ms>" (the pods take turns, round
// robin) or "<ms> <pod>" (a pod column: any name, each distinct name one of the pods, in order
// of first appearance); ms non-decreasing, blank lines ignored.
func ReadFleetTrace(in io.Reader, pods int) ([]Arrival, error) {
	var out []Arrival
	names := map[string]int{}
	prev := int64(-1)
	sc := bufio.NewScanner(in)
	for line := 1; sc.Scan(); line++ {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if len(f) > 2 {
			return nil, fmt.Errorf("line %d: want \"<ms>\" or \"<ms> <pod>\"", line)
		}
		at, err := strconv.ParseInt(f[0], 10, 64)
		switch {
		case err != nil:
			return nil, fmt.Errorf("line %d: %q is not a whole number of ms since the Unix epoch", line, f[0])
		case at < 0 || at > limiter.MaxNowMs:
			return nil, fmt.Errorf("line %d: %d is outside 0..%d ms since the Unix epoch", line, at, limiter.MaxNowMs)
		case at < prev:
			return nil, fmt.Errorf("line %d: %d is before the arrival before it (%d); arrivals must not decrease", line, at, prev)
		}
		prev = at
		pod := len(out) % pods
		if len(f) == 2 {
			i, ok := names[f[1]]
			if !ok {
				if len(names) == pods {
					return nil, fmt.Errorf("line %d: pod %q is one more than the %d pods", line, f[1], pods)
				}
				i = len(names)
				names[f[1]] = i
			}
			pod = i
		}
		out = append(out, Arrival{At: at, Pod: pod})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading arrivals: %w", err)
	}
	return out, nil
}

// Totals is what one replay admitted and what it cost the store.
type Totals struct {
	Allowed, Denied, StoreCalls int64
}

// LeaseReport is a leased replay next to the exact rule's replay of the same trace.
type LeaseReport struct {
	Lim   limiter.Limit
	Fleet Fleet
	// Exact and Leased are the totals of the exact rule (every decision in the store) and
	// of the leased one.
	Exact, Leased Totals
	// Stats sums the engines' counts.
	Stats lease.Stats
	// Excess is the interval [ExcessFrom, ExcessTo] (ms) where the leased run admitted the
	// most units more than the exact run of the same trace, and how many more.
	Excess, ExcessFrom, ExcessTo int64
	// Worst is the leased run's interval with the least slack under the bound.
	Worst lease.Worst
	// MaxHeld is the most units the pods held unused at once (after a decision); HeldBound
	// pods × maxUnits.
	MaxHeld, HeldBound int64

	// For PlotLease: the arrivals' instants, the instants each run admitted at (ms, in
	// order), and the cost of every request.
	arrivals, exactTimes, leasedTimes []int64
	cost                              int64
}

// ReplayFleet replays arrivals at cost through Fleet.Pods engines sharing the store leased
// (made by open, with a function releasing it), and through the exact rule on a second store,
// and compares them. Before each arrival every engine ends the leases that expired (as the
// sidecar's sweeper does).
func ReplayFleet(arrivals []Arrival, open func() (lease.Store, func(), error), lim limiter.Limit, cost int64, fleet Fleet) (*LeaseReport, error) {
	if err := lim.Leasable(); err != nil {
		return nil, err
	}
	if fleet.Pods < 1 {
		return nil, fmt.Errorf("pods %d is below 1", fleet.Pods)
	}
	ctx := context.Background()
	exactStore, closeExact, err := open()
	if err != nil {
		return nil, err
	}
	defer closeExact()
	leasedStore, closeLeased, err := open()
	if err != nil {
		return nil, err
	}
	defer closeLeased()
	pods := make([]*lease.Engine, fleet.Pods)
	for i := range pods {
		pods[i] = lease.New(leasedStore, lease.Options{})
	}
	rep := &LeaseReport{Lim: lim, Fleet: fleet, HeldBound: int64(fleet.Pods) * fleet.Lease.MaxUnitsFor(lim), cost: cost}
	var leasedAdmits, exactAdmits []lease.Admit
	held := make([]int64, fleet.Pods)
	var heldSum int64
	for i, a := range arrivals {
		at := time.UnixMilli(a.At)
		rep.arrivals = append(rep.arrivals, a.At)
		r, err := exactStore.Take(ctx, key, lim, cost, at)
		if err != nil {
			return nil, fmt.Errorf("arrival %d: exact: %w", i+1, err)
		}
		rep.Exact.StoreCalls++
		if r.Allowed {
			rep.Exact.Allowed++
			exactAdmits = append(exactAdmits, lease.Admit{At: a.At, Units: cost})
			rep.exactTimes = append(rep.exactTimes, a.At)
		} else {
			rep.Exact.Denied++
		}
		for p, e := range pods {
			if e.Sweep(ctx, at) > 0 {
				heldSum += e.Held() - held[p]
				held[p] = e.Held()
			}
		}
		e := pods[a.Pod]
		r, err = e.Take(ctx, key, lim, fleet.Lease, cost, at)
		if err != nil {
			return nil, fmt.Errorf("arrival %d: leased: %w", i+1, err)
		}
		if r.Allowed {
			rep.Leased.Allowed++
			leasedAdmits = append(leasedAdmits, lease.Admit{At: a.At, Units: cost})
			rep.leasedTimes = append(rep.leasedTimes, a.At)
		} else {
			rep.Leased.Denied++
		}
		h := e.Held()
		heldSum += h - held[a.Pod]
		held[a.Pod] = h
		rep.MaxHeld = max(rep.MaxHeld, heldSum)
	}
	for _, e := range pods {
		e.ReturnAll(ctx)
		s := e.Stats()
		rep.Stats.Decisions += s.Decisions
		rep.Stats.StoreCalls += s.StoreCalls
		rep.Stats.Leases += s.Leases
		rep.Stats.UnitsReturned += s.UnitsReturned
	}
	rep.Leased.StoreCalls = rep.Stats.StoreCalls
	rep.Worst = lease.WorstInterval(lim, fleet.Lease.MaxAge.Milliseconds(), leasedAdmits)
	rep.Excess, rep.ExcessFrom, rep.ExcessTo = worstExcess(leasedAdmits, exactAdmits)
	return rep, nil
}

// worstExcess is the interval where a admitted the most more than b, and how much: the
// largest rise of D = (a's units so far) - (b's units so far) between two instants.
func worstExcess(a, b []lease.Admit) (excess, from, to int64) {
	var d, minD int64
	minAt := int64(-1)
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		t := int64(1<<62 - 1)
		if i < len(a) {
			t = a[i].At
		}
		if j < len(b) && b[j].At < t {
			t = b[j].At
		}
		if minAt < 0 || d < minD {
			minD, minAt = d, t
		}
		for ; i < len(a) && a[i].At == t; i++ {
			d += a[i].Units
		}
		for ; j < len(b) && b[j].At == t; j++ {
			d -= b[j].Units
		}
		if d-minD > excess {
			excess, from, to = d-minD, minAt, t
		}
	}
	return excess, from, to
}

// Write prints the report.
func (r *LeaseReport) Write(w io.Writer) error {
	var b strings.Builder
	per := func(t Totals) string {
		if n := t.Allowed + t.Denied; n > 0 {
			return strconv.FormatFloat(float64(t.StoreCalls)/float64(n), 'f', 4, 64)
		}
		return "-"
	}
	fmt.Fprintf(&b, "%s, %d pods, lease maxAge %s, maxUnits %d\n", r.Lim.Name(), r.Fleet.Pods, r.Fleet.Lease.MaxAge, r.Fleet.Lease.MaxUnitsFor(r.Lim))
	fmt.Fprintf(&b, "exact:  allowed=%d denied=%d store calls=%d (%s per decision)\n", r.Exact.Allowed, r.Exact.Denied, r.Exact.StoreCalls, per(r.Exact))
	fmt.Fprintf(&b, "leased: allowed=%d denied=%d store calls=%d (%s per decision) leases=%d units returned=%d\n",
		r.Leased.Allowed, r.Leased.Denied, r.Leased.StoreCalls, per(r.Leased), r.Stats.Leases, r.Stats.UnitsReturned)
	fmt.Fprintf(&b, "worst excess over exact: %d units in [%d, %d]\n", r.Excess, r.ExcessFrom, r.ExcessTo)
	verdict := "holds"
	if !r.Worst.Holds() {
		verdict = "VIOLATED"
	}
	fmt.Fprintf(&b, "bound: %s; worst interval [%d, %d] admitted %d, bound %d: %s\n", lease.BoundFormula(r.Lim), r.Worst.From, r.Worst.To, r.Worst.Admitted, r.Worst.Bound, verdict)
	fmt.Fprintf(&b, "held unused at once: at most %d, bound pods × maxUnits = %d\n", r.MaxHeld, r.HeldBound)
	_, err := io.WriteString(w, b.String())
	return err
}
