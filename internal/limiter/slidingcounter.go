package limiter

// SlidingWindowCounterState is one key's SlidingWindowCounter state: the units admitted in the
// current epoch-aligned window and in the one before it. The zero value is a key that has seen
// nothing.
//
// The algorithm (Cloudflare's) estimates the units in the sliding interval (now-W, now] as
// Curr plus the share of Prev that falls in it, assuming the previous window's units were spread
// evenly over its W milliseconds. On millisecond ticks, (now-W, now] holds the last
// rest = W-1-e ticks of the previous window (e = now - Window*W), so the estimate is
// Prev*rest/W + Curr; with W = 1 it is exact. (Cloudflare's continuous form uses W-e; on ticks
// that counts one tick of the previous window too many, and with W = 1 it would count two
// windows.) It never admits more than L units in one aligned window (Curr + c <= L).
//
// When arrivals are spread evenly the estimate is close (evenly spaced requests at exactly the
// limit's rate lose about one per window to rounding); when they are not it can be wrong either
// way: an adversary who puts L units at the very end of one window and then keeps asking
// through the next gets up to 2L - ceil(L/W) units into one sliding interval of length W
// (TestSlidingWindowCounterWorstCase shows it). Use SlidingWindowLog where the bound must hold
// on every interval.
type SlidingWindowCounterState struct {
	// Window is the index floor(t/W) of the latest window a request fell in.
	Window int64
	// Prev is the number of units admitted in window Window-1.
	Prev int64
	// Curr is the number of units admitted in window Window.
	Curr int64
}

// Take decides a request of cost c at now under lim (Algorithm SlidingWindowCounter) and updates
// s. lim must be valid and c >= 1; Take does not check.
//
//	w = floor(now/W)
//	w == Window+1:  Prev = Curr, Curr = 0, Window = w
//	w >  Window+1:  Prev = 0,    Curr = 0, Window = w
//	w <  Window:    now = Window*W                       (clock went back)
//	e = now - Window*W   (0 <= e < W),   rest = W - 1 - e   (0 <= rest < W)
//	c > L:  deny, cost exceeds capacity, RetryAfter = NeverRetry
//	Curr + c <= L  and  Prev*rest <= (L - Curr - c)*W:   admit, Curr += c
//	        (the exact form of Prev*rest/W + Curr + c <= L; both sides <= L*W < 2^53)
//	otherwise deny, limited, RetryAfter = the first instant at which the same request would pass:
//	    if Curr + c <= L (so Prev > 0), later in this window, at e' = W - 1 - k:
//	        k = floor((L - Curr - c)*W / Prev),   RetryAfter = (W - 1 - k) - e
//	    else in the next window, where Prev' = Curr and Curr' = 0, at e2:
//	        e2 = max(0, W - 1 - floor((L - c)*W / Curr)),   RetryAfter = (W - e) + e2
//	Remaining  = max(0, L - Curr - ceil(Prev*rest/W))
//	ResetAfter = the first instant the estimate is 0 for good:
//	             rest + W if Curr > 0; rest if Curr == 0 and Prev > 0; else 0
func (s *SlidingWindowCounterState) Take(lim Limit, c, now int64) Result { return s.take(&lim, c, now) }

// take is Take with lim by reference, for the store's hot path.
func (s *SlidingWindowCounterState) take(lim *Limit, c, now int64) Result {
	W, L := lim.WindowMs(), lim.Limit
	switch w := now / W; {
	case w == s.Window:
	case w == s.Window+1:
		s.Window, s.Prev, s.Curr = w, s.Curr, 0
	case w > s.Window:
		s.Window, s.Prev, s.Curr = w, 0, 0
	default:
		now = s.Window * W
	}
	e := now - s.Window*W
	rest := W - 1 - e

	var r Result
	switch {
	case c > L:
		r = costExceedsCapacity(L)
	case s.Curr+c <= L && s.Prev*rest <= (L-s.Curr-c)*W:
		s.Curr += c
		r = Result{Allowed: true, Limit: L}
	case s.Curr+c <= L:
		k := (L - s.Curr - c) * W / s.Prev
		r = Result{Limit: L, RetryAfter: ms(W - 1 - k - e), Reason: ReasonLimited}
	default:
		var e2 int64
		if s.Curr > 0 { // always, unless L was lowered below c's old window
			e2 = max(0, W-1-(L-c)*W/s.Curr)
		}
		r = Result{Limit: L, RetryAfter: ms(W - e + e2), Reason: ReasonLimited}
	}
	r.Remaining = max(0, L-s.Curr-ceilDiv(s.Prev*rest, W))
	switch {
	case s.Curr > 0:
		r.ResetAfter = ms(rest + W)
	case s.Prev > 0:
		r.ResetAfter = ms(rest)
	}
	return r
}
