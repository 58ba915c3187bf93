// Package decide decides one request's takes as one unit, through Redis while the breakers
// allow and by each policy's failure mode otherwise (Open: admitted undecided, Closed:
// Unavailable, Local: the local store with this replica's share). The sidecar's request path
// and the RLS server both decide with it, so a failure mode means the same in both.
package decide

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"

	"github.com/sluice-dev/sluice/internal/dataplane/breaker"
	"github.com/sluice-dev/sluice/internal/dataplane/config"
	"github.com/sluice-dev/sluice/internal/dataplane/metrics"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/limiter/lease"
	"github.com/sluice-dev/sluice/internal/limiter/redisstore"
	"github.com/sluice-dev/sluice/internal/policy"
)

// Store is what deciding needs of a store: single takes, whole requests and late charges.
type Store interface {
	limiter.Store
	limiter.RequestStore
	limiter.Charger
}

// Outcome is how a request's takes were Decided.
type Outcome uint8

// The outcomes.
const (
	// Decided: the results hold a decision (Redis or local) for the returned rules.
	Decided Outcome = iota
	// Skipped: nothing was Decided (no take, or failure mode Open): admit.
	Skipped
	// Unavailable: a Closed policy cannot decide: refuse the request.
	Unavailable
	// Canceled: the caller went away.
	Canceled
)

// maxInline is how many takes a request decides without allocating its breakers' and costs'
// scratch.
const maxInline = 8

// Options configures a Decider.
type Options struct {
	// Remote is the shared store (Redis); nil decides everything locally with each replica's
	// share.
	Remote Store
	// Breaker guards Remote; required when Remote is set.
	Breaker *breaker.Breaker
	// Leases decides the rules that have a lease (with Remote's store); nil decides them as
	// the others.
	Leases *lease.Engine
	// MasterBreaker, when set and Remote is a MasterLocator (Redis Cluster), makes the breaker
	// of each master, at its first use: a master that fails then sends only the keys of its
	// slots to the fallback. Breaker still guards keys whose master is not known.
	MasterBreaker func(addr string) *breaker.Breaker
	// Local is the fallback store.
	Local   Store
	Metrics *metrics.Metrics
	Log     *slog.Logger
	// Clock times the backlog's flushes and the masters' breakers; nil means the real clock.
	Clock clock.Clock
	// BacklogMaxKeys and BacklogMaxBytes bound the usage kept, while Remote cannot decide, to
	// be charged to it once it is back (when Remote is a Charger): at most that many keys, and
	// that many bytes of keys (each counted with a fixed overhead); zero means
	// DefaultBacklogMaxKeys, DefaultBacklogMaxBytes. Admissions on further keys are not kept.
	BacklogMaxKeys, BacklogMaxBytes int
}

// Decider decides takes. Safe for concurrent use.
type Decider struct {
	opts Options
	// masters holds the breakers of Redis Cluster's masters (Options.MasterBreaker), by address.
	masters sync.Map     // addr -> *masterEntry
	pruned  atomic.Int64 // ms of the last pruneMasters
	// backlog is the usage admitted locally while Remote could not decide, to charge to it
	// (backlog.go); nil unless Remote is a Charger.
	backlog *backlog
	// slots are the Concurrency slots held (slots.go).
	slots holdings
}

// New returns a Decider.
func New(opts Options) *Decider {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	d := &Decider{opts: opts}
	if c, ok := opts.Remote.(Charger); ok {
		d.backlog = newBacklog(c, opts.BacklogMaxKeys, opts.BacklogMaxBytes, func(outcome string, n int64) {
			opts.Metrics.OutageUnits.WithLabelValues(outcome).Add(float64(n))
		})
	}
	return d
}

// Remote is the shared store (Options.Remote), for late charges.
func (d *Decider) Remote() Store { return d.opts.Remote }

// Local is the fallback store (Options.Local), for late charges.
func (d *Decider) Local() Store { return d.opts.Local }

