package limiter

import (
	"context"
	"fmt"
	"hash/maphash"
	"math"
	"sync"
	"time"
)

// DefaultMaxKeys is MemoryStoreOptions.MaxKeys when it is zero.
const DefaultMaxKeys = 100_000

// DefaultMaxLogEntries is MemoryStoreOptions.MaxLogEntries when it is zero: 64 MiB of
// SlidingWindowLog entries (16 bytes each).
const DefaultMaxLogEntries = 4 << 20

// evictionSample is how many entries of a full shard are looked at to make room for a new key.
const evictionSample = 32

// MemoryStoreOptions configures NewMemoryStore.
type MemoryStoreOptions struct {
	// MaxKeys bounds the number of keys held at once; zero means DefaultMaxKeys. Keys come from
	// clients, so the bound is what keeps an attacker who invents keys from exhausting memory.
	MaxKeys int
	// MaxLogEntries bounds the SlidingWindowLog entries held over all keys (each key's log can
	// grow to its limit, up to MaxLogLimit); zero means DefaultMaxLogEntries. The bound is
	// kept per shard; one key's own log is never shed to make room for itself.
	MaxLogEntries int
}

// MemoryStore is a Store that keeps each key's state in process memory: the sidecar's fallback
// when Redis is unreachable, and the simulator's engine. It is safe for concurrent use.
//
// Keys are spread over shards, each with its own mutex and map. At most MaxKeys keys are held.
// A key whose state has gone back to that of a fresh key (after its ResetAfter) is expired and
// may be dropped at any time without changing a decision. To make room for a new key in a full
// shard, the store drops the expired entries among a sample of the shard's entries, or if there
// are none, the sampled entry closest to expiry: a flood of new keys can then only make live
// keys forget their state early, never grow memory. SlidingWindowLog entries are bounded the
// same way by MaxLogEntries: when a log grows past the shard's share, other keys' logs are
// dropped. Taking on an existing key does not allocate (but for a growing log).
//
// An entry remembers the Limit it was last used with. When a key is used with a different Limit
// (a policy was edited, a tenant's limit changed): if the Algorithm, Window, Mode or calendar
// (Period, Zone) changed the state means something else, and the key starts fresh; if the
// state had gone back to a fresh key's under the old Limit (its ResetAfter has passed), the key
// starts fresh too, as it does in Redis, where the state expired with that ResetAfter as its
// TTL; otherwise (Limit, Burst or MaxDelay changed) the state is kept and the transitions
// adapt it: counts are compared to the new limit, a bucket's content is clamped to the new
// capacity and refills (or leaks) at the new rate since the key's last decision.
type MemoryStore struct {
	shards []memoryShard
	mask   uint64
	seed   maphash.Seed
}

type memoryShard struct {
	mu      sync.Mutex
	entries map[string]*memoryEntry
	maxKeys int
	// logEntries is the capacity of the logs held; maxLogEntries its bound.
	logEntries, maxLogEntries int
	_                         [24]byte // keep shards on separate cache lines
}

type memoryEntry struct {
	lim       Limit
	kind      kind  // lim.Algorithm and Mode, for a switch without string compares
	expiresAt int64 // ms since the epoch; from then on the state equals a fresh key's
	latest    int64 // the latest instant the key was decided at, ms since the epoch
	fixed     FixedWindowState
	calendar  CalendarWindowState
	counter   SlidingWindowCounterState
	tokens    TokenBucketState
	leaky     LeakyBucketState
	log       *SlidingWindowLogState
	slots     ConcurrencyState
}

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore(opts MemoryStoreOptions) *MemoryStore {
	maxKeys := opts.MaxKeys
	if maxKeys <= 0 {
		maxKeys = DefaultMaxKeys
	}
	maxLog := opts.MaxLogEntries
	if maxLog <= 0 {
		maxLog = DefaultMaxLogEntries
	}
	n := 64 // shards; fewer for a small bound, so that each holds at least 16 keys to choose from
	for n > 1 && n*16 > maxKeys {
		n /= 2
	}
	m := &MemoryStore{shards: make([]memoryShard, n), mask: uint64(n - 1), seed: maphash.MakeSeed()}
	for i := range m.shards {
		sh := &m.shards[i]
		sh.maxKeys = maxKeys / n
		if i < maxKeys%n {
			sh.maxKeys++
		}
		sh.maxLogEntries = max(1, maxLog/n)
		sh.entries = make(map[string]*memoryEntry)
	}
	return m
}

