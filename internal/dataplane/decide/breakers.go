package decide

import (
	"context"
	"slices"
	"sync/atomic"
	"time"

	"github.com/sluice-dev/sluice/internal/dataplane/breaker"
	"github.com/sluice-dev/sluice/internal/limiter"
)

// MasterLocator is a shared store that can tell which of its servers holds a key
// (redisstore.Store.Master on Redis Cluster): the Decider then keeps one breaker per server, so
// that a master that fails sends only its own keys to the fallback.
type MasterLocator interface {
	// Master is the address of the server holding key's state under lim, or "" when the
	// store is one server (or does not know).
	Master(ctx context.Context, key string, lim limiter.Limit) string
}

// breakers appends to dst the breakers guarding the servers of takes' keys, each once:
// Options.Breaker, or with a MasterLocator and Options.MasterBreaker, one per master.
func (d *Decider) breakers(ctx context.Context, takes []limiter.Take, dst []*breaker.Breaker) []*breaker.Breaker {
	loc, ok := d.opts.Remote.(MasterLocator)
	if !ok || d.opts.MasterBreaker == nil {
		return append(dst, d.opts.Breaker)
	}
	for i := range takes {
		b := d.opts.Breaker
		if addr := loc.Master(ctx, takes[i].Key, takes[i].Limit); addr != "" {
			b = d.masterBreaker(addr)
		}
		if !slices.Contains(dst, b) {
			dst = append(dst, b)
		}
	}
	return dst
}

// masterStale is how long a master's breaker is kept without a request for its keys. After
// a failover the failed master's address has no keys any more, and its breaker, left open,
// would hold sluice_breaker_state at open; a master that is still in use is asked by every
// request on its keys, so only an idle one is dropped (made again, closed, at its next use).
const masterStale = 5 * time.Second

// masterEntry is a master's breaker and when it was last asked for (ms).
type masterEntry struct {
	b    *breaker.Breaker
	used atomic.Int64
}

// masterBreaker returns the breaker of the master at addr, made at its first use, and drops
// the stale ones (at most once a second).
func (d *Decider) masterBreaker(addr string) *breaker.Breaker {
	nowMs := d.opts.Clock.Now().UnixMilli()
	if last := d.pruned.Load(); nowMs-last >= 1000 && d.pruned.CompareAndSwap(last, nowMs) {
		d.pruneMasters(nowMs)
	}
	v, ok := d.masters.Load(addr)
	if !ok {
		e := &masterEntry{b: d.opts.MasterBreaker(addr)}
		v, _ = d.masters.LoadOrStore(addr, e)
	}
	e := v.(*masterEntry)
	e.used.Store(nowMs)
	return e.b
}

// pruneMasters drops the breakers not asked for within masterStale and, when one was not
// closed, updates sluice_breaker_state to the worst state left.
func (d *Decider) pruneMasters(nowMs int64) {
	dropped := false
	d.masters.Range(func(k, v any) bool {
		e := v.(*masterEntry)
		if nowMs-e.used.Load() > masterStale.Milliseconds() {
			d.masters.Delete(k)
			dropped = dropped || e.b.State() != breaker.Closed
		}
		return true
	})
	if dropped {
		d.opts.Metrics.BreakerState.Set(float64(d.BreakerState()))
	}
}

// BreakerState is the worst state of the Decider's breakers (Open over HalfOpen over Closed):
// for the sluice_breaker_state gauge, which says whether any of Redis is being decided without.
func (d *Decider) BreakerState() breaker.State {
	worst := breaker.Closed
	if d.opts.Breaker != nil {
		worst = d.opts.Breaker.State()
	}
	d.masters.Range(func(_, v any) bool {
		worst = max(worst, v.(*masterEntry).b.State())
		return true
	})
	return worst
}

// allow asks every breaker of a request whether it may go to Redis: only if all allow. The
// ones that allowed are released when another refuses (a half-open one then lets the next
// caller probe).
func allow(brks []*breaker.Breaker) bool {
	for i, b := range brks {
		if !b.Allow() {
			for _, a := range brks[:i] {
				a.Release()
			}
			return false
		}
	}
	return true
}
