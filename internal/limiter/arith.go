package limiter

import "time"

// The transitions below share these conventions, which the Lua port follows literally:
//
//   - now is an integer number of milliseconds since the Unix epoch, 0 <= now <= MaxNowMs.
//   - W = lim.WindowMs(), L = lim.Limit, cap = lim.Capacity(), c = cost (c >= 1).
//   - a / b is floor division of non-negative integers; ceil(a/b) = a/b + (a mod b != 0).
//     In Lua (doubles), math.floor(a / b) is exact whenever a < 2^53, which every formula keeps.
//   - A request with c > cap is checked before c is multiplied by anything: it is denied with
//     ReasonCostExceedsCapacity and RetryAfter = NeverRetry; the state is still brought forward
//     to now (an equivalent state), nothing is taken, and Remaining and ResetAfter describe it.
//   - Every duration in a Result is a whole number of milliseconds, relative to the effective
//     now (now, or the state's latest instant if the clock went backwards).

// ceilDiv is ceil(a/b) for a >= 0, b > 0, without forming a+b-1.
func ceilDiv(a, b int64) int64 {
	q := a / b
	if q*b != a {
		q++
	}
	return q
}

// ms converts a whole number of milliseconds to a Duration.
func ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

// costExceedsCapacity is the Result for a request that can never pass.
func costExceedsCapacity(capacity int64) Result {
	return Result{Limit: capacity, RetryAfter: NeverRetry, Reason: ReasonCostExceedsCapacity}
}