// Take implements Store. now is truncated to the millisecond; it must be between the Unix epoch
// and MaxNowMs (else the error wraps ErrInvalidTime). An invalid lim or n < 1 gives an error
// wrapping ErrInvalidLimit. ctx is not used: Take never blocks on anything but a shard's mutex.
func (m *MemoryStore) Take(_ context.Context, key string, lim Limit, n int64, now time.Time) (Result, error) {
	nowMs := now.UnixMilli()
	if nowMs < 0 || nowMs > MaxNowMs {
		return Result{}, fmt.Errorf("%w: %s is outside the Unix epoch .. %d ms", ErrInvalidTime, now, MaxNowMs)
	}
	if n < 1 {
		return Result{}, fmt.Errorf("%w: cost %d is below 1", ErrInvalidLimit, n)
	}
	sh := &m.shards[maphash.String(m.seed, key)&m.mask]
	sh.mu.Lock()
	e := sh.entries[key]
	if e != nil && e.lim == lim {
		before := e.logEntries()
		r := e.take(n, nowMs)
		sh.logGrew(key, e.logEntries()-before)
		sh.mu.Unlock()
		return r, nil
	}
	if err := lim.Validate(); err != nil {
		sh.mu.Unlock()
		return Result{}, fmt.Errorf("%w: %w", ErrInvalidLimit, err)
	}
	if e != nil && e.expiredFor(lim, nowMs) {
		sh.drop(key, e)
		e = nil
	}
	if e != nil {
		before := e.logEntries()
		e.adapt(lim)
		r := e.take(n, nowMs)
		sh.logGrew(key, e.logEntries()-before)
		sh.mu.Unlock()
		return r, nil
	}
	e = new(memoryEntry)
	e.adapt(lim)
	r := e.take(n, nowMs)
	if e.expiresAt > nowMs { // a request that leaves the key fresh need not be remembered
		sh.makeRoom(nowMs)
		sh.entries[key] = e
		sh.logGrew(key, e.logEntries())
	}
	sh.mu.Unlock()
	return r, nil
}

// kind is an entry's transition.
type kind uint8

const (
	kindFixedWindow kind = iota
	kindSlidingWindowLog
	kindSlidingWindowCounter
	kindTokenBucket
	kindLeakyMeter
	kindLeakyQueue
	kindCalendar
	kindConcurrency
)

// take applies e's transition and records when its state will be a fresh key's again.
func (e *memoryEntry) take(c, now int64) Result {
	e.latest = max(e.latest, now)
	var r Result
	switch e.kind {
	case kindFixedWindow:
		r = e.fixed.take(&e.lim, c, now)
	case kindCalendar:
		start, end := e.lim.CalendarBounds(now)
		r = e.calendar.take(&e.lim, c, now, start, end)
	case kindSlidingWindowCounter:
		r = e.counter.take(&e.lim, c, now)
	case kindTokenBucket:
		r = e.tokens.take(&e.lim, c, now)
	case kindLeakyMeter:
		r = e.leaky.takeMeter(&e.lim, c, now)
	case kindLeakyQueue:
		r = e.leaky.takeQueue(&e.lim, c, now)
	case kindConcurrency:
		r = e.slots.take(&e.lim, c)
		e.expiresAt = e.slots.expiry(now)
		return r
	default:
		if e.log == nil {
			e.log = new(SlidingWindowLogState)
		}
		r = e.log.take(&e.lim, c, now)
	}
	e.expiresAt = now + r.ResetAfter.Milliseconds()
	return r
}

// logEntries is the capacity of e's log, what it holds in memory.
func (e *memoryEntry) logEntries() int {
	if e.log == nil {
		return 0
	}
	return len(e.log.ring)
}

