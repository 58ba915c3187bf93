// Command sluice-ratelimit serves Envoy's rate limit service protocol (RLS v3,
// envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) with the descriptor rules of the
// RateLimitPolicies that declare a domain, as rendered into policies.json (--config): the
// controller's sluice-ratelimit-policies ConfigMap, or `sluicectl render` output. It decides
// with the sidecar's stores, breaker, failure modes, local shares (this replica's rank among
// the RLS pods the document lists, --pod-name) and metrics, and reloads the file without a
// restart.
//
// Its flags are the sidecar's shared ones and --grpc-listen (package sidecar/cmdline); each can
// be set as SLUICE_<FLAG> too.
package main

import (
	// Calendar rules name IANA time zones; the image is distroless/static, so the binary
	// carries its own copy of the database.
	_ "time/tzdata"

	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"k8s.io/utils/clock"

	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/rls"
	"github.com/sluice-dev/sluice/internal/version"
	"github.com/sluice-dev/sluice/sidecar/breaker"
	"github.com/sluice-dev/sluice/sidecar/cmdline"
	"github.com/sluice-dev/sluice/sidecar/config"
	"github.com/sluice-dev/sluice/sidecar/decide"
	"github.com/sluice-dev/sluice/sidecar/metrics"
)

func main() {
	if len(os.Args) == 2 && (os.Args[1] == "--version" || os.Args[1] == "-version") {
		fmt.Println(version.String("sluice-ratelimit"))
		return
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "sluice-ratelimit:", err)
		os.Exit(1)
	}
}

func run() error {
	o, err := cmdline.ParseRLS(os.Args[1:], flag.ExitOnError, os.LookupEnv)
	if err != nil {
		return err
	}
	log, err := o.Logger()
	if err != nil {
		return err
	}

	m := metrics.New()
	loader := config.NewLoader(o.Config, "", nil, m, log)
	loader.Domains = true
	loader.Recheck = o.ReloadInterval
	loader.PodName = o.PodName

	local := limiter.NewMemoryStore(limiter.MemoryStoreOptions{MaxKeys: o.LocalMaxKeys})
	do := decide.Options{Local: local, Metrics: m, Log: log}
	// decider is set once made: the breakers' transitions read its worst state.
	var decider atomic.Pointer[decide.Decider]
	if o.RedisURL != "" {
		r, err := cmdline.OpenRedis(&o.Options, m, log, func() breaker.State {
			if d := decider.Load(); d != nil {
				return d.BreakerState()
			}
			return breaker.Closed
		})
		if err != nil {
			return err
		}
		defer r.Close()
		do.Remote, do.Breaker, do.MasterBreaker = r.Store, r.Breaker, r.MasterBreaker
		// What the local share admits while Redis is unreachable is charged to Redis when it
		// is back, for at most as many keys as the local store holds.
		do.BacklogMaxKeys = o.LocalMaxKeys
	} else {
		log.Warn("No --redis-url: every limit is decided in this replica with its share, as in failure mode Local")
	}

	d := decide.New(do)
	decider.Store(d)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() { _ = loader.Run(ctx) }()
	go cmdline.SweepLocal(ctx, clock.RealClock{}, local)

	srv := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(srv, rls.New(rls.Options{Config: loader.Current, Decider: d, Metrics: m}))
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)

	var draining atomic.Bool
	ready := func() error {
		if draining.Load() {
			return errors.New("shutting down")
		}
		if !loader.Ready() {
			return errors.New("configuration not loaded (see the log)")
		}
		return nil
	}
	admin := &http.Server{Addr: o.MetricsListen, Handler: m.AdminHandler(ready, o.Pprof), ReadHeaderTimeout: 5 * time.Second}
	ln, err := net.Listen("tcp", o.GRPCListen)
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
	log.Info("Serving", "grpc", ln.Addr().String(), "metrics", aln.Addr().String(), "config", o.Config, "podName", o.PodName)

	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	draining.Store(true)
	hs.Shutdown()
	log.Info("Shutting down: draining in-flight calls", "timeout", o.ShutdownTimeout)
	done := make(chan struct{})
	go func() { srv.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(o.ShutdownTimeout):
		srv.Stop()
	}
	sctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = admin.Shutdown(sctx)
	return nil
}
