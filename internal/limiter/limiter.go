// Package limiter holds Sluice's rate-limiting algorithms and the Store interface that applies
// them to keys.
//
// The algorithms are pure state transitions: a state, a Limit, a cost and the current instant go
// in; a Decision and the next state come out. They use integer arithmetic only, on millisecond
// ticks, so that equivalent algorithms agree decision for decision and totals match their formulas
// exactly. The Redis store (package redisstore) follows the same transitions in Lua; a
// differential test keeps the two equal.
//
// # Exact arithmetic
//
// Time is counted in whole milliseconds. Bucket contents are scaled so that refill is exact: one
// token (or one unit of leaky-bucket level) is WindowMs "scaled units", and every millisecond adds
// (or leaks) Limit scaled units. Validate enforces bounds under which every intermediate value
// stays below 2^53, so the same integers are exact in Go's int64 and in Lua's doubles:
//
//	1 <= Limit <= MaxLimit (1e8), 1 <= Burst <= MaxLimit, 1 ms <= Window <= MaxWindow (24h),
//	Limit <= MaxLogLimit (1e4) for SlidingWindowLog, 1 <= cost.
//
// The largest products are Burst*WindowMs and Limit*WindowMs, both <= 1e8 * 8.64e7 = 8.64e15 < 2^53.
package limiter

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Algorithm names a rate-limiting algorithm. The values are the API's enum values.
type Algorithm string

// The algorithms of the RateLimitPolicy API.
const (
	FixedWindow          Algorithm = "FixedWindow"
	SlidingWindowLog     Algorithm = "SlidingWindowLog"
	SlidingWindowCounter Algorithm = "SlidingWindowCounter"
	TokenBucket          Algorithm = "TokenBucket"
	LeakyBucket          Algorithm = "LeakyBucket"
)

// LeakyMode says what LeakyBucket does with a request: Meter admits or rejects it at once, Queue
// admits it after a delay that spaces requests at the leak rate.
type LeakyMode string

// The leaky bucket's modes.
const (
	Meter LeakyMode = "Meter"
	Queue LeakyMode = "Queue"
)

// Bounds under which the arithmetic is exact and overflow-free in int64 and in float64 (Lua).
const (
	MaxLimit    int64         = 100_000_000
	MaxLogLimit int64         = 10_000
	MaxWindow   time.Duration = 24 * time.Hour
	MinWindow   time.Duration = time.Millisecond
	// MaxNowMs is the latest instant, in ms since the Unix epoch, a Store accepts (2^52 ms, in
	// the year 144683). Instants stay at most now+2*Window < 2^53 in every formula.
	MaxNowMs int64 = 1 << 52
)

// Limit is one rule's parameters. The zero value is invalid; see Validate.
type Limit struct {
	// Algorithm is one of the five algorithms.
	Algorithm Algorithm
	// Limit is the number of units admitted per Window; for the buckets it sets the rate,
	// Limit per Window; for Concurrency it is the number of requests in flight.
	Limit int64
	// Window is the period Limit applies to, a whole number of milliseconds; for Concurrency,
	// how long a holding lasts in a shared store unless renewed.
	Window time.Duration
	// Burst is the bucket capacity for TokenBucket and LeakyBucket; zero means Limit.
	// Ignored by the window algorithms.
	Burst int64
	// Mode is LeakyBucket's mode; empty means Meter. Ignored by the other algorithms.
	Mode LeakyMode
	// MaxDelay is the longest LeakyBucket Queue delays a request, a whole number of
	// milliseconds; zero means no request waits (Queue then admits only into an empty queue).
	MaxDelay time.Duration
	// Period, when set, makes a FixedWindow a calendar window (Day, Week, Month) beginning at
	// local midnight in Zone; Window is then Period.Nominal() and names the period only.
	Period Period
	// Zone is a calendar window's time zone (LoadZone); nil otherwise.
	Zone *time.Location
}

// Name names the algorithm, with the leaky bucket's mode when one is set, e.g.
// "LeakyBucket/Queue": for benchmarks, tests and plots.
func (l Limit) Name() string {
	if l.Period != "" {
		return string(l.Algorithm) + "/" + string(l.Period)
	}
	if l.Algorithm == LeakyBucket && l.Mode != "" {
		return string(l.Algorithm) + "/" + string(l.Mode)
	}
	return string(l.Algorithm)
}

// Variants lists one Limit per algorithm and leaky-bucket mode with the given parameters (burst
// for the buckets, maxDelay for Queue): what benchmarks and differential tests run through.
func Variants(limit int64, window time.Duration, burst int64, maxDelay time.Duration) []Limit {
	return []Limit{
		{Algorithm: FixedWindow, Limit: limit, Window: window},
		{Algorithm: SlidingWindowLog, Limit: limit, Window: window},
		{Algorithm: SlidingWindowCounter, Limit: limit, Window: window},
		{Algorithm: TokenBucket, Limit: limit, Window: window, Burst: burst},
		{Algorithm: LeakyBucket, Limit: limit, Window: window, Burst: burst, Mode: Meter},
		{Algorithm: LeakyBucket, Limit: limit, Window: window, Burst: burst, Mode: Queue, MaxDelay: maxDelay},
	}
}

