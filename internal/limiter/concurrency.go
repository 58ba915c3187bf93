package limiter

import (
	"context"
	"hash/maphash"
	"math"
	"time"
)

// Concurrency bounds the requests in flight per key rather than their rate: a request holds
// one slot of its key from admission until its response is finished, when its front end
// releases the slot (SlotStore.Release). Limit is the number of slots; Window is how long a
// holding lasts in a shared store without being renewed, so that the slots of a replica that
// died are freed after it (the in-process MemoryStore never expires a holding: its holder
// releases it or the process is gone). A Concurrency take's cost is always 1.
const Concurrency Algorithm = "Concurrency"

// ConcurrencyRetryAfter is the RetryAfter of a request denied for lack of a slot. When a slot
// frees depends on requests already in flight, which no store knows; one second, the
// smallest whole Retry-After, tells a client to come back soon rather than at a time that
// would promise anything.
const ConcurrencyRetryAfter = time.Second

// SlotStore holds concurrency slots: a store whose TakeRequest admits Concurrency takes
// releases their slots with Release. Implementations are safe for concurrent use.
type SlotStore interface {
	// Release gives back the slot that take {Key: key, Limit: lim, Holder: holder} of an
	// admitted request holds. A shared store names each holding by its holder, so that a
	// release retried after an error (or after the holding expired) changes nothing and is
	// never counted twice; MemoryStore only counts its holdings, and its caller releases
	// each once.
	Release(ctx context.Context, key string, lim Limit, holder int64) error
}

// ConcurrencyState is a Concurrency key's state: the slots held.
type ConcurrencyState struct {
	Held int64
}

// Take decides a request of cost c (1) for a slot: admitted while fewer than Limit are held.
// It ignores now: holdings do not age in memory.
func (s *ConcurrencyState) Take(lim Limit, c int64) Result { return s.take(&lim, c) }

func (s *ConcurrencyState) take(lim *Limit, c int64) Result {
	L := lim.Limit
	if c > L {
		return costExceedsCapacity(L)
	}
	if s.Held+c <= L {
		s.Held += c
		return Result{Allowed: true, Limit: L, Remaining: L - s.Held}
	}
	return Result{Limit: L, Remaining: max(0, L-s.Held), RetryAfter: ConcurrencyRetryAfter, Reason: ReasonLimited}
}

// expiry is when a Concurrency entry's state equals a fresh key's: never while a slot is held
// (so that neither eviction nor Sweep prefers it), at once otherwise.
func (s *ConcurrencyState) expiry(now int64) int64 {
	if s.Held > 0 {
		return math.MaxInt64
	}
	return now
}

var _ SlotStore = (*MemoryStore)(nil)

// Release implements SlotStore: one slot of key fewer held, if any is. holder is not used:
// the process that holds a MemoryStore's slots releases each once.
func (m *MemoryStore) Release(_ context.Context, key string, _ Limit, _ int64) error {
	sh := &m.shards[maphash.String(m.seed, key)&m.mask]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.entries[key]
	if e == nil || e.kind != kindConcurrency {
		return nil
	}
	if e.slots.Held > 0 {
		e.slots.Held--
	}
	if e.slots.Held == 0 {
		e.expiresAt = 0
	}
	return nil
}

// Hold counts one slot of key under lim as held whether or not it fits: a slot its holder
// took elsewhere (in Redis), counted here too so that, should the holder have to decide in
// this store, its own holdings count. Release gives it back.
func (m *MemoryStore) Hold(key string, lim Limit) {
	sh := &m.shards[maphash.String(m.seed, key)&m.mask]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.entries[key]
	if e == nil {
		e = new(memoryEntry)
		sh.makeRoom(0)
		sh.entries[key] = e
	}
	if e.lim != lim {
		e.adapt(lim)
	}
	e.slots.Held++
	e.expiresAt = e.slots.expiry(0)
}
