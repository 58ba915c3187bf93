package limiter

import (
	"fmt"
)

// t0 is 2026-02-05T00:00:00Z in ms, aligned to every window the tests use.
const t0 int64 = 1_770_249_600_000

// taker is what every algorithm's state implements.
type taker interface {
	Take(lim Limit, c, now int64) Result
}

func newState(alg Algorithm) taker {
	switch alg {
	case FixedWindow:
		return new(FixedWindowState)
	case SlidingWindowLog:
		return new(SlidingWindowLogState)
	case SlidingWindowCounter:
		return new(SlidingWindowCounterState)
	case TokenBucket:
		return new(TokenBucketState)
	case LeakyBucket:
		return new(LeakyBucketState)
	}
	panic(fmt.Sprintf("no algorithm %q", alg))
}

// clone returns an independent copy of a state, to ask "what if" without changing it.
func clone(s taker) taker {
	switch s := s.(type) {
	case *FixedWindowState:
		c := *s
		return &c
	case *SlidingWindowCounterState:
		c := *s
		return &c
	case *TokenBucketState:
		c := *s
		return &c
	case *LeakyBucketState:
		c := *s
		return &c
	case *SlidingWindowLogState:
		c := new(SlidingWindowLogState)
		for _, e := range s.Entries() {
			c.push(e)
		}
		return c
	}
	panic(fmt.Sprintf("no state %T", s))
}

var algorithms = []Algorithm{FixedWindow, SlidingWindowLog, SlidingWindowCounter, TokenBucket, LeakyBucket}

// checkExact checks that r, the Result of a request of cost c at now on the state before (left
// unchanged) and after, is exact, not just a bound:
//   - Remaining cost-1 requests pass at now, one more does not;
//   - a denied request passes at now+RetryAfter and not a millisecond earlier;
//   - a request of the full capacity passes at now+ResetAfter and not a millisecond earlier.
//
// now must be the effective instant: not before any instant the state has seen.
func checkExact(lim Limit, before, after taker, r Result, c, now int64) error {
	capacity := lim.Capacity()
	s := clone(after)
	for i := int64(0); i < r.Remaining; i++ {
		if got := s.Take(lim, 1, now); !got.Allowed {
			return fmt.Errorf("Remaining %d, but request %d of cost 1 at the same instant is denied: %+v", r.Remaining, i+1, got)
		}
	}
	if got := s.Take(lim, 1, now); got.Allowed {
		return fmt.Errorf("Remaining %d, but one more request of cost 1 passes", r.Remaining)
	}
	if !r.Allowed && r.RetryAfter != NeverRetry && r.RetryAfter.Milliseconds() < MaxDurationMs {
		retry := r.RetryAfter.Milliseconds()
		if got := clone(before).Take(lim, c, now+retry); !got.Allowed {
			return fmt.Errorf("RetryAfter %dms, but the request is denied then: %+v", retry, got)
		}
		if retry > 1 {
			if got := clone(before).Take(lim, c, now+retry-1); got.Allowed {
				return fmt.Errorf("RetryAfter %dms, but the request passes 1ms earlier", retry)
			}
		}
	}
	reset := r.ResetAfter.Milliseconds()
	if reset == MaxDurationMs {
		return nil
	}
	if got := clone(after).Take(lim, capacity, now+reset); !got.Allowed {
		return fmt.Errorf("ResetAfter %dms, but a request of the full capacity %d is denied then: %+v", reset, capacity, got)
	}
	if reset > 0 {
		if got := clone(after).Take(lim, capacity, now+reset-1); got.Allowed {
			return fmt.Errorf("ResetAfter %dms, but a request of the full capacity passes 1ms earlier", reset)
		}
	}
	return nil
}

// checkBounds checks what must hold of any Result.
func checkBounds(lim Limit, r Result, c int64) error {
	capacity := lim.Capacity()
	switch {
	case r.Limit != capacity:
		return fmt.Errorf("Limit %d, want capacity %d", r.Limit, capacity)
	case r.Remaining < 0 || r.Remaining > capacity:
		return fmt.Errorf("Remaining %d outside 0..%d", r.Remaining, capacity)
	case r.ResetAfter < 0 || r.ResetAfter > max(2*lim.Window, ms(ceilDiv(capacity*lim.WindowMs(), lim.Limit))):
		return fmt.Errorf("ResetAfter %s out of range", r.ResetAfter)
	case r.Delay < 0 || r.Delay > lim.MaxDelay || (r.Delay > 0 && !r.Allowed):
		return fmt.Errorf("Delay %s out of range (allowed %v)", r.Delay, r.Allowed)
	case r.Allowed && (r.RetryAfter != 0 || r.Reason != ""):
		return fmt.Errorf("allowed with RetryAfter %s, Reason %q", r.RetryAfter, r.Reason)
	case !r.Allowed && c > capacity && (r.RetryAfter != NeverRetry || r.Reason != ReasonCostExceedsCapacity):
		return fmt.Errorf("cost %d > capacity %d: RetryAfter %s, Reason %q", c, capacity, r.RetryAfter, r.Reason)
	case !r.Allowed && c <= capacity && (r.RetryAfter <= 0 || r.Reason == "" || r.Reason == ReasonCostExceedsCapacity):
		return fmt.Errorf("denied with RetryAfter %s, Reason %q", r.RetryAfter, r.Reason)
	case c > capacity && r.Allowed:
		return fmt.Errorf("cost %d > capacity %d admitted", c, capacity)
	}
	return nil
}
