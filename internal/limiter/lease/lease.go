// Package lease decides a rule's requests from units leased off its shared limit: a pod takes
// units from the store (one Issue call reserves k units, exactly as k requests of cost 1
// would), spends them locally, and gives back what it has not used when the lease ends
// (Return, clamped so the shared state never ends more permissive than without the lease).
// The sidecar and the simulator share the Engine. A request that other rules decide too
// reserves its units (Reserve), and its decision spends them (Commit) or puts them back into
// the lease (Cancel), so that a request one rule denies spends no other rule's units.
//
// # The bound
//
// Every unit admitted was issued by the shared limit, and is spent less than MaxAge (A) after
// it was issued: leasing only moves when a unit is spent. Units returned are given back with
// clamps that keep the shared state no more permissive than had they never been issued, so the
// units issued and kept form a trace the exact rule admits. Hence over any interval of length
// T a leased rule admits at most what the exact rule could admit over an interval of T + A:
//
//   - TokenBucket and LeakyBucket Meter: at most burst + rate × (T + A), where rate is
//     limit/window; the exact rule's bound is burst + rate × T, so the excess is at most rate × A.
//   - FixedWindow and SlidingWindowCounter: a lease never outlives the aligned window it was
//     issued in, so every aligned window admits at most limit, as the exact rule: no excess.
//     (SlidingWindowCounter's estimate over sliding intervals is approximate either way.)
//   - SlidingWindowLog and LeakyBucket Queue are not leased (limiter.Limit.Leasable).
//
// Under-admission: a pod holds at most one lease per key, of at most MaxUnits units, so at most
// pods × MaxUnits units are held unused at once; they return to the shared limit when their
// lease ends (at most A later).
//
// # Lease size
//
// A lease is about what the pod spent on the key within A at its recent rate (the units spent
// since the last lease was issued, over the time since then), at most twice the last lease
// plus one (so a ramp from idle takes a few leases), at most MaxUnits; and it is a plain exact
// decision (Store.Take of the request's cost) when that comes to no more than the request's
// cost or the shared limit's remaining units at the last decision were fewer than the lease:
// a client near its limit is decided exactly.
package lease

import (
	"context"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-dev/sluice/internal/limiter"
)

// Params is a rule's lease parameters.
type Params struct {
	// MaxAge is how long leased units stay usable, limiter.MinLeaseAge..MaxLeaseAge, whole ms.
	MaxAge time.Duration
	// MaxUnits caps one lease; zero means derived from the rate (MaxUnitsFor).
	MaxUnits int64
}

// MaxUnitsFor is the most units one lease of lim takes under p: p.MaxUnits, or by default
// what lim's rate issues in MaxAge, limit × maxAge / window (at least 1); never more than the
// capacity.
func (p Params) MaxUnitsFor(lim limiter.Limit) int64 {
	u := p.MaxUnits
	if u <= 0 {
		u = max(1, lim.Limit*p.MaxAge.Milliseconds()/lim.WindowMs()) // <= 1e8 * 1e4
	}
	return min(u, lim.Capacity())
}

// Store is what the Engine decides with: exact takes and leases on the shared limit.
type Store interface {
	limiter.Store
	limiter.Lessor
}

// DefaultMaxKeys is Options.MaxKeys when zero.
const DefaultMaxKeys = 10_000

// Options configures an Engine. The zero value is the production setting.
type Options struct {
	// MaxKeys bounds the keys holding lease state (keys come from clients); zero means
	// DefaultMaxKeys. A key beyond it is decided exactly, in the store.
	MaxKeys int
}

// Stats counts what an Engine did since it was made.
type Stats struct {
	// Decisions is the number of Take calls; StoreCalls the store calls they and the returns
	// made (takes, issues, returns).
	Decisions, StoreCalls int64
	// Leases is the number of leases issued with at least one unit; UnitsReturned the whole
	// units given back to the shared limit.
	Leases, UnitsReturned int64
}

