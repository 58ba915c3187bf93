// Command sluice-ratelimit serves Envoy's rate limit service protocol (RLS v3,
// envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) with the descriptor rules of the
// RateLimitPolicies that declare a domain, as rendered into policies.json (--config): the
// controller's sluice-ratelimit-policies ConfigMap, or `sluicectl render` output. It decides
// with the sidecar's stores, breaker, failure modes, local shares (this replica's rank among
// the RLS pods the document lists, --pod-name) and metrics, and reloads the file without a
// restart.
//
// Its flags are the sidecar's shared ones and --grpc-listen (package internal/dataplane/cmdline); each can
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
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluice-dev/sluice/internal/dataplane/cmdline"
	"github.com/sluice-dev/sluice/internal/dataplane/config"
	"github.com/sluice-dev/sluice/internal/dataplane/engine"
	"github.com/sluice-dev/sluice/internal/dataplane/metrics"
	"github.com/sluice-dev/sluice/internal/rls"
	"github.com/sluice-dev/sluice/internal/version"
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

	eng, err := engine.Open(engine.Options{Flags: &o.Options, Metrics: m, Log: log, Leases: true})
	if err != nil {
		return err
	}
	defer eng.Close()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() { _ = loader.Run(ctx) }()
	eng.Start(ctx)

	srv := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(srv, rls.New(rls.Options{Config: loader.Current, Decider: eng.Decider, Metrics: m}))
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
	admin, err := eng.Serve(ctx, engine.Serving{Key: "grpc", Addr: o.GRPCListen, Serve: srv.Serve, Ready: ready,
		Attrs: []any{"config", o.Config, "podName", o.PodName}})
	if err != nil {
		return err
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
