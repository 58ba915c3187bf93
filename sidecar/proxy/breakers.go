package proxy

import (
	"context"
	"slices"

	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/sidecar/breaker"
)

// MasterLocator is a shared store that can tell which of its servers holds a key
// (redisstore.Store.Master on Redis Cluster): the Handler then keeps one breaker per server, so
// that a master that fails sends only its own keys to the fallback.
type MasterLocator interface {
	// Master is the address of the server holding key's state under lim, or "" when the
	// store is one server (or does not know).
	Master(ctx context.Context, key string, lim limiter.Limit) string
}

// breakers appends to dst the breakers guarding the servers of takes' keys, each once:
// Options.Breaker, or with a MasterLocator and Options.MasterBreaker, one per master.
func (h *Handler) breakers(ctx context.Context, takes []limiter.Take, dst []*breaker.Breaker) []*breaker.Breaker {
	loc, ok := h.opts.Remote.(MasterLocator)
	if !ok || h.opts.MasterBreaker == nil {
		return append(dst, h.opts.Breaker)
	}
	for i := range takes {
		b := h.opts.Breaker
		if addr := loc.Master(ctx, takes[i].Key, takes[i].Limit); addr != "" {
			b = h.masterBreaker(addr)
		}
		if !slices.Contains(dst, b) {
			dst = append(dst, b)
		}
	}
	return dst
}

// masterBreaker returns the breaker of the master at addr, made at its first use.
func (h *Handler) masterBreaker(addr string) *breaker.Breaker {
	if b, ok := h.masters.Load(addr); ok {
		return b.(*breaker.Breaker)
	}
	b, _ := h.masters.LoadOrStore(addr, h.opts.MasterBreaker(addr))
	return b.(*breaker.Breaker)
}

// BreakerState is the worst state of the Handler's breakers (Open over HalfOpen over Closed):
// for the sluice_breaker_state gauge, which says whether any of Redis is being decided without.
func (h *Handler) BreakerState() breaker.State {
	worst := breaker.Closed
	if h.opts.Breaker != nil {
		worst = h.opts.Breaker.State()
	}
	h.masters.Range(func(_, v any) bool {
		worst = max(worst, v.(*breaker.Breaker).State())
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