// KeepLate keeps n units of a late charge (countWhen, responseCost) that the local store took
// for key while Remote could not decide, with the admissions of that time, to be charged to
// Remote once it is back; lim is the shared limit. Nothing is kept without a backlog.
func (d *Decider) KeepLate(key string, lim limiter.Limit, n int64, now time.Time) {
	if d.backlog != nil {
		d.backlog.add(key, lim, n, now.UnixMilli())
	}
}

// TakeRequest decides takes (rules[i]'s take, of policy pols[i]) into res: through Redis when
// the breaker allows, else by each policy's failure mode: Open rules are dropped (admitted
// without a decision), a Closed rule makes the request Unavailable, Local rules are Decided
// together with the local store and this pod's shares. It returns the rules and takes that
// were Decided (res holds their results, in order) and Skipped when none was. A Redis error
// never reaches the client except as Closed's 503.
func (d *Decider) TakeRequest(ctx context.Context, pols []*config.Policy, rules []*config.Rule, takes []limiter.Take, now time.Time, res []limiter.Result) ([]*config.Rule, []limiter.Take, Outcome, bool) {
	if len(takes) == 0 {
		return nil, nil, Skipped, false
	}
	if d.opts.Remote == nil {
		r, t, o := d.takeLocal(ctx, rules, takes, now, res)
		return r, t, o, true
	}
	// A request whose one rule is leased spends the key's live lease without Redis, and
	// without asking the breaker (a local spend is no sign of Redis's health); a request with
	// several rules is Decided as one unit, its leased rules reserved from their leases and
	// the others in Redis (remoteLeased).
	leased := d.opts.Leases != nil && len(takes) == 1 && rules[0].Lease != nil && !takes[0].Check // a check spends nothing
	if leased {
		if r, ok := d.opts.Leases.Spend(takes[0].Key, takes[0].Limit, *rules[0].Lease, takes[0].N, now); ok {
			res[0] = r
			return rules, takes, Decided, false // leased rules have no countWhen (CEL)
		}
	}
	var bbuf [maxInline]*breaker.Breaker
	brks := d.breakers(ctx, takes, bbuf[:0])
	if allow(brks) {
		var err error
		called := true
		switch {
		case leased:
			res[0], err = d.opts.Leases.Take(ctx, takes[0].Key, takes[0].Limit, *rules[0].Lease, takes[0].N, now)
		case d.opts.Leases != nil && len(takes) > 1 && len(takes) <= maxInline && anyLeased(rules):
			called, err = d.remoteLeased(ctx, pols, rules, takes, now, res)
		default:
			err = d.remote(ctx, takes, now, res)
		}
		if err == nil {
			for _, b := range brks {
				if called {
					b.Success()
				} else {
					b.Release() // decided from leases alone: no sign of Redis's health
				}
			}
			if b := d.backlog; b != nil && b.due(now) {
				go d.flushBacklog()
			}
			return rules, takes, Decided, false
		}
		if ctx.Err() != nil && !errors.Is(err, redisstore.ErrUnavailable) {
			for _, b := range brks {
				b.Release()
			}
			return nil, nil, Canceled, false
		}
		if errors.Is(err, redisstore.ErrTimeout) {
			d.opts.Metrics.RedisErrors.WithLabelValues("timeout").Inc()
		} else {
			d.opts.Metrics.RedisErrors.WithLabelValues("Unavailable").Inc()
		}
		// The request's call failed; which of its masters did not answer is not known.
		for _, b := range brks {
			b.Failure()
		}
		if ctx.Err() != nil {
			return nil, nil, Canceled, false
		}
	}
	// Without Redis: keep the Local policies' rules, in order, in place. Redis may come back
	// without the slots held in it: the next renewal that reaches it renews them all.
	if !d.slots.stale.Load() {
		d.slots.stale.Store(true)
	}
	kept := 0
	for i, rule := range rules {
		p := pols[i]
		switch p.FailureMode {
		case policy.FailureOpen:
			p.Fallback.Open.Inc()
			continue
		case policy.FailureClosed:
			p.Fallback.Closed.Inc()
			return nil, nil, Unavailable, false
		}
		p.Fallback.Local.Inc()
		rules[kept], takes[kept] = rule, takes[i]
		kept++
	}
	if kept == 0 {
		return nil, nil, Skipped, false
	}
	r, t, o := d.takeLocal(ctx, rules[:kept], takes[:kept], now, res[:kept])
	return r, t, o, true
}

