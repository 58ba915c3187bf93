// Package breaker is the circuit breaker in front of Redis: after Threshold consecutive
// failures it opens, so an outage costs requests no timeouts; after a cooldown it half-opens
// and lets one probe call through; the probe's success closes it, its failure reopens it with
// the cooldown doubled (up to MaxCooldown).
package breaker

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"
)

// State is a breaker's state.
type State int32

// The states. The values are those of the sluice_breaker_state gauge.
const (
	Closed   State = 0
	HalfOpen State = 1
	Open     State = 2
)

func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case HalfOpen:
		return "half-open"
	case Open:
		return "open"
	}
	return "unknown"
}

// Defaults for Options.
const (
	DefaultThreshold   = 3
	DefaultCooldown    = time.Second
	DefaultMaxCooldown = 4 * time.Second
)

// Options configures a Breaker. Zero fields take the defaults.
type Options struct {
	// Threshold is the number of consecutive failures that opens the breaker.
	Threshold int
	// Cooldown is how long the breaker stays open after it first opens.
	Cooldown time.Duration
	// MaxCooldown bounds the cooldown, which doubles each time a probe fails.
	MaxCooldown time.Duration
	// Clock times the cooldown; nil means the real clock. Tests inject a fake one.
	Clock clock.PassiveClock
	// Jitter draws each cooldown uniformly from [cooldown/2, cooldown), so that the breakers of
	// a fleet that opened at one instant (Redis went away for all of them) do not probe, and
	// reconnect, at one instant.
	Jitter bool
	// OnTransition is called, with the breaker's lock held, on every state change. It must not
	// call the breaker's Allow, Success, Failure or Release.
	OnTransition func(from, to State, cooldown time.Duration)
}

// Breaker is a circuit breaker. It is safe for concurrent use; Allow and Success on a closed,
// healthy breaker take no lock.
type Breaker struct {
	state atomic.Int32 // State, readable without the lock
	fails atomic.Int32 // consecutive failures while closed

	mu        sync.Mutex
	opts      Options
	cooldown  time.Duration // current cooldown
	openUntil time.Time
	probing   bool // a half-open probe is in flight
}

// New returns a closed Breaker.
func New(opts Options) *Breaker {
	if opts.Threshold <= 0 {
		opts.Threshold = DefaultThreshold
	}
	if opts.Cooldown <= 0 {
		opts.Cooldown = DefaultCooldown
	}
	if opts.MaxCooldown < opts.Cooldown {
		opts.MaxCooldown = max(DefaultMaxCooldown, opts.Cooldown)
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return &Breaker{opts: opts, cooldown: opts.Cooldown}
}

// State returns the current state. An open breaker whose cooldown has passed still reports Open
// until the next Allow half-opens it.
func (b *Breaker) State() State { return State(b.state.Load()) }

// Allow reports whether a call may go to Redis. Closed: always. Open: no, until the cooldown
// has passed; then the breaker half-opens and this caller is the probe. Half-open: only the one
// probe; everyone else falls back. A caller that got true must report the call's outcome with
// Success, Failure or Release.
func (b *Breaker) Allow() bool {
	if State(b.state.Load()) == Closed {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch State(b.state.Load()) {
	case Closed:
		return true
	case Open:
		if b.opts.Clock.Now().Before(b.openUntil) {
			return false
		}
		b.setLocked(HalfOpen)
		b.probing = true
		return true
	default: // HalfOpen
		if b.probing {
			return false
		}
		b.probing = true
		return true
	}
}

// Success records a call Redis answered. It closes a half-open breaker and resets the failure
// count and the cooldown.
func (b *Breaker) Success() {
	if State(b.state.Load()) == Closed && b.fails.Load() == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch State(b.state.Load()) {
	case Closed:
		b.fails.Store(0)
	case HalfOpen:
		b.probing = false
		b.fails.Store(0)
		b.cooldown = b.opts.Cooldown
		b.setLocked(Closed)
	case Open:
		// A call that started before the breaker opened; the probe decides.
	}
}

// Failure records a call Redis did not answer in time. The Threshold-th consecutive one opens
// a closed breaker; a failed probe reopens a half-open one with the cooldown doubled.
func (b *Breaker) Failure() {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch State(b.state.Load()) {
	case Closed:
		if int(b.fails.Add(1)) >= b.opts.Threshold {
			b.cooldown = b.opts.Cooldown
			b.openLocked()
		}
	case HalfOpen:
		b.probing = false
		b.cooldown = min(2*b.cooldown, b.opts.MaxCooldown)
		b.openLocked()
	case Open:
	}
}

// Release ends a call that says nothing about Redis (the client went away first). A half-open
// breaker then lets the next caller probe.
func (b *Breaker) Release() {
	if State(b.state.Load()) != HalfOpen {
		return
	}
	b.mu.Lock()
	b.probing = false
	b.mu.Unlock()
}

func (b *Breaker) openLocked() {
	b.fails.Store(0)
	cd := b.cooldown
	if b.opts.Jitter && cd > 1 {
		cd -= rand.N(cd / 2) //nolint:gosec // jitter, not a secret
	}
	b.openUntil = b.opts.Clock.Now().Add(cd)
	b.setLocked(Open)
}

func (b *Breaker) setLocked(to State) {
	from := State(b.state.Load())
	b.state.Store(int32(to))
	if from != to && b.opts.OnTransition != nil {
		b.opts.OnTransition(from, to, b.cooldown)
	}
}