// Capacity is the most units the limit holds at once: Burst (default Limit) for the buckets,
// Limit for the window algorithms. A request costlier than Capacity can never pass.
func (l Limit) Capacity() int64 {
	if (l.Algorithm == TokenBucket || l.Algorithm == LeakyBucket) && l.Burst > 0 {
		return l.Burst
	}
	return l.Limit
}

// WindowMs is Window in milliseconds.
func (l Limit) WindowMs() int64 { return l.Window.Milliseconds() }

// Validate reports whether l is within the bounds that keep the arithmetic exact.
func (l Limit) Validate() error {
	switch l.Algorithm {
	case FixedWindow, SlidingWindowLog, SlidingWindowCounter, TokenBucket, LeakyBucket, Concurrency:
	default:
		return fmt.Errorf("algorithm %q is not one of FixedWindow, SlidingWindowLog, SlidingWindowCounter, TokenBucket, LeakyBucket, Concurrency", l.Algorithm)
	}
	if l.Limit < 1 || l.Limit > MaxLimit {
		return fmt.Errorf("limit %d is outside 1..%d", l.Limit, MaxLimit)
	}
	if l.Algorithm == SlidingWindowLog && l.Limit > MaxLogLimit {
		return fmt.Errorf("limit %d is above %d, the most SlidingWindowLog keeps per key", l.Limit, MaxLogLimit)
	}
	if l.Period != "" || l.Zone != nil {
		if err := l.validateCalendar(); err != nil {
			return err
		}
	} else if l.Window < MinWindow || l.Window > MaxWindow || l.Window%time.Millisecond != 0 {
		return fmt.Errorf("window %s is not a whole number of milliseconds between %s and %s", l.Window, MinWindow, MaxWindow)
	}
	if l.Burst < 0 || l.Burst > MaxLimit {
		return fmt.Errorf("burst %d is outside 0..%d (0 means limit)", l.Burst, MaxLimit)
	}
	switch l.Mode {
	case "", Meter, Queue:
	default:
		return fmt.Errorf("leaky bucket mode %q is not Meter or Queue", l.Mode)
	}
	if l.MaxDelay < 0 || l.MaxDelay > MaxWindow || l.MaxDelay%time.Millisecond != 0 {
		return fmt.Errorf("maxDelay %s is not a whole number of milliseconds between 0 and %s", l.MaxDelay, MaxWindow)
	}
	return nil
}

// validateCalendar checks a calendar limit's fields.
func (l Limit) validateCalendar() error {
	switch l.Period {
	case Day, Week, Month:
	default:
		return fmt.Errorf("calendar period %q is not Day, Week or Month", l.Period)
	}
	if l.Algorithm != FixedWindow {
		return fmt.Errorf("a calendar period applies only to FixedWindow, not %s", l.Algorithm)
	}
	if l.Zone == nil {
		return errors.New("a calendar period needs a time zone")
	}
	if l.Window != l.Period.Nominal() {
		return fmt.Errorf("window %s of a calendar %s is not %s", l.Window, l.Period, l.Period.Nominal())
	}
	return nil
}

// Result is a decision and what HTTP needs to report it.
type Result struct {
	// Allowed says whether the request may pass (after Delay, for LeakyBucket Queue).
	Allowed bool
	// Limit is the limit's capacity (Limit.Capacity), for RateLimit headers.
	Limit int64
	// Remaining is the number of units that could still pass at this instant after this
	// decision, never negative.
	Remaining int64
	// ResetAfter is the time until the limit is back to its full, unused state
	// (RateLimit "t" / X-RateLimit-Reset).
	ResetAfter time.Duration
	// RetryAfter is, for a denied request, the earliest time after which the same request could
	// pass if nothing else arrives; zero when allowed. -1 (NeverRetry) when it can never pass.
	RetryAfter time.Duration
	// Delay is how long an admitted LeakyBucket Queue request waits before it proceeds; zero
	// otherwise.
	Delay time.Duration
	// Reason says why a request was denied: ReasonLimited, ReasonCostExceedsCapacity,
	// ReasonDelayTooLong or ReasonNoShare; empty when allowed.
	Reason Reason
}

// Reason says why a request was denied.
type Reason string

// The reasons for a denial.
const (
	ReasonLimited             Reason = "limited"
	ReasonCostExceedsCapacity Reason = "cost_exceeds_capacity"
	ReasonDelayTooLong        Reason = "delay_exceeds_max_delay"
	// ReasonNoShare is the data plane's, not an algorithm's: the replica that decided holds
	// no unit of the limit while the shared store cannot decide (its share is 0), so no
	// request passes there until the store is back. RetryAfter is then NeverRetry.
	ReasonNoShare Reason = "no_local_share"
)

// NeverRetry is Result.RetryAfter for a request that no wait lets pass: its cost exceeds the
// capacity, or the replica holds no share (ReasonNoShare).
const NeverRetry time.Duration = -1

// Store decides whether n units fit under lim for key at now, and records them when they do.
// Implementations are safe for concurrent use.
type Store interface {
	Take(ctx context.Context, key string, lim Limit, n int64, now time.Time) (Result, error)
}

// ErrInvalidLimit wraps a Limit that fails Validate or a non-positive cost.
var ErrInvalidLimit = errors.New("invalid limit")

// ErrInvalidTime wraps an instant before the Unix epoch or after MaxNowMs.
var ErrInvalidTime = errors.New("invalid time")
