package limiter

// LeakyBucketState is one key's LeakyBucket state in scaled units: a request of cost c adds c*W
// units of level, the level leaks L units every millisecond, and it never exceeds cap*W
// (cap = Burst, default Limit). The zero value is a key that has seen nothing, an empty bucket.
//
// In Meter mode the level is the bucket's fill: a request passes at once if it fits, else it is
// denied. Meter is the token bucket seen from the other side (level = cap*W - tokens) and makes
// the same decisions with the same Remaining, ResetAfter and RetryAfter.
//
// In Queue mode the level is the work queued ahead: a request that fits starts after
// Delay = ceil(level/L) ms, the time the queue ahead of it takes to leak, so admitted requests
// of cost c start exactly c*W/L ms apart while the queue is not empty (Delay is that start
// rounded up to the next ms). Requests whose Delay would exceed MaxDelay are denied.
type LeakyBucketState struct {
	// Level is the level in scaled units, 0 <= Level <= cap*W, as of Last.
	Level int64
	// Last is the instant Level was computed at, ms since the Unix epoch.
	Last int64
}

// Take decides a request of cost c at now under lim (Algorithm LeakyBucket) in lim.Mode (empty
// means Meter) and updates s. lim must be valid and c >= 1; Take does not check.
func (s *LeakyBucketState) Take(lim Limit, c, now int64) Result {
	if lim.Mode == Queue {
		return s.TakeQueue(lim, c, now)
	}
	return s.TakeMeter(lim, c, now)
}

// leak brings the level forward to now:
//
//	full = cap*W
//	Level = min(Level, full)                                    (capacity was lowered)
//	if now > Last:                                              (else: clock went back, now = Last)
//	    dt = now - Last
//	    if dt >= ceil(Level/L): Level = 0                       (never forms dt*L for a large dt)
//	    else: Level = Level - dt*L                              (> 0)
//	    Last = now
func (s *LeakyBucketState) leak(L, full, now int64) {
	s.Level = min(s.Level, full)
	if now > s.Last {
		if dt := now - s.Last; reaches(dt, L, s.Level) {
			s.Level = 0
		} else {
			s.Level -= dt * L
		}
		s.Last = now
	}
}

// TakeMeter is Take in Meter mode.
//
//	leak (see above), full = cap*W
//	c > cap:                  deny, cost exceeds capacity, RetryAfter = NeverRetry
//	Level <= full - c*W:      admit, Level += c*W          (the form of Level + c*W <= full
//	                                                        that stays below 2^53)
//	otherwise:                deny, limited, RetryAfter = ceil((Level - (full - c*W))/L)
//	Remaining  = floor((full - Level)/W)
//	ResetAfter = ceil(Level/L)
func (s *LeakyBucketState) TakeMeter(lim Limit, c, now int64) Result {
	return s.takeMeter(&lim, c, now)
}

// takeMeter is TakeMeter with lim by reference, for the store's hot path.
func (s *LeakyBucketState) takeMeter(lim *Limit, c, now int64) Result {
	W, L, capacity := lim.WindowMs(), lim.Limit, lim.Capacity()
	full := capacity * W
	s.leak(L, full, now)

	var r Result
	switch {
	case c > capacity:
		r = costExceedsCapacity(capacity)
	case s.Level <= full-c*W:
		s.Level += c * W
		r = Result{Allowed: true, Limit: capacity}
	default:
		r = Result{Limit: capacity, RetryAfter: ms(ceilDiv(s.Level-(full-c*W), L)), Reason: ReasonLimited}
	}
	r.Remaining = (full - s.Level) / W
	r.ResetAfter = ms(ceilDiv(s.Level, L))
	return r
}

// TakeQueue is Take in Queue mode.
//
//	leak (see above), full = cap*W, M = MaxDelay in ms
//	c > cap:                  deny, cost exceeds capacity, RetryAfter = NeverRetry
//	Level > full - c*W:       deny, limited (ReasonLimited)
//	ceil(Level/L) > M:        deny, delay too long (ReasonDelayTooLong)
//	otherwise:                admit, Delay = ceil(Level/L) (Level before the request), Level += c*W
//	denied: RetryAfter = ceil((Level - T)/L), T = min(full - c*W, M*L): the first instant the
//	        level has leaked to T, where both conditions hold (ceil(x/L) <= M <=> x <= M*L)
//	Remaining  = 0 if Level > T1, else floor((T1 - Level)/W) + 1, T1 = min(full - W, M*L):
//	             how many more cost-1 requests would pass now
//	ResetAfter = ceil(Level/L)
func (s *LeakyBucketState) TakeQueue(lim Limit, c, now int64) Result {
	return s.takeQueue(&lim, c, now)
}

// takeQueue is TakeQueue with lim by reference, for the store's hot path.
func (s *LeakyBucketState) takeQueue(lim *Limit, c, now int64) Result {
	W, L, capacity := lim.WindowMs(), lim.Limit, lim.Capacity()
	full, M := capacity*W, lim.MaxDelay.Milliseconds()
	s.leak(L, full, now)

	var r Result
	switch delay := ceilDiv(s.Level, L); {
	case c > capacity:
		r = costExceedsCapacity(capacity)
	case s.Level <= full-c*W && delay <= M:
		s.Level += c * W
		r = Result{Allowed: true, Limit: capacity, Delay: ms(delay)}
	default:
		r = Result{Limit: capacity, Reason: ReasonLimited}
		if s.Level <= full-c*W {
			r.Reason = ReasonDelayTooLong
		}
		r.RetryAfter = ms(ceilDiv(s.Level-min(full-c*W, M*L), L))
	}
	if t1 := min(full-W, M*L); s.Level <= t1 {
		r.Remaining = (t1-s.Level)/W + 1
	}
	r.ResetAfter = ms(ceilDiv(s.Level, L))
	return r
}