// remote decides takes with Redis: a single take with Take (the store's cheapest path, the
// same decision), several with one TakeRequest.
func (d *Decider) remote(ctx context.Context, takes []limiter.Take, now time.Time, res []limiter.Result) error {
	// Take charges; a check goes as a request, and so does a Concurrency take, with its holder.
	if len(takes) == 1 && !takes[0].Check && takes[0].Limit.Algorithm != limiter.Concurrency {
		r, err := d.opts.Remote.Take(ctx, takes[0].Key, takes[0].Limit, takes[0].N, now)
		res[0] = r
		return err
	}
	_, err := d.opts.Remote.TakeRequest(ctx, takes, now, res)
	return err
}

// anyLeased reports whether one of rules has a lease: a request with none is decided in Redis
// as it is, without remoteLeased's reservations.
func anyLeased(rules []*config.Rule) bool {
	for _, r := range rules {
		if r.Lease != nil {
			return true
		}
	}
	return false
}

// remoteLeased decides a request of several rules as one unit when some are leased: each
// leased rule's units are reserved from its key's lease (lease.Engine.Reserve), the other
// rules are decided in Redis in one call, and the reservations are then committed if the
// request is admitted, else cancelled, so that a request denied by one rule spends no other
// rule's units, leased or not (issue 21). While deciding, the rules decided in Redis come
// first in pols, rules, takes and res, the reserved ones after; the order is restored before
// it returns. called reports whether Redis was asked anything. On an error nothing is spent.
func (d *Decider) remoteLeased(ctx context.Context, pols []*config.Policy, rules []*config.Rule, takes []limiter.Take, now time.Time, res []limiter.Result) (called bool, err error) {
	var rsv [maxInline]lease.Reservation
	var moved [maxInline]int // moved[j]: where the rule now at j came from (j >= end)
	end := len(takes)
	swap := func(i, j int) {
		pols[i], pols[j] = pols[j], pols[i]
		rules[i], rules[j] = rules[j], rules[i]
		takes[i], takes[j] = takes[j], takes[i]
		res[i], res[j] = res[j], res[i]
	}
	restore := func() {
		for j := end; j < len(takes); j++ { // undo the swaps, the last one first
			swap(moved[j], j)
		}
	}
	cancel := func() {
		for j := end; j < len(takes); j++ {
			d.opts.Leases.Cancel(rsv[j])
		}
		restore()
	}
	// Reserve from the end, moving each reserved rule behind the unreserved ones.
	for i := len(takes) - 1; i >= 0; i-- {
		if rules[i].Lease == nil || takes[i].Check {
			continue
		}
		r, v, ok, err := d.opts.Leases.Reserve(ctx, takes[i].Key, takes[i].Limit, *rules[i].Lease, takes[i].N, now)
		if err != nil {
			cancel()
			return true, err
		}
		if !ok {
			continue
		}
		called = called || v.Issued()
		end--
		swap(i, end)
		res[end], rsv[end], moved[end] = r, v, i
	}
	if end > 0 {
		called = true
		if err := d.remote(ctx, takes[:end], now, res[:end]); err != nil {
			cancel()
			return true, err
		}
	}
	admitted := limiter.Admitted(takes, res)
	for i := range end {
		if rules[i].Lease != nil && !takes[i].Check {
			d.opts.Leases.Observe(takes[i].Key, takes[i].Limit, *rules[i].Lease, takes[i].N, res[i], admitted && res[i].Allowed)
		}
	}
	if !admitted {
		cancel()
		return called, nil
	}
	for j := end; j < len(takes); j++ {
		d.opts.Leases.Commit(rsv[j])
	}
	restore()
	return called, nil
}

