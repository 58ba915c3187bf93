package limiter

import (
	"math"
	"math/bits"
	"time"
)

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

// MaxDurationMs is the longest duration, in ms, a Result reports, about 292 years: the longest
// whole number of ms a time.Duration holds. Longer ones saturate to it (a bucket of 1e8 tokens
// that refills one a day is full again after 270,000 years).
const MaxDurationMs = math.MaxInt64 / int64(time.Millisecond)

// DurationFromMs converts a whole number of ms from a transition to a Result's Duration,
// saturating at MaxDurationMs. Every Store converts with it, so all report the same Result.
func DurationFromMs(n int64) time.Duration {
	return time.Duration(min(n, MaxDurationMs)) * time.Millisecond
}

func ms(n int64) time.Duration { return DurationFromMs(n) }

// reaches reports whether dt*L >= need, that is dt >= ceil(need/L), for dt, L, need >= 0. The
// product is taken in 128 bits, so it cannot overflow for a huge dt, and there is no division
// on the hot path. (Lua compares dt >= ceil(need/L): the same answer.)
func reaches(dt, L, need int64) bool {
	hi, lo := bits.Mul64(uint64(dt), uint64(L))
	return hi != 0 || lo >= uint64(need)
}

// costExceedsCapacity is the Result for a request that can never pass.
func costExceedsCapacity(capacity int64) Result {
	return Result{Limit: capacity, RetryAfter: NeverRetry, Reason: ReasonCostExceedsCapacity}
}