// Engine decides leased rules for one pod. It is safe for concurrent use; requests on one key
// are decided one at a time (a renewal blocks the key's other requests, so one store call
// renews for all of them).
type Engine struct {
	store    Store
	seed     maphash.Seed
	shards   [16]shard
	perShard int

	decisions, storeCalls, leases, unitsReturned atomic.Int64
}

type shard struct {
	mu sync.Mutex
	m  map[string]*entry
}

// entry is one key's lease state.
type entry struct {
	mu  sync.Mutex
	lim limiter.Limit
	p   Params
	// g is the current lease, units its unused units, spendable while now < expires (ms).
	g       limiter.Grant
	units   int64
	expires int64
	// The rate: obsSpent units spent since obsStart (ms), the last lease's size lastK.
	obsStart, obsSpent, lastK int64
	// remaining is the shared limit's Remaining at the last store decision, if known.
	remaining int64
	known     bool
	// denied says that g.Result is the denial of the request renew was called for.
	denied  bool
	lastUse int64
	// dead marks an entry Sweep dropped from its shard: a Take that found it looks again.
	dead bool
	// reserved is the units Reserve took from the lease that are neither committed nor
	// cancelled yet: while it is not 0 the lease does not end (one Return per lease, with
	// every unit not spent), and gen counts the leases issued, so that a cancelled
	// reservation goes back only into the lease it came from.
	reserved int64
	gen      uint64
}

// New returns an Engine deciding with store.
func New(store Store, opts Options) *Engine {
	maxKeys := opts.MaxKeys
	if maxKeys <= 0 {
		maxKeys = DefaultMaxKeys
	}
	e := &Engine{store: store, seed: maphash.MakeSeed(), perShard: max(1, maxKeys/16)}
	for i := range e.shards {
		e.shards[i].m = make(map[string]*entry)
	}
	return e
}

// Stats returns the counts so far.
func (e *Engine) Stats() Stats {
	return Stats{Decisions: e.decisions.Load(), StoreCalls: e.storeCalls.Load(), Leases: e.leases.Load(), UnitsReturned: e.unitsReturned.Load()}
}

// Take decides a request of cost n on key under lim (Leasable) with lease parameters p at
// now, as limiter.Store.Take does but for when the units are charged to the shared limit (see
// the package comment). A store error is returned as is, and the caller falls back as it
// would for a Take; units the key still holds in a live lease are spent first, with no store
// call. Spending on a live lease does not allocate.
func (e *Engine) Take(ctx context.Context, key string, lim limiter.Limit, p Params, n int64, now time.Time) (limiter.Result, error) {
	e.decisions.Add(1)
	nowMs := now.UnixMilli()
	sh := &e.shards[maphash.String(e.seed, key)&15]
	var en *entry
	for en == nil {
		sh.mu.Lock()
		en = sh.m[key]
		if en == nil {
			if len(sh.m) >= e.perShard {
				sh.mu.Unlock()
				e.storeCalls.Add(1)
				return e.store.Take(ctx, key, lim, n, now)
			}
			en = &entry{lim: lim, p: p, obsStart: nowMs}
			sh.m[key] = en
		}
		sh.mu.Unlock()
		en.mu.Lock()
		if en.dead {
			en.mu.Unlock()
			en = nil
		}
	}
	defer en.mu.Unlock()
	en.lastUse = nowMs
	changed := en.lim != lim || en.p != p
	if !changed && en.units >= n && nowMs < en.expires {
		en.units -= n
		en.obsSpent += n
		return e.leased(en), nil
	}
	if en.reserved > 0 {
		// A reservation holds the lease until its request is decided (an RTT): decide
		// this one exactly meanwhile, and leave the lease as it is.
		en.mu.Unlock()
		e.storeCalls.Add(1)
		r, err := e.store.Take(ctx, key, lim, n, now)
		en.mu.Lock()
		return r, err
	}
	if changed { // the rule changed: end the lease, start afresh
		e.end(ctx, key, en)
		en.restart(lim, p, nowMs)
	}
	if ok, err := e.renew(ctx, key, en, n, now); err != nil {
		return limiter.Result{}, err
	} else if ok {
		return e.leased(en), nil
	}
	if en.denied {
		en.denied = false
		return en.g.Result, nil // the denial of one unit: this request's
	}
	// An exact decision does not hold the key: the key's other requests may be decided
	// exactly at the same time, coalesced by the store into one call.
	en.mu.Unlock()
	e.storeCalls.Add(1)
	r, err := e.store.Take(ctx, key, lim, n, now)
	en.mu.Lock()
	if err != nil {
		return limiter.Result{}, err
	}
	en.remaining, en.known = r.Remaining, true
	en.lastK = max(en.lastK, n)
	if r.Allowed {
		en.obsSpent += n
	}
	return r, nil
}

