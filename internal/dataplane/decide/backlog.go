package decide

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-dev/sluice/internal/limiter"
)

// This file keeps the usage a sidecar admits on its local share while Redis cannot decide, and
// charges it to Redis once Redis answers again, so that a client that spent its share during an
// outage does not find a fresh budget when Redis is back.

// Charger is a shared store that can be charged usage decided elsewhere without deciding
// anything (redisstore.Store.Charge). When Options.Remote is one, the Decider keeps a backlog.
type Charger interface {
	AddUsage(ctx context.Context, key string, lim limiter.Limit, n int64, now time.Time) (int64, error)
}

// Defaults of the backlog's bounds (Options.BacklogMaxKeys, Options.BacklogMaxBytes).
const (
	DefaultBacklogMaxKeys  = limiter.DefaultMaxKeys
	DefaultBacklogMaxBytes = 16 << 20
)

// backlogEntryBytes is what a backlog entry costs besides its key's bytes, roughly: the map
// slot, the key's string header and the limit.
const backlogEntryBytes = 160

type backlogKey struct {
	key string
	lim limiter.Limit // the shared limit, not the share
}

type backlogEntry struct {
	units int64 // admitted, at most the limit's capacity
	last  int64 // ms of the latest admission
	win   int64 // the window algorithms: the window (of the latest admission) units count in
}

// backlog is the usage admitted locally, per key and shared limit, until it is charged. It is
// bounded by maxKeys keys and maxBytes bytes (keys' bytes plus backlogEntryBytes each): an
// admission on a new key beyond them is not kept (counted as dropped). Safe for concurrent use.
type backlog struct {
	charger  Charger
	maxKeys  int
	maxBytes int
	units    func(outcome string, n int64) // metrics

	mu      sync.Mutex
	m       map[backlogKey]backlogEntry
	bytes   int
	pending atomic.Bool  // m is not empty
	running atomic.Bool  // a flush is in progress
	retryAt atomic.Int64 // ms before which no flush starts, after one failed
}

// backlogRetry is how long after a flush that failed the next may start: a master still down
// (on Redis Cluster the others answer meanwhile) is not asked again at every request.
const backlogRetry = time.Second

// due reports whether a flush should start at now: usage is waiting, none is running, and the
// last failed long enough ago.
func (b *backlog) due(now time.Time) bool {
	return b.pending.Load() && !b.running.Load() && now.UnixMilli() >= b.retryAt.Load()
}

func newBacklog(c Charger, maxKeys, maxBytes int, units func(string, int64)) *backlog {
	if maxKeys <= 0 {
		maxKeys = DefaultBacklogMaxKeys
	}
	if maxBytes <= 0 {
		maxBytes = DefaultBacklogMaxBytes
	}
	return &backlog{charger: c, maxKeys: maxKeys, maxBytes: maxBytes, units: units, m: map[backlogKey]backlogEntry{}}
}

// windowed reports whether lim counts units per fixed window (FixedWindow, SlidingWindowCounter).
func windowed(lim limiter.Limit) bool {
	return lim.Algorithm == limiter.FixedWindow || lim.Algorithm == limiter.SlidingWindowCounter
}

// add records n units admitted on key under the shared limit lim at nowMs. The window
// algorithms keep only the units of the latest admission's window: those of an earlier window
// no longer count (for SlidingWindowCounter they still would, weighted, in the next window; the
// backlog forgets them, erring towards the client by at most one window's share).
func (b *backlog) add(key string, lim limiter.Limit, n, nowMs int64) {
	k := backlogKey{key: key, lim: lim}
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.m[k]
	if !ok {
		size := len(key) + backlogEntryBytes
		if len(b.m) >= b.maxKeys || b.bytes+size > b.maxBytes {
			b.units("dropped", n)
			return
		}
		b.bytes += size
	}
	if windowed(lim) {
		if w := nowMs / lim.WindowMs(); w != e.win {
			if e.units > 0 {
				b.units("expired", e.units)
			}
			e.units, e.win = 0, w
		}
	}
	e.units = min(e.units+n, lim.Capacity())
	e.last = max(e.last, nowMs)
	b.m[k] = e
	b.pending.Store(true)
}

// chargeable is how many of e's units still count at nowMs: none once their window has passed
// (the window algorithms: another window; SlidingWindowLog: a window after the latest
// admission), and for the buckets the units less what the limit refilled (leaked) since the
// latest admission, which is no more than it refilled since any of them: charged at nowMs, they
// then leave the bucket no fuller than had each been charged when it was admitted.
func chargeable(lim limiter.Limit, e backlogEntry, nowMs int64) int64 {
	w := lim.WindowMs()
	switch {
	case windowed(lim):
		if nowMs/w != e.win {
			return 0
		}
		return e.units
	case lim.Algorithm == limiter.SlidingWindowLog:
		if nowMs-e.last >= w {
			return 0
		}
		return e.units
	}
	dt := max(nowMs-e.last, 0)
	if dt >= (e.units*w+lim.Limit-1)/lim.Limit { // all of it refilled; e.units*w <= 8.64e15
		return 0
	}
	return e.units - dt*lim.Limit/w // dt*Limit < e.units*w
}

// flush charges the backlog to Redis, one Charge per key, unless a flush is already running.
// A Charge that fails puts that key and the ones not yet charged back, for the next flush.
func (b *backlog) flush(now time.Time) (keys int, err error) {
	if !b.running.CompareAndSwap(false, true) {
		return 0, nil
	}
	defer b.running.Store(false)
	b.mu.Lock()
	m := b.m
	b.m, b.bytes = make(map[backlogKey]backlogEntry, min(len(m), 1024)), 0
	b.pending.Store(false)
	b.mu.Unlock()

	nowMs := now.UnixMilli()
	for k, e := range m {
		if err != nil {
			b.putBack(k, e)
			continue
		}
		n := chargeable(k.lim, e, nowMs)
		if n <= 0 {
			b.units("expired", e.units)
			continue
		}
		got, cerr := b.charger.AddUsage(context.Background(), k.key, k.lim, n, now)
		if cerr != nil {
			err = cerr
			b.retryAt.Store(nowMs + backlogRetry.Milliseconds())
			b.putBack(k, e)
			continue
		}
		keys++
		b.units("charged", got)
		if e.units > got {
			b.units("expired", e.units-got)
		}
	}
	return keys, err
}

// putBack returns an entry a flush took but could not charge, merged with what was added since.
func (b *backlog) putBack(k backlogKey, e backlogEntry) {
	b.mu.Lock()
	defer b.mu.Unlock()
	cur, ok := b.m[k]
	if !ok {
		b.bytes += len(k.key) + backlogEntryBytes
		b.m[k] = e
		b.pending.Store(true)
		return
	}
	if windowed(k.lim) && cur.win != e.win {
		return // a later window's units replaced these
	}
	cur.units = min(cur.units+e.units, k.lim.Capacity())
	cur.last = max(cur.last, e.last)
	b.m[k] = cur
}
