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
// samples, each of requests admitted since the limit last changed. At each round's end: a round
// average within TolerancePct percent of the floor grows the limit by about its square root
// (the queue the application can take without waiting); a higher one shrinks it in proportion,
// limit × floor × TolerancePct / 100 / average, by at most half. The limit stays within
// MinLimit..MaxLimit and starts at MinLimit.
//
// The floor is the application's latency when it does not queue: the first round's average (at
// MinLimit), then the lowest round average since the last probe. Every EpochRounds rounds a
// probe measures it again: the limit drops to MinLimit for one round, whose average is the new
// floor, and then returns to where it was. Without probes a limit that stays past the knee
// would never see the floor again, and one that learnt its floor there would let the latency
// creep up; with them the floor follows an application whose own latency changed, within an
// epoch, at the cost of one round in EpochRounds at MinLimit.
//
// Safe for concurrent use.
type Adaptive struct {
	p AdaptiveParams

	mu       sync.Mutex
	limit    int64
	inflight int64
	// gen is the limit's generation, counting its changes (see Observe).
	gen Generation
	// The round: its samples and the sum of their latencies (µs).
	n, sumUs int64
	// floor is the floor (µs; 0 until the first round ends), rounds the rounds since the last
	// probe. While probing, resume is the limit to return to once the probe's round ends.
	floor, rounds int64
	probing       bool
	resume        int64
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

// Generation counts an Adaptive limit's changes: a request admitted under one limit says
// nothing about another (see Observe).
type Generation int64

// Acquire admits a request while fewer than the limit are in flight, counting it, and returns
// the limit's generation to pass to Observe; false sheds it. An admitted request is given back
// with Release, once its response is finished.
func (a *Adaptive) Acquire() (Generation, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.inflight >= a.limit {
		return 0, false
	}
	a.inflight++
	return a.gen, true
}

// Release gives back an admitted request's place.
func (a *Adaptive) Release() {
	a.mu.Lock()
	a.inflight = max(a.inflight-1, 0)
	a.mu.Unlock()
}

// Observe records the latency of a request admitted in generation gen (to its response's
// head), adapts the limit at a round's end, and returns the limit. A request admitted before
// the limit last changed is not a sample: its latency is that of the load the old limit let
// in, and counting it would make one change the cause of the next (a limit that grew would
// grow again on latencies from before, and one that shrank shrink again), so the limit would
// swing past the application's knee and back rather than settle.
func (a *Adaptive) Observe(latency time.Duration, gen Generation) int64 {
	us := max(latency.Microseconds(), 1)
	a.mu.Lock()
	defer a.mu.Unlock()
	if gen != a.gen {
		return a.limit
	}
	a.n++
	a.sumUs += us
	if a.n < max(a.limit, MinRoundSamples) {
		return a.limit
	}
	avg := a.sumUs / a.n
	a.n, a.sumUs = 0, 0
	switch {
	case a.probing: // the probe's round, at MinLimit: the floor now
		a.floor, a.probing, a.rounds = avg, false, 0
		a.setLimit(a.resume)
		return a.limit
	case a.floor == 0 || avg < a.floor:
		a.floor = avg
	}
	if a.rounds++; a.rounds >= EpochRounds {
		if a.limit == a.p.MinLimit { // this round was at MinLimit: a probe already
			a.floor, a.rounds = avg, 0
		} else {
			a.probing, a.resume = true, a.limit
			a.setLimit(a.p.MinLimit)
			return a.limit
		}
	}
	threshold := a.floor * a.p.TolerancePct / 100
	limit := a.limit
	if avg <= threshold {
		limit += max(isqrt(limit), 1)
	} else {
		limit = max(limit*threshold/avg, limit/2)
	}
	a.setLimit(min(max(limit, a.p.MinLimit), a.p.MaxLimit))
	return a.limit
}

// setLimit sets the limit, starting a new generation when it changes.
func (a *Adaptive) setLimit(limit int64) {
	if limit != a.limit {
		a.limit = limit
		a.gen++
	}
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