// logGrew accounts for key's log having changed by delta entries and, when the shard is over
// its bound, drops other keys' logs (their keys start fresh) until it is not.
func (sh *memoryShard) logGrew(key string, delta int) {
	if delta == 0 {
		return
	}
	sh.logEntries += delta
	sh.shed(key)
}

// shed drops other keys' logs than key's while the shard's logs are over their bound.
func (sh *memoryShard) shed(key string) {
	if sh.logEntries <= sh.maxLogEntries {
		return
	}
	for k, e := range sh.entries {
		if k != key && e.log != nil {
			sh.drop(k, e)
			if sh.logEntries <= sh.maxLogEntries {
				return
			}
		}
	}
}

// drop forgets a key.
func (sh *memoryShard) drop(k string, e *memoryEntry) {
	sh.logEntries -= e.logEntries()
	delete(sh.entries, k)
}

// expiredFor reports whether e, about to be used with lim at now, is to be forgotten: it was
// last used with another Limit and its state is back to a fresh key's under that Limit (expired
// by now, or by the latest instant it was decided at when the clock went back). Such a key
// starts fresh, as in Redis, where its state has expired; see MemoryStore.
func (e *memoryEntry) expiredFor(lim Limit, now int64) bool {
	return e.lim != lim && e.expiresAt <= max(now, e.latest)
}

// live returns key's entry, to be used with lim at now, or nil when there is none or it is
// expiredFor lim (it is then dropped).
func (sh *memoryShard) live(key string, lim Limit, now int64) *memoryEntry {
	e := sh.entries[key]
	if e != nil && e.expiredFor(lim, now) {
		sh.drop(key, e)
		return nil
	}
	return e
}

// adapt moves e to lim (valid, different from e.lim); see MemoryStore.
func (e *memoryEntry) adapt(lim Limit) {
	// A Concurrency key's holdings stay held when its expiry changes: they are released one
	// by one.
	if lim.Algorithm != e.lim.Algorithm || (lim.Window != e.lim.Window && lim.Algorithm != Concurrency) || lim.Mode != e.lim.Mode ||
		lim.Period != e.lim.Period || lim.Zone != e.lim.Zone {
		*e = memoryEntry{}
	}
	e.lim = lim
	switch lim.Algorithm {
	case FixedWindow:
		e.kind = kindFixedWindow
		if lim.Period != "" {
			e.kind = kindCalendar
		}
	case SlidingWindowLog:
		e.kind = kindSlidingWindowLog
	case SlidingWindowCounter:
		e.kind = kindSlidingWindowCounter
	case TokenBucket:
		e.kind = kindTokenBucket
	case Concurrency:
		e.kind = kindConcurrency
	case LeakyBucket:
		e.kind = kindLeakyMeter
		if lim.Mode == Queue {
			e.kind = kindLeakyQueue
		}
	}
}

// makeRoom drops an entry if the shard is full: the expired ones among a sample, or else the
// sampled one closest to expiry. Go's map iteration starts at a random place, so the sample is
// not one an attacker can aim at.
func (sh *memoryShard) makeRoom(now int64) {
	if len(sh.entries) < sh.maxKeys {
		return
	}
	victim, victimExpiry, dropped, seen := "", int64(math.MaxInt64), false, 0
	for k, e := range sh.entries {
		if e.expiresAt <= now {
			sh.drop(k, e)
			dropped = true
		} else if e.expiresAt < victimExpiry {
			victim, victimExpiry = k, e.expiresAt
		}
		if seen++; seen == evictionSample {
			break
		}
	}
	if !dropped {
		sh.drop(victim, sh.entries[victim])
	}
}

// Sweep drops every expired key and returns how many it dropped. Calling it now and then
// returns the memory of keys that stopped sending before the bound forces it; it never changes
// a decision.
func (m *MemoryStore) Sweep(now time.Time) int {
	nowMs, dropped := now.UnixMilli(), 0
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		for k, e := range sh.entries {
			if e.expiresAt <= nowMs {
				sh.drop(k, e)
				dropped++
			}
		}
		sh.mu.Unlock()
	}
	return dropped
}

// Len is the number of keys held, expired or not.
func (m *MemoryStore) Len() int {
	n := 0
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		n += len(sh.entries)
		sh.mu.Unlock()
	}
	return n
}
