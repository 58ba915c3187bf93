// Command sluice-sidecar is Sluice's rate-limiting reverse proxy, injected next to an
// application: it reads the namespace's rendered policies.json, keeps the policies whose
// selectors match this pod's labels, decides every request against them (Redis, with this pod's
// share of each limit as fallback) and proxies the admitted ones to the application.
//
// Every flag can also be set as an environment variable: SLUICE_ and the flag name in upper
// case with '-' as '_' (e.g. SLUICE_REDIS_URL). A flag on the command line wins. The flags, and
// the names the webhook injects them with, are in package internal/dataplane/cmdline and internal/inject.
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
	"net/url"
	"os"
	"os/signal"
	"runtime/debug"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sluice-dev/sluice/internal/dataplane/cmdline"
	"github.com/sluice-dev/sluice/internal/dataplane/config"
	"github.com/sluice-dev/sluice/internal/dataplane/engine"
	"github.com/sluice-dev/sluice/internal/dataplane/metrics"
	"github.com/sluice-dev/sluice/internal/inject"
	"github.com/sluice-dev/sluice/internal/version"
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

// gcPercent is the sidecar's GOGC unless the environment sets one. The heap a busy sidecar
// keeps live is small (its connection buffers, about 3 MB under 32 busy connections), and it
// allocates little per request, so a collection at 1.5 times the live heap rather than twice
// costs no CPU that bench/proxy.sh can tell apart and keeps about 2 MiB less resident.
const gcPercent = 50

func run() error {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
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

	eng, err := engine.Open(engine.Options{Flags: o, Metrics: m, Log: log, Leases: true})
	if err != nil {
		return err
	}
	defer eng.Close()
	h := proxy.New(proxy.Options{Upstream: target, Config: loader.Current, Decider: eng.Decider, Metrics: m, Log: log})

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() { _ = loader.Run(ctx) }()
	eng.Start(ctx)

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
	admin, err := eng.Serve(ctx, engine.Serving{Key: "listen", Addr: o.Listen, Serve: srv.Serve, Ready: ready,
		Attrs: []any{"upstream", target.String(), "config", o.Config, "podLabelsFile", o.PodLabelsFile}})
	if err != nil {
		return err
	}
	draining.Store(true)
	log.Info("Shutting down: draining in-flight requests", "timeout", o.ShutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), o.ShutdownTimeout)
	defer cancel()
	err = srv.Shutdown(sctx)
	_ = admin.Shutdown(sctx)
	eng.Close() // gives the leases' unused units back to the fleet
	if err != nil {
		return fmt.Errorf("draining: %w", err)
	}
	log.Info("Drained; exiting")
	return nil
}
