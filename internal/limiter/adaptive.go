package limiter

import (
	"sync"
	"time"
)

// Adaptive is one replica's limit on the requests in flight at its application, adapted to the
// latency the application answers with: the gradient idea of Envoy's adaptive_concurrency
// filter and Netflix's concurrency-limits, in integer arithmetic. It is not shared: each replica
// protects its own application.
//
// The latencies of admitted requests are averaged over rounds of max(limit, MinRoundSamples)
// samples. The floor is the lowest round average over the last two epochs of EpochRounds
// rounds (so that it follows an application whose own latency changed, within two epochs).
// At each round's end: a round average within TolerancePct percent of the floor grows the
// limit by about its square root (the queue the application can take without waiting); a
// higher one shrinks it in proportion, limit × floor × TolerancePct / 100 / average, by at
// most half. The limit stays within MinLimit..MaxLimit and starts at MinLimit.
//
// Safe for concurrent use.
type Adaptive struct {
	p AdaptiveParams

	mu       sync.Mutex
	limit    int64
	inflight int64
	// The round: its samples and the sum of their latencies (µs).
	n, sumUs int64
	// The floor's epochs: the lowest round average (µs) of this epoch and of the last (0: none
	// yet), and the rounds of this epoch.
	curMin, prevMin, rounds int64
}

// AdaptiveParams are an Adaptive limit's parameters. Zero fields take the defaults.
type AdaptiveParams struct {
	// MinLimit and MaxLimit bound the limit (defaults DefaultAdaptiveMinLimit and
	// DefaultAdaptiveMaxLimit).
	MinLimit, MaxLimit int64
	// TolerancePct is how far above the floor, in percent of it, a round's average latency
	// still counts as the floor (default DefaultAdaptiveTolerancePct, at least 100).
	TolerancePct int64
}

// The defaults of AdaptiveParams.
const (
	DefaultAdaptiveMinLimit     = 4
	DefaultAdaptiveMaxLimit     = 1000
	DefaultAdaptiveTolerancePct = 125
	// MinRoundSamples is the fewest samples a round averages, so that a small limit's rounds
	// are not one or two samples' noise.
	MinRoundSamples = 10
	// EpochRounds is how many rounds an epoch of the floor lasts.
	EpochRounds = 100
)

// WithDefaults returns p with its zero fields set to the defaults.
func (p AdaptiveParams) WithDefaults() AdaptiveParams {
	if p.MinLimit == 0 {
		p.MinLimit = DefaultAdaptiveMinLimit
	}
	if p.MaxLimit == 0 {
		p.MaxLimit = max(DefaultAdaptiveMaxLimit, p.MinLimit)
	}
	if p.TolerancePct == 0 {
		p.TolerancePct = DefaultAdaptiveTolerancePct
	}
	return p
}

// NewAdaptive returns an Adaptive limit of p (with defaults), at p's MinLimit. It panics when
// p, with its defaults, has MinLimit < 1, MaxLimit < MinLimit, MaxLimit > MaxLimit (the
// package's bound) or TolerancePct < 100: a programming error (the API validates them).
func NewAdaptive(p AdaptiveParams) *Adaptive {
	p = p.WithDefaults()
	if p.MinLimit < 1 || p.MaxLimit < p.MinLimit || p.MaxLimit > MaxLimit || p.TolerancePct < 100 {
		panic("limiter: invalid AdaptiveParams")
	}
	return &Adaptive{p: p, limit: p.MinLimit}
}

// Acquire admits a request while fewer than the limit are in flight, counting it; false sheds
// it. An admitted request is given back with Release, once its response is finished.
func (a *Adaptive) Acquire() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.inflight >= a.limit {
		return false
	}
	a.inflight++
	return true
}

// Release gives back an admitted request's place.
func (a *Adaptive) Release() {
	a.mu.Lock()
	a.inflight = max(a.inflight-1, 0)
	a.mu.Unlock()
}

// Observe records the latency of an admitted request (to its response's head), adapts the
// limit at a round's end, and returns the limit.
func (a *Adaptive) Observe(latency time.Duration) int64 {
	us := max(latency.Microseconds(), 1)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.n++
	a.sumUs += us
	if a.n < max(a.limit, MinRoundSamples) {
		return a.limit
	}
	avg := a.sumUs / a.n
	a.n, a.sumUs = 0, 0
	if a.curMin == 0 || avg < a.curMin {
		a.curMin = avg
	}
	floor := a.curMin
	if a.prevMin != 0 {
		floor = min(floor, a.prevMin)
	}
	if a.rounds++; a.rounds >= EpochRounds {
		a.prevMin, a.curMin, a.rounds = a.curMin, 0, 0
	}
	threshold := floor * a.p.TolerancePct / 100
	if avg <= threshold {
		a.limit += max(isqrt(a.limit), 1)
	} else {
		a.limit = max(a.limit*threshold/avg, a.limit/2)
	}
	a.limit = min(max(a.limit, a.p.MinLimit), a.p.MaxLimit)
	return a.limit
}

// Limit is the current limit.
func (a *Adaptive) Limit() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.limit
}

// InFlight is the number of admitted requests not released yet.
func (a *Adaptive) InFlight() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.inflight
}

// isqrt is floor(sqrt(n)) for n >= 0.
func isqrt(n int64) int64 {
	if n < 2 {
		return n
	}
	x := n
	y := (x + 1) / 2
	for y < x {
		x = y
		y = (x + n/x) / 2
	}
	return x
}
