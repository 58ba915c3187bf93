package limiter

// SlidingWindowCounterState is one key's SlidingWindowCounter state: the units admitted in the
// current epoch-aligned window and in the one before it. The zero value is a key that has seen
// nothing.
//
// The algorithm (Cloudflare's) estimates the units in the sliding interval (now-W, now] as
// Prev*(W-e)/W + Curr, where e = now - Window*W, assuming the previous window's units were spread
// evenly. It never admits more than L units in one aligned window (Curr + c <= L). When arrivals
// are spread evenly the estimate is exact; when they are not it can be wrong either way, and an
// adversary who puts L units at the very end of one window and then keeps asking through the
// next gets up to L + L - ceil(L/W) (< 2L) units into one sliding interval of length W
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
//	e = now - Window*W   (0 <= e < W),   rest = W - e    (1 <= rest <= W)
//	c > L:  deny, cost exceeds capacity, RetryAfter = NeverRetry
//	Curr + c <= L  and  Prev*rest <= (L - Curr - c)*W:   admit, Curr += c
//	        (the exact form of Prev*rest/W + Curr + c <= L; both sides <= L*W < 2^53)
//	otherwise deny, limited, RetryAfter = the first instant at which the same request would pass:
//	    A, later in this window, if Curr + c <= L and Prev > 0:
//	        k = floor((L - Curr - c)*W / Prev); if k >= 1: RetryAfter = (W - k) - e
//	    B, otherwise in the next window, where Prev' = Curr, Curr' = 0:
//	        e2 = 0 if Curr == 0, else max(0, W - floor((L - c)*W / Curr))   (0 <= e2 <= W)
//	        RetryAfter = rest + e2        (e2 = W is the start of the window after next)
//	Remaining  = max(0, L - Curr - ceil(Prev*rest/W))
//	ResetAfter = rest + W if Curr > 0; rest if Curr == 0 and Prev > 0; else 0
//	             (the estimate is 0 from the end of the window after Curr's)
func (s *SlidingWindowCounterState) Take(lim Limit, c, now int64) Result {
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
	rest := W - e

	var r Result
	switch {
	case c > L:
		r = costExceedsCapacity(L)
	case s.Curr+c <= L && s.Prev*rest <= (L-s.Curr-c)*W:
		s.Curr += c
		r = Result{Allowed: true, Limit: L}
	default:
		r = Result{Limit: L, RetryAfter: ms(s.retryAfter(L, W, c, e)), Reason: ReasonLimited}
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

// retryAfter is the ms from e until a request of cost c <= L passes, for a denied request.
func (s *SlidingWindowCounterState) retryAfter(L, W, c, e int64) int64 {
	if s.Curr+c <= L && s.Prev > 0 {
		// Prev*(W-e') <= (L-Curr-c)*W  <=>  W-e' <= k  <=>  e' >= W-k.
		if k := (L - s.Curr - c) * W / s.Prev; k >= 1 {
			return max(W-k, e) - e
		}
	}
	var e2 int64
	if s.Curr > 0 {
		e2 = max(0, W-(L-c)*W/s.Curr)
	}
	return W - e + e2
}
