// Command sluice-sidecar is Sluice's rate-limiting reverse proxy, injected next to an
// application: it reads the namespace's rendered policies.json, keeps the policies whose
// selectors match this pod's labels, decides every request against them (Redis, with this pod's
// share of each limit as fallback) and proxies the admitted ones to the application.
//
// Every flag can also be set as an environment variable: SLUICE_ and the flag name in upper
// case with '-' as '_' (e.g. SLUICE_REDIS_URL). A flag on the command line wins. The flags, and
// the names the webhook injects them with, are in package sidecar/cmdline and internal/inject.
package main

import (
	// Calendar rules name IANA time zones; the images are distroless/static, so the binary
	// carries its own copy of the database rather than trust the image to.
	_ "time/tzdata"

	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"k8s.io/utils/clock"

	"github.com/sluice-dev/sluice/internal/inject"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/limiter/lease"
	"github.com/sluice-dev/sluice/internal/version"
	"github.com/sluice-dev/sluice/sidecar/breaker"
	"github.com/sluice-dev/sluice/sidecar/cmdline"
	"github.com/sluice-dev/sluice/sidecar/config"
	"github.com/sluice-dev/sluice/sidecar/metrics"
	"github.com/sluice-dev/sluice/sidecar/proxy"
)

func main() {
	if len(os.Args) == 2 && (os.Args[1] == "--version" || os.Args[1] == "-version") {
		fmt.Println(version.String("sluice-sidecar"))
		return
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "sluice-sidecar:", err)
		os.Exit(1)
	}
}

func run() error {
	o, err := cmdline.Parse(os.Args[1:], flag.ExitOnError, os.LookupEnv)
	if err != nil {
		return err
	}

	log, err := o.Logger()
	if err != nil {
		return err
	}

	target, err := url.Parse(o.Upstream)
	if err != nil || (target.Scheme != "http" && target.Scheme != "https") || target.Host == "" {
		return fmt.Errorf("--%s %q is not an http(s) URL", inject.FlagUpstream, o.Upstream)
	}
	static := map[string]string{}
	if o.PodLabels != "" {
		if static, err = config.ParseLabelList(o.PodLabels); err != nil {
			return fmt.Errorf("--%s: %w", inject.FlagPodLabels, err)
		}
	}

	m := metrics.New()
	loader := config.NewLoader(o.Config, o.PodLabelsFile, static, m, log)
	loader.Recheck = o.ReloadInterval
	loader.PodName = o.PodName

	// handler is set once made: the breakers' transitions read its worst state.
	var handler atomic.Pointer[proxy.Handler]
	opts := proxy.Options{
		Upstream: target,
		Config:   loader.Current,
		Local:    limiter.NewMemoryStore(limiter.MemoryStoreOptions{MaxKeys: o.LocalMaxKeys}),
		Metrics:  m,
		Log:      log,
	}
	if o.RedisURL != "" {
		r, err := cmdline.OpenRedis(o, m, log, func() breaker.State {
			if h := handler.Load(); h != nil {
				return h.BreakerState()
			}
			return breaker.Closed
		})
		if err != nil {
			return err
		}
		defer r.Close()
		opts.Remote = r.Store
		opts.Leases = lease.New(r.Store, lease.Options{})
		leases := opts.Leases
		m.RegisterLeases(func() metrics.LeaseStats {
			s := leases.Stats()
			return metrics.LeaseStats{Decisions: s.Decisions, StoreCalls: s.StoreCalls, Leases: s.Leases, UnitsReturned: s.UnitsReturned}
		})
		// What the local share admits while Redis is unreachable is charged to Redis when it
		// is back, for at most as many keys as the local store holds.
		opts.BacklogMaxKeys = o.LocalMaxKeys
		opts.Breaker, opts.MasterBreaker = r.Breaker, r.MasterBreaker
	} else {
		log.Warn("No --redis-url: every limit is decided in this pod with its share (limit / replicas), as in failure mode Local")
	}
	h := proxy.New(opts)
	handler.Store(h)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() { _ = loader.Run(ctx) }()
	go cmdline.SweepLocal(ctx, clock.RealClock{}, opts.Local.(*limiter.MemoryStore))
	if leases := opts.Leases; leases != nil {
		go cmdline.Every(ctx, clock.RealClock{}, leaseSweep, func(now time.Time) { leases.Sweep(ctx, now) })
	}

	var draining atomic.Bool
	ready := func() error {
		if draining.Load() {
			return errors.New("shutting down")
		}
		if !loader.Ready() {
			return errors.New("configuration not loaded (see the log); passing traffic through meanwhile")
		}
		c, err := net.DialTimeout("tcp", proxy.HostPort(target), time.Second) //nolint:gosec // the upstream is the operator's --upstream flag, not request input
		if err != nil {
			return fmt.Errorf("upstream: %w", err)
		}
		_ = c.Close()
		return nil
	}

	if o.MaxHeaderBytes < 1024 {
		return fmt.Errorf("--%s %d: at least 1024", inject.FlagMaxHeaderBytes, o.MaxHeaderBytes)
	}
	if o.ReadHeaderTimeout <= 0 || o.IdleTimeout <= 0 {
		return fmt.Errorf("--%s and --%s must be positive", inject.FlagReadHeaderTimeout, inject.FlagIdleTimeout)
	}
	srv := proxy.NewServer(h, proxy.ServerOptions{
		MaxHeaderBytes:    o.MaxHeaderBytes,
		ReadHeaderTimeout: o.ReadHeaderTimeout,
		IdleTimeout:       o.IdleTimeout,
		Log:               log,
	})
	admin := &http.Server{Addr: o.MetricsListen, Handler: m.AdminHandler(ready, o.Pprof), ReadHeaderTimeout: 5 * time.Second}

	ln, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return err
	}
	aln, err := net.Listen("tcp", o.MetricsListen)
	if err != nil {
		return err
	}
	errc := make(chan error, 2)
	go func() { errc <- srv.Serve(ln) }()
	go func() { errc <- admin.Serve(aln) }()
	log.Info("Serving", "listen", ln.Addr().String(), "upstream", target.String(), "metrics", aln.Addr().String(),
		"config", o.Config, "podLabelsFile", o.PodLabelsFile)

	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	draining.Store(true)
	log.Info("Shutting down: draining in-flight requests", "timeout", o.ShutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), o.ShutdownTimeout)
	defer cancel()
	err = srv.Shutdown(sctx)
	_ = admin.Shutdown(sctx)
	if opts.Leases != nil {
		// Give the leases' unused units back to the fleet (before the store closes).
		rctx, rcancel := context.WithTimeout(context.Background(), time.Second)
		opts.Leases.ReturnAll(rctx)
		rcancel()
		log.Info("Returned unused leased units", "unitsReturned", opts.Leases.Stats().UnitsReturned)
	}
	if err != nil {
		return fmt.Errorf("draining: %w", err)
	}
	log.Info("Drained; exiting")
	return nil
}

// leaseSweep is how often the sidecar ends expired leases and gives back their unused units:
// a lease's units return at most this long after it ends (or at its key's next request).
const leaseSweep = 20 * time.Millisecond