// restart makes en (locked, its lease ended, nothing reserved) a key that has seen nothing of
// lim and p as of nowMs. Field by field: en's mutex is held, and assigning a new entry would
// unlock it.
func (en *entry) restart(lim limiter.Limit, p Params, nowMs int64) {
	en.lim, en.p, en.g, en.units, en.expires = lim, p, limiter.Grant{}, 0, 0
	en.obsStart, en.obsSpent, en.lastK = nowMs, 0, 0
	en.remaining, en.known, en.denied, en.lastUse = 0, false, false, nowMs
	en.gen++
}

// renew ends en's lease and issues the next one for a request of cost n at now, spending n
// of it: ok when it did. Otherwise the request is to be decided exactly, and en.denied says
// when the issue's own answer is that decision (a denial of one unit). en is locked, with no
// reservation.
func (e *Engine) renew(ctx context.Context, key string, en *entry, n int64, now time.Time) (ok bool, err error) {
	e.end(ctx, key, en)
	nowMs := now.UnixMilli()
	k := en.size(nowMs, n)
	if k <= n {
		return false, nil
	}
	e.storeCalls.Add(1)
	g, err := e.store.Issue(ctx, key, en.lim, k, now)
	if err != nil {
		return false, err
	}
	en.remaining, en.known = g.Result.Remaining, true
	en.obsStart, en.obsSpent, en.lastK = nowMs, 0, k
	if g.Units >= n {
		e.leases.Add(1)
		en.g, en.units, en.gen = g, g.Units-n, en.gen+1
		en.expires = nowMs + min(en.p.MaxAge.Milliseconds(), g.WindowLeft(en.lim))
		en.obsSpent = n
		return true, nil
	}
	if g.Units == 0 && n == 1 {
		en.g, en.denied = g, true
		return false, nil
	}
	// Fewer than n fit: give back what was issued, and decide the request exactly, for its
	// own Result.
	if g.Units > 0 {
		e.leases.Add(1)
		en.g, en.units, en.gen = g, g.Units, en.gen+1
		e.end(ctx, key, en)
	}
	return false, nil
}

// Reservation is units a request took from a key's lease with Reserve, until Commit spends
// them or Cancel gives them back. The zero Reservation holds nothing.
type Reservation struct {
	en     *entry
	gen    uint64
	n      int64
	issued bool
}

// Issued reports whether Reserve issued the lease for r, a store call: otherwise r came from
// the live lease, with no store call.
func (r Reservation) Issued() bool { return r.issued }