// takeLocal decides takes with the local store and this pod's share of each rule's limit. It
// rewrites takes' limits and costs to the shares. With a backlog (Redis could not decide), an
// admitted request's allowed takes are kept in it at their cost under the shared limit.
func (d *Decider) takeLocal(ctx context.Context, rules []*config.Rule, takes []limiter.Take, now time.Time, res []limiter.Result) ([]*config.Rule, []limiter.Take, Outcome) {
	var costBuf [maxInline]int64
	var costs []int64
	if d.backlog != nil {
		costs = costBuf[:0]
		for i := range takes {
			costs = append(costs, takes[i].N)
		}
	}
	for i, rule := range rules {
		takes[i].Limit = rule.Local
		takes[i].N = rule.LocalCost(takes[i].N)
	}
	var err error
	if len(takes) == 1 && !takes[0].Check {
		res[0], err = d.opts.Local.Take(ctx, takes[0].Key, takes[0].Limit, takes[0].N, now)
	} else {
		_, err = d.opts.Local.TakeRequest(ctx, takes, now, res)
	}
	if err != nil {
		// Only an invalid limit or time can fail a memory Take; the configuration was
		// validated, so this is a clock before 1970. Admit rather than fail the request.
		return nil, nil, Skipped
	}
	for i, rule := range rules {
		if rule.ZeroShare && !rule.Blocked { // the store denied the stand-in; report what the pod holds: nothing (Decide reports a Blocked rule)
			res[i] = limiter.Result{RetryAfter: limiter.NeverRetry, Reason: limiter.ReasonNoShare}
		}
	}
	if costs != nil && limiter.Admitted(takes, res) {
		nowMs := now.UnixMilli()
		for i, rule := range rules {
			// A check charges nothing (KeepLate may, later); a slot is no usage: it is
			// released in the local store.
			if res[i].Allowed && !takes[i].Check && takes[i].Limit.Algorithm != limiter.Concurrency {
				d.backlog.add(takes[i].Key, rule.Limit, costs[i], nowMs)
			}
		}
	}
	return rules, takes, Decided
}

// flushBacklog charges the usage admitted locally to Remote, which just answered.
func (d *Decider) flushBacklog() {
	start := d.opts.Clock.Now()
	charged, err := d.backlog.flush(start)
	if err != nil {
		d.opts.Log.Warn("Could not charge all the usage admitted locally to Redis; retrying with an answer at least 1 s from now",
			"keys", charged, "error", err.Error())
		return
	}
	if charged > 0 {
		// Debug: on Redis Cluster with one master down, the others' answers flush every few
		// requests; sluice_outage_units_total counts what was charged.
		d.opts.Log.Debug("Charged the usage admitted locally to Redis", "keys", charged,
			"duration", d.opts.Clock.Since(start))
	}
}

// Count records each Decided rule's outcome in its metrics: not_charged for a rule that did
// not deny a request another rule denied (nothing was charged, and a shadow rule's would-be
// denial counts only in an admitted request), else allowed, shadow_denied or denied.
// It returns whether the request was admitted.
func Count(rules []*config.Rule, takes []limiter.Take, res []limiter.Result) bool {
	admitted := limiter.Admitted(takes, res)
	for i, rule := range rules {
		r := res[i]
		switch {
		case !admitted && (r.Allowed || rule.Shadow):
			rule.Metrics.NotCharged.Inc()
		case r.Allowed:
			rule.Metrics.Allowed.Inc()
		case rule.Shadow:
			rule.Metrics.ShadowDenied.Inc()
		default:
			rule.Metrics.Denied.Inc()
		}
	}
	return admitted
}
