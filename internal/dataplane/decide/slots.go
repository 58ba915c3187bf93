package decide

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-dev/sluice/internal/dataplane/config"
	"github.com/sluice-dev/sluice/internal/limiter"
)

// Concurrency slots. An admitted request whose Concurrency rules took slots gets a Holding
// (Verdict.Hold), which its front end releases once the response is finished: the last body
// byte written, a stream or tunnel closed, the client gone, the upstream failed.
//
// Every slot a replica holds is counted in its local store, under its share of the limit,
// wherever it was taken: so while Redis cannot decide, the replica admits only while all its
// requests in flight, those admitted through Redis before included, are within its share.
// Slots taken in Redis are renewed there while held (RenewSlots, every third of their
// expiry), so they outlive a replica that dies by at most their expiry. Once Redis answers
// again after it could not be reached, the next RenewSlots renews every slot held, those taken
// locally and those Redis may have lost alike, so that they count there until released.

// SlotRenewer renews holdings in the shared store (redisstore.Store): each is held, expiring
// its limit's Window after now, whether the store still had it or not.
type SlotRenewer interface {
	Renew(ctx context.Context, key string, lim limiter.Limit, holders []int64, now time.Time) (int, error)
}

// remoteSlots is the shared store's side of Concurrency slots (redisstore.Store): ReleaseAsync
// releases without the request's end waiting for Redis's answer, calling failed with the error
// of a release that did not reach it; Release, waited for, retries it.
type remoteSlots interface {
	limiter.SlotStore
	ReleaseAsync(key string, lim limiter.Limit, holder int64, failed func(error))
}

// slotHolder counts slots taken elsewhere (limiter.MemoryStore.Hold).
type slotHolder interface {
	Hold(key string, lim limiter.Limit)
}

// Holding is the Concurrency slots one admitted request holds. Release gives them back; it is
// idempotent and safe for concurrent use.
type Holding struct {
	d     *Decider
	slots []slot
	done  atomic.Bool
}

// slot is one rule's slot of a Holding.
type slot struct {
	rule   *config.Rule
	key    string
	holder int64
	// remote is true once the slot is held in Redis (taken or renewed there), under d.slots.mu.
	remote bool
	// renewed is when the slot was taken or last renewed (the Decider's clock), under
	// d.slots.mu.
	renewed time.Time
}

// holdings is the Decider's register of the Holdings not yet released.
type holdings struct {
	mu   sync.Mutex
	live map[*Holding]struct{}
	// next numbers the holdings (limiter.Take.Holder), never reused while the process runs.
	next atomic.Int64
	// stale is set when Redis could not be reached (by a renewal or a decision): the next
	// renewal that reaches it renews every slot held, not only those due.
	stale atomic.Bool
}

// numberSlots gives each Concurrency take of takes a fresh holder number.
func (d *Decider) numberSlots(takes []limiter.Take) {
	for i := range takes {
		if takes[i].Limit.Algorithm == limiter.Concurrency {
			takes[i].Holder = d.slots.next.Add(1)
		}
	}
}

// hold returns the Holding of an admitted request's decided takes (nil when it took no slot)
// and registers it for renewal.
func (d *Decider) hold(rules []*config.Rule, takes []limiter.Take, res []limiter.Result, local bool, now time.Time) *Holding {
	var h *Holding
	for i := range takes {
		if takes[i].Limit.Algorithm != limiter.Concurrency || !res[i].Allowed {
			continue
		}
		if h == nil {
			h = &Holding{d: d}
		}
		h.slots = append(h.slots, slot{rule: rules[i], key: takes[i].Key, holder: takes[i].Holder, remote: !local, renewed: now})
		if g := rules[i].Metrics.SlotsHeld; g != nil {
			g.Inc()
		}
		if lh, ok := d.opts.Local.(slotHolder); ok && !local { // the local store took the others
			lh.Hold(takes[i].Key, rules[i].Local)
		}
	}
	if h != nil {
		d.slots.mu.Lock()
		if d.slots.live == nil {
			d.slots.live = make(map[*Holding]struct{})
		}
		d.slots.live[h] = struct{}{}
		d.slots.mu.Unlock()
	}
	return h
}