// Reserve takes n units of key's lease under lim and p for a request that other rules decide
// too: from the live lease, or from a lease it issues now (one store call) when the rate
// asks for one. ok is false, with nothing taken, when the request is to be decided exactly
// instead (the remaining units are few, a rule change or another reservation holds the
// key's lease, or the store cannot issue it: err). Until Commit or Cancel, the lease does
// not end: Take decides the key's other requests exactly once the lease cannot serve them.
// Reserving from a live lease does not allocate.
func (e *Engine) Reserve(ctx context.Context, key string, lim limiter.Limit, p Params, n int64, now time.Time) (limiter.Result, Reservation, bool, error) {
	nowMs := now.UnixMilli()
	sh := &e.shards[maphash.String(e.seed, key)&15]
	sh.mu.Lock()
	en := sh.m[key]
	if en == nil && len(sh.m) < e.perShard {
		en = &entry{lim: lim, p: p, obsStart: nowMs}
		sh.m[key] = en
	}
	sh.mu.Unlock()
	if en == nil {
		return limiter.Result{}, Reservation{}, false, nil
	}
	en.mu.Lock()
	defer en.mu.Unlock()
	if en.dead || en.lim != lim || en.p != p {
		return limiter.Result{}, Reservation{}, false, nil // Take starts the key afresh
	}
	en.lastUse = nowMs
	issued := false
	if en.units < n || nowMs >= en.expires {
		if en.reserved > 0 {
			return limiter.Result{}, Reservation{}, false, nil
		}
		ok, err := e.renew(ctx, key, en, n, now)
		en.denied = false
		if !ok || err != nil {
			return limiter.Result{}, Reservation{}, false, err
		}
		en.units += n // renew spent them: hold them as reserved instead
		en.obsSpent -= n
		issued = true
	}
	e.decisions.Add(1)
	en.units -= n
	en.obsSpent += n
	en.reserved += n
	return e.leased(en), Reservation{en: en, gen: en.gen, n: n, issued: issued}, true, nil
}

// Observe records the exact decision r of a request of cost n on key under lim and p that
// Reserve did not take (the store decided it with the request's other rules): what the
// shared limit has left, and, when the request was admitted, its cost in the key's rate.
// Without it a key whose requests all match several rules would never lease.
func (e *Engine) Observe(key string, lim limiter.Limit, p Params, n int64, r limiter.Result, admitted bool) {
	sh := &e.shards[maphash.String(e.seed, key)&15]
	sh.mu.Lock()
	en := sh.m[key]
	sh.mu.Unlock()
	if en == nil {
		return
	}
	en.mu.Lock()
	defer en.mu.Unlock()
	if en.dead || en.lim != lim || en.p != p {
		return
	}
	e.decisions.Add(1)
	e.storeCalls.Add(1) // its share of the request's call
	en.remaining, en.known = r.Remaining, true
	en.lastK = max(en.lastK, n)
	if admitted {
		en.obsSpent += n
	}
}

// Commit spends r's units: its request was admitted.
func (e *Engine) Commit(r Reservation) {
	if r.en == nil {
		return
	}
	r.en.mu.Lock()
	r.en.reserved -= r.n
	r.en.mu.Unlock()
}

// Cancel gives r's units back to the lease they came from, as though never taken: its
// request was denied by another rule, or not decided. The lease's expiry is unchanged.
func (e *Engine) Cancel(r Reservation) {
	if r.en == nil {
		return
	}
	en := r.en
	en.mu.Lock()
	en.reserved -= r.n
	if en.gen == r.gen && en.expires > 0 { // the lease was not ended (ReturnAll) since
		en.units += r.n
		en.obsSpent -= r.n
	}
	en.mu.Unlock()
}

// Spend decides a request of cost n on key from its live lease alone, with no store call: ok
// is false (and nothing spent) when the key holds no live lease of lim and p with n units.
// The sidecar spends with it while Redis is unreachable, before falling back, and before
// asking the breaker, so that a local spend never counts as Redis answering. It does not
// allocate.
func (e *Engine) Spend(key string, lim limiter.Limit, p Params, n int64, now time.Time) (r limiter.Result, ok bool) {
	nowMs := now.UnixMilli()
	sh := &e.shards[maphash.String(e.seed, key)&15]
	sh.mu.Lock()
	en := sh.m[key]
	sh.mu.Unlock()
	if en == nil {
		return r, false
	}
	en.mu.Lock()
	defer en.mu.Unlock()
	if en.dead || en.lim != lim || en.p != p || en.units < n || nowMs >= en.expires {
		return r, false
	}
	e.decisions.Add(1)
	en.lastUse = nowMs
	en.units -= n
	en.obsSpent += n
	return e.leased(en), true
}

