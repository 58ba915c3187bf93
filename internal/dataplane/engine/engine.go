// Package engine opens the data plane's decision engine from the command line's settings: the
// local store, Redis with its breakers (one per master on Redis Cluster), the lease engine, the
// outage backlog, and the sweeps that keep them small. The sidecar, the RLS server and the dev
// environment (make demo) all open it with Open, so their wiring cannot drift apart.
package engine

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"

	"github.com/sluice-dev/sluice/internal/dataplane/breaker"
	"github.com/sluice-dev/sluice/internal/dataplane/cmdline"
	"github.com/sluice-dev/sluice/internal/dataplane/decide"
	"github.com/sluice-dev/sluice/internal/dataplane/metrics"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/limiter/lease"
)

// Options configures Open.
type Options struct {
	// Flags are the settings of the command line (cmdline.Parse or ParseRLS): Redis, breakers,
	// local store. An empty RedisURL decides every limit locally with this replica's share.
	Flags *cmdline.Options
	// Metrics receives the decisions, breaker transitions, backlog and lease statistics.
	Metrics *metrics.Metrics
	Log     *slog.Logger
	// Leases makes a lease engine for the rules that have a lease (the sidecar and the RLS
	// server both ask for it); without it they are decided in Redis as the others.
	Leases bool
	// Clock times the backlog, the masters' breakers and the sweeps; nil is the real clock.
	Clock clock.WithTicker
}

// Engine is an opened decision engine. Its Decider is safe for concurrent use.
type Engine struct {
	// Decider decides requests: what the front ends call.
	Decider *decide.Decider
	// Local is the fallback store, this replica's share of every limit.
	Local *limiter.MemoryStore
	// Leases is the lease engine; nil without Redis or without Options.Leases.
	Leases *lease.Engine

	log       *slog.Logger
	flags     *cmdline.Options
	metrics   *metrics.Metrics
	clk       clock.WithTicker
	redis     *redisWiring
	closeOnce sync.Once
}

// Open wires the engine o describes. Start runs its sweeps; Close gives leased units back and
// closes Redis.
func Open(o Options) (*Engine, error) {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	f := o.Flags
	e := &Engine{
		Local:   limiter.NewMemoryStore(limiter.MemoryStoreOptions{MaxKeys: f.LocalMaxKeys}),
		log:     o.Log,
		flags:   f,
		metrics: o.Metrics,
		clk:     o.Clock,
	}
	do := decide.Options{Local: e.Local, Metrics: o.Metrics, Log: o.Log, Clock: o.Clock}
	// decider is set once made: the breakers' transitions read its worst state.
	var decider atomic.Pointer[decide.Decider]
	if f.RedisURL != "" {
		r, err := openRedis(f, o.Metrics, o.Log, func() breaker.State {
			if d := decider.Load(); d != nil {
				return d.BreakerState()
			}
			return breaker.Closed
		})
		if err != nil {
			return nil, err
		}
		e.redis = r
		do.Remote, do.Breaker, do.MasterBreaker = r.Store, r.Breaker, r.MasterBreaker
		// What the local share admits while Redis is unreachable is charged to Redis when it
		// is back, for at most as many keys as the local store holds.
		do.BacklogMaxKeys = f.LocalMaxKeys
		if o.Leases {
			e.Leases = lease.New(r.Store, lease.Options{})
			do.Leases = e.Leases
			leases := e.Leases
			o.Metrics.RegisterLeases(func() metrics.LeaseStats {
				s := leases.Stats()
				return metrics.LeaseStats{Decisions: s.Decisions, StoreCalls: s.StoreCalls, Leases: s.Leases, UnitsReturned: s.UnitsReturned}
			})
		}
	} else {
		o.Log.Warn("No --redis-url: every limit is decided in this replica with its share (limit / replicas), as in failure mode Local")
	}
	e.Decider = decide.New(do)
	decider.Store(e.Decider)
	return e, nil
}

// localSweep is how often the local store drops the keys whose windows have ended.
const localSweep = 30 * time.Second

// leaseSweep is how often expired leases end and give back their unused units: a lease's units
// return at most this long after it ends (or at its key's next request).
const leaseSweep = 20 * time.Millisecond

// slotRenewal is how often the Concurrency slots held in Redis are looked at for renewal
// (each is renewed a third of its expiry after the last time).
const slotRenewal = 250 * time.Millisecond

// Start runs the engine's sweeps until ctx ends: the local store's ended keys, the leases that
// expired, the renewal of the Concurrency slots held in Redis.
func (e *Engine) Start(ctx context.Context) {
	go every(ctx, e.clk, localSweep, func(now time.Time) { e.Local.Sweep(now) })
	if e.redis != nil {
		go every(ctx, e.clk, slotRenewal, func(time.Time) { e.Decider.RenewSlots(ctx) })
	}
	if leases := e.Leases; leases != nil {
		go every(ctx, e.clk, leaseSweep, func(now time.Time) { leases.Sweep(ctx, now) })
	}
}

// Close gives the leases' unused units back to the fleet (waiting at most a second) and then
// closes Redis. It may be called more than once.
func (e *Engine) Close() {
	e.closeOnce.Do(func() {
		if e.Leases != nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			e.Leases.ReturnAll(ctx)
			cancel()
			e.log.Info("Returned unused leased units", "unitsReturned", e.Leases.Stats().UnitsReturned)
		}
		if e.redis != nil {
			e.redis.Close()
		}
	})
}

// every calls fn with the tick's time every period until ctx ends.
func every(ctx context.Context, clk clock.WithTicker, period time.Duration, fn func(time.Time)) {
	t := clk.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C():
			fn(now)
		}
	}
}