// Release gives back h's slots, once: in the local store, or in Redis, without waiting for
// its answer (remoteSlots); a release that fails is tried again in the background until the
// slot would have expired anyway. A nil Holding holds nothing.
func (h *Holding) Release() {
	if h == nil || h.done.Swap(true) {
		return
	}
	d := h.d
	var rbuf [maxInline]bool
	remoteOf := rbuf[:0]
	d.slots.mu.Lock()
	delete(d.slots.live, h)
	for i := range h.slots {
		remoteOf = append(remoteOf, h.slots[i].remote)
	}
	d.slots.mu.Unlock()
	local, _ := d.opts.Local.(limiter.SlotStore)
	remote, _ := d.opts.Remote.(remoteSlots)
	for i := range h.slots {
		s := &h.slots[i]
		if g := s.rule.Metrics.SlotsHeld; g != nil {
			g.Dec()
		}
		if local != nil {
			_ = local.Release(context.Background(), s.key, s.rule.Local, s.holder)
		}
		// A slot being renewed for the first time now is released by the renewal, which
		// finds the Holding gone from the register.
		if remote == nil || !remoteOf[i] {
			continue
		}
		sl := *s
		remote.ReleaseAsync(sl.key, sl.rule.Limit, sl.holder, func(error) {
			d.opts.Metrics.RedisErrors.WithLabelValues("release").Inc()
			go d.retryRelease(remote, sl)
		})
	}
}

// retryRelease tries a failed release again, with a growing pause, until it succeeds or the
// slot has expired in Redis (its expiry after its last renewal): a release is idempotent, so
// one that did reach Redis before its error is not counted twice.
func (d *Decider) retryRelease(st limiter.SlotStore, s slot) {
	c := d.opts.Clock
	pause := 100 * time.Millisecond
	for c.Since(s.renewed) < s.rule.Limit.Window {
		<-c.After(pause)
		if st.Release(context.Background(), s.key, s.rule.Limit, s.holder) == nil {
			return
		}
		pause = min(2*pause, time.Second)
	}
}

// SlotsHeld is the number of Concurrency slots this replica's requests hold now.
func (d *Decider) SlotsHeld() int {
	d.slots.mu.Lock()
	defer d.slots.mu.Unlock()
	n := 0
	for h := range d.slots.live {
		n += len(h.slots)
	}
	return n
}

// RenewSlots renews the slots held in Redis that are due: each a third of its expiry after it
// was taken or last renewed, the slots of one key in one call; it makes those taken locally
// known to Redis; and, the first time Redis answers after it could not be reached, it renews
// every slot held, since Redis may have lost them (restarted empty, or let them expire while
// this replica was cut off). The engine calls it every tick. A renewal holds a slot again
// whether Redis still had it or not: its request still runs.
func (d *Decider) RenewSlots(ctx context.Context) {
	if r, ok := d.opts.Remote.(SlotRenewer); ok {
		d.renewDue(ctx, r)
	}
}

// renewDue renews the slots held in Redis that are due, and those taken locally; every slot
// when Redis was out of reach since the last complete renewal.
func (d *Decider) renewDue(ctx context.Context, r SlotRenewer) {
	type group struct {
		key     string
		lim     limiter.Limit
		holders []int64
		slots   []*slot
		of      []*Holding
	}
	now := d.opts.Clock.Now()
	// Cleared now, set again if this renewal does not reach Redis, or if a decision cannot
	// reach it meanwhile.
	all := d.slots.stale.Swap(false)
	var groups []*group
	byKey := map[string]*group{}
	d.slots.mu.Lock()
	for h := range d.slots.live {
		for i := range h.slots {
			s := &h.slots[i]
			if !all && s.remote && now.Sub(s.renewed) < s.rule.Limit.Window/3 {
				continue
			}
			g := byKey[s.key]
			if g == nil {
				g = &group{key: s.key, lim: s.rule.Limit}
				byKey[s.key] = g
				groups = append(groups, g)
			}
			g.holders = append(g.holders, s.holder)
			g.slots = append(g.slots, s)
			g.of = append(g.of, h)
		}
	}
	d.slots.mu.Unlock()
	for _, g := range groups {
		if !d.opts.Breaker.Allow() {
			d.slots.stale.Store(true) // Redis is out of reach: renew every slot once it answers
			return
		}
		if _, err := r.Renew(ctx, g.key, g.lim, g.holders, now); err != nil {
			d.opts.Breaker.Failure()
			d.opts.Metrics.RedisErrors.WithLabelValues("renew").Inc()
			d.slots.stale.Store(true)
			return
		}
		d.opts.Breaker.Success()
		var gone []int64 // released while their renewal was on the way, so held again by it
		d.slots.mu.Lock()
		for j, s := range g.slots {
			if _, live := d.slots.live[g.of[j]]; live {
				s.renewed, s.remote = now, true
			} else {
				gone = append(gone, s.holder)
			}
		}
		d.slots.mu.Unlock()
		if st, ok := r.(limiter.SlotStore); ok {
			for _, h := range gone {
				if st.Release(ctx, g.key, g.lim, h) != nil {
					d.opts.Metrics.RedisErrors.WithLabelValues("release").Inc() // it expires after the limit's Window
				}
			}
		}
	}
}