// leased is the Result of a request spent from en's lease: the shared limit's Remaining at
// the issue plus the units still held here.
func (e *Engine) leased(en *entry) limiter.Result {
	r := en.g.Result
	return limiter.Result{Allowed: true, Limit: r.Limit, Remaining: en.remaining + en.units, ResetAfter: r.ResetAfter}
}

// size is the lease to ask for at now for a request of cost n (see the package comment).
func (en *entry) size(nowMs, n int64) int64 {
	elapsed := max(1, nowMs-en.obsStart)
	target := (en.obsSpent*en.p.MaxAge.Milliseconds() + elapsed - 1) / elapsed // obsSpent <= 1e8 per lease
	target = min(target, 2*en.lastK+1, en.p.MaxUnitsFor(en.lim))
	if en.known && en.remaining < target {
		return n
	}
	return max(target, n)
}

// end ends en's lease, giving back its unused units. A return that fails leaves them charged,
// erring towards denial.
func (e *Engine) end(ctx context.Context, key string, en *entry) {
	if en.units == 0 {
		return
	}
	unused := en.units
	en.units, en.expires = 0, 0
	e.storeCalls.Add(1)
	if back, err := e.store.Return(ctx, key, en.lim, en.g, unused); err == nil {
		e.unitsReturned.Add(back)
	}
}

// Sweep ends the leases that expired by now, giving back their unused units, and forgets
// keys unused for MaxLeaseAge that hold nothing. The sidecar calls it every few ms; it returns
// the number of leases it ended. The returns are made without holding a shard's lock.
func (e *Engine) Sweep(ctx context.Context, now time.Time) int {
	nowMs, ended := now.UnixMilli(), 0
	var expired []string
	for i := range e.shards {
		sh := &e.shards[i]
		expired = expired[:0]
		sh.mu.Lock()
		for k, en := range sh.m {
			if !en.mu.TryLock() {
				continue // being decided on
			}
			switch {
			case en.reserved > 0: // its reservation's request ends it, or the next Take
			case en.units > 0 && nowMs >= en.expires:
				expired = append(expired, k)
			case en.units == 0 && nowMs-en.lastUse >= limiter.MaxLeaseAge.Milliseconds():
				en.dead = true
				delete(sh.m, k)
			}
			en.mu.Unlock()
		}
		sh.mu.Unlock()
		for _, k := range expired {
			if en := e.lookup(sh, k); en != nil {
				en.mu.Lock()
				if en.units > 0 && nowMs >= en.expires && en.reserved == 0 {
					e.end(ctx, k, en)
					ended++
				}
				en.mu.Unlock()
			}
		}
	}
	return ended
}

// ReturnAll ends every lease, expired or not, giving back their unused units: on shutdown.
func (e *Engine) ReturnAll(ctx context.Context) {
	for i := range e.shards {
		sh := &e.shards[i]
		sh.mu.Lock()
		held := make([]string, 0, len(sh.m))
		for k := range sh.m {
			held = append(held, k)
		}
		sh.mu.Unlock()
		for _, k := range held {
			if en := e.lookup(sh, k); en != nil {
				en.mu.Lock()
				e.end(ctx, k, en)
				en.mu.Unlock()
			}
		}
	}
}

func (e *Engine) lookup(sh *shard, key string) *entry {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.m[key]
}

// Held is the number of unused units the Engine holds in leases, live or expired but not yet
// ended.
func (e *Engine) Held() int64 {
	var n int64
	for i := range e.shards {
		sh := &e.shards[i]
		sh.mu.Lock()
		for _, en := range sh.m {
			en.mu.Lock()
			n += en.units
			en.mu.Unlock()
		}
		sh.mu.Unlock()
	}
	return n
}
