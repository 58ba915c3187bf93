package limiter

// TokenBucketState is one key's TokenBucket state in scaled units: one token is W units, and
// every millisecond adds L units, up to cap*W (cap = Burst, default Limit). So the bucket holds
// up to cap tokens and refills at L tokens per W, exactly. The zero value is a key that has seen
// nothing, a full bucket.
type TokenBucketState struct {
	// Tokens is the content in scaled units, 0 <= Tokens <= cap*W, as of Last.
	Tokens int64
	// Last is the instant Tokens was computed at, ms since the Unix epoch.
	Last int64
	// Started is false for a key that has seen nothing; Tokens and Last are then ignored.
	Started bool
}

// Take decides a request of cost c at now under lim (Algorithm TokenBucket) and updates s.
// lim must be valid and c >= 1; Take does not check.
//
//	full = cap*W
//	if not Started: Tokens = full, Last = now, Started = true   (an absent key is full)
//	Tokens = min(Tokens, full)                                  (capacity was lowered)
//	if now > Last:                                              (else: clock went back, now = Last)
//	    dt = now - Last
//	    if dt >= ceil((full - Tokens)/L): Tokens = full         (never forms dt*L for a large dt)
//	    else: Tokens = Tokens + dt*L                            (< full)
//	    Last = now
//	c > cap:            deny, cost exceeds capacity, RetryAfter = NeverRetry
//	Tokens >= c*W:      admit, Tokens -= c*W
//	otherwise:          deny, limited, RetryAfter = ceil((c*W - Tokens)/L)
//	Remaining  = max(0, floor(Tokens/W))
//	ResetAfter = ceil((full - Tokens)/L)
//
// Tokens is below zero after a late charge into debt (see Charger); the formulas hold as they
// are, and a request then waits for the debt to be refilled as well. No fraction of a token is lost between requests: a client that always waits its RetryAfter
// gets exactly cap + floor(L*(t1-t0)/W) units of cost 1 through in [t0, t1] from a full bucket.
func (s *TokenBucketState) Take(lim Limit, c, now int64) Result { return s.take(&lim, c, now) }

// refill starts a bucket full at now, or refills it at L scaled units per ms since Last, up to
// full: what a take and a late charge do first. Small enough to be inlined into both.
func (s *TokenBucketState) refill(L, full, now int64) {
	if !s.Started {
		s.Tokens, s.Last, s.Started = full, now, true
	}
	s.Tokens = min(s.Tokens, full)
	if now > s.Last {
		if dt := now - s.Last; reaches(dt, L, full-s.Tokens) {
			s.Tokens = full
		} else {
			s.Tokens += dt * L
		}
		s.Last = now
	}
}

// take is Take with lim by reference, for the store's hot path.
func (s *TokenBucketState) take(lim *Limit, c, now int64) Result {
	W, L, capacity := lim.WindowMs(), lim.Limit, lim.Capacity()
	full := capacity * W
	s.refill(L, full, now)

	var r Result
	switch {
	case c > capacity:
		r = costExceedsCapacity(capacity)
	case s.Tokens >= c*W:
		s.Tokens -= c * W
		r = Result{Allowed: true, Limit: capacity}
	default:
		r = Result{Limit: capacity, RetryAfter: ms(ceilDiv(c*W-s.Tokens, L)), Reason: ReasonLimited}
	}
	r.Remaining = max(0, s.Tokens/W) // Tokens < 0: in debt after a late charge (Charge)
	r.ResetAfter = ms(ceilDiv(full-s.Tokens, L))
	return r
}
