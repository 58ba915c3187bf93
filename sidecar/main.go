// Command sluice-sidecar is Sluice's rate-limiting reverse proxy, injected next to an
// application: it reads the namespace's rendered policies.json, keeps the policies whose
// selectors match this pod's labels, decides every request against them (Redis, with this pod's
// share of each limit as fallback) and proxies the admitted ones to the application.
//
// Every flag can also be set as an environment variable: SLUICE_ and the flag name in upper
// case with '-' as '_' (e.g. SLUICE_REDIS_URL). A flag on the command line wins.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/limiter/redisstore"
	"github.com/sluice-dev/sluice/sidecar/breaker"
	"github.com/sluice-dev/sluice/sidecar/config"
	"github.com/sluice-dev/sluice/sidecar/metrics"
	"github.com/sluice-dev/sluice/sidecar/proxy"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "sluice-sidecar:", err)
		os.Exit(1)
	}
}

func run() error {
	fs := flag.NewFlagSet("sluice-sidecar", flag.ExitOnError)
	listen := fs.String("listen", ":8081", "address the proxy listens on (HTTP/1.1 and h2c)")
	upstream := fs.String("upstream", "http://127.0.0.1:8080", "URL of the application")
	configPath := fs.String("config", "/etc/sluice/policies.json", "rendered policies file; absent means no policies")
	labelsFile := fs.String("pod-labels-file", "/etc/podinfo/labels", "downward API labels file (key=\"value\" lines); empty for none")
	podLabels := fs.String("pod-labels", "", "pod labels as k=v,k2=v2; override the file's")
	redisURL := fs.String("redis-url", "", "Redis URL (redis://, rediss://, redis+cluster://, redis+sentinel://); empty decides locally")
	redisTimeout := fs.Duration("redis-timeout", redisstore.DefaultTimeout, "budget of one Redis call")
	metricsListen := fs.String("metrics-listen", ":9090", "address of /metrics, /healthz and /readyz")
	threshold := fs.Int("breaker-threshold", breaker.DefaultThreshold, "consecutive Redis failures that open the breaker")
	cooldown := fs.Duration("breaker-cooldown", breaker.DefaultCooldown, "how long the breaker stays open before a probe")
	maxCooldown := fs.Duration("breaker-max-cooldown", breaker.DefaultMaxCooldown, "longest cooldown after failed probes")
	reload := fs.Duration("reload-interval", config.DefaultRecheck, "periodic re-read of the files, behind file events")
	shutdownTimeout := fs.Duration("shutdown-timeout", 20*time.Second, "how long SIGTERM waits for in-flight requests")
	localKeys := fs.Int("local-max-keys", limiter.DefaultMaxKeys, "most keys the local store holds")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	pprof := fs.Bool("pprof", false, "serve /debug/pprof/ on the metrics listener")
	maxHeaderBytes := fs.Int("max-header-bytes", proxy.DefaultMaxHeaderBytes, "largest request head (request line and header fields) in bytes; larger ones are answered 431")
	readHeaderTimeout := fs.Duration("read-header-timeout", proxy.DefaultReadHeaderTimeout, "how long a client may take to send a request's head")
	idleTimeout := fs.Duration("idle-timeout", proxy.DefaultIdleTimeout, "how long a kept-alive client connection may wait for its next request")
	_ = fs.Parse(os.Args[1:])
	if err := envDefaults(fs); err != nil {
		return err
	}

	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	// go-redis logs every failed dial; while Redis is down that is one line per probe. The
	// breaker's transitions say it once, so its lines go to debug.
	redis.SetLogger(redisLogger{log})

	target, err := url.Parse(*upstream)
	if err != nil || (target.Scheme != "http" && target.Scheme != "https") || target.Host == "" {
		return fmt.Errorf("--upstream %q is not an http(s) URL", *upstream)
	}
	static := map[string]string{}
	if *podLabels != "" {
		if static, err = config.ParseLabelList(*podLabels); err != nil {
			return fmt.Errorf("--pod-labels: %w", err)
		}
	}

	m := metrics.New()
	loader := config.NewLoader(*configPath, *labelsFile, static, m, log)
	loader.Recheck = *reload

	opts := proxy.Options{
		Upstream: target,
		Config:   loader.Current,
		Local:    limiter.NewMemoryStore(limiter.MemoryStoreOptions{MaxKeys: *localKeys}),
		Metrics:  m,
		Log:      log,
	}
	if *redisURL != "" {
		rawURL, err := withPassword(*redisURL, os.Getenv(RedisPasswordEnv))
		if err != nil {
			return fmt.Errorf("--redis-url: %w", err)
		}
		client, err := redisstore.NewClientFromURL(rawURL)
		if err != nil {
			return fmt.Errorf("--redis-url: %w", err)
		}
		defer func() { _ = client.Close() }()
		ro := redisstore.DefaultOptions()
		ro.Timeout = *redisTimeout
		if err := ro.Validate(); err != nil {
			return err
		}
		store := redisstore.New(client, ro)
		// Runs before the client's Close above: the store's batcher stops first.
		defer func() { _ = store.Close() }()
		opts.Remote = store
		opts.Breaker = breaker.New(breaker.Options{
			Threshold: *threshold, Cooldown: *cooldown, MaxCooldown: *maxCooldown,
			OnTransition: func(from, to breaker.State, cd time.Duration) {
				m.BreakerState.Set(float64(to))
				m.BreakerTransitions.WithLabelValues(to.String()).Inc()
				log.Warn("Redis circuit breaker changed state", "from", from.String(), "to", to.String(), "cooldown", cd)
			},
		})
		log.Info("Deciding with Redis; failure modes apply while it is unreachable",
			"redis", redactURL(*redisURL), "timeout", *redisTimeout, "breakerThreshold", *threshold, "breakerCooldown", *cooldown)
	} else {
		log.Warn("No --redis-url: every limit is decided in this pod with its share (limit / replicas), as in failure mode Local")
	}
	handler := proxy.New(opts)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() { _ = loader.Run(ctx) }()
	go sweep(ctx, opts.Local.(*limiter.MemoryStore))

	var draining atomic.Bool
	ready := func() error {
		if draining.Load() {
			return errors.New("shutting down")
		}
		if !loader.Ready() {
			return errors.New("configuration not loaded (see the log); passing traffic through meanwhile")
		}
		c, err := net.DialTimeout("tcp", hostPort(target), time.Second)
		if err != nil {
			return fmt.Errorf("upstream: %w", err)
		}
		_ = c.Close()
		return nil
	}

	if *maxHeaderBytes < 1024 {
		return fmt.Errorf("--max-header-bytes %d: at least 1024", *maxHeaderBytes)
	}
	if *readHeaderTimeout <= 0 || *idleTimeout <= 0 {
		return errors.New("--read-header-timeout and --idle-timeout must be positive")
	}
	srv := proxy.NewServer(handler, proxy.ServerOptions{
		MaxHeaderBytes:    *maxHeaderBytes,
		ReadHeaderTimeout: *readHeaderTimeout,
		IdleTimeout:       *idleTimeout,
		Log:               log,
	})
	admin := &http.Server{Addr: *metricsListen, Handler: m.AdminHandler(ready, *pprof), ReadHeaderTimeout: 5 * time.Second}

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	aln, err := net.Listen("tcp", *metricsListen)
	if err != nil {
		return err
	}
	errc := make(chan error, 2)
	go func() { errc <- srv.Serve(ln) }()
	go func() { errc <- admin.Serve(aln) }()
	log.Info("Serving", "listen", ln.Addr().String(), "upstream", target.String(), "metrics", aln.Addr().String(),
		"config", *configPath, "podLabelsFile", *labelsFile)

	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	draining.Store(true)
	log.Info("Shutting down: draining in-flight requests", "timeout", *shutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), *shutdownTimeout)
	defer cancel()
	err = srv.Shutdown(sctx)
	_ = admin.Shutdown(sctx)
	if err != nil {
		return fmt.Errorf("draining: %w", err)
	}
	log.Info("Drained; exiting")
	return nil
}

// envDefaults sets every flag not given on the command line from SLUICE_<NAME>.
func envDefaults(fs *flag.FlagSet) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] {
			return
		}
		env := "SLUICE_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(env); ok {
			if err := f.Value.Set(v); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", env, err))
			}
		}
	})
	return errors.Join(errs...)
}

func sweep(ctx context.Context, m *limiter.MemoryStore) {
	t := time.NewTicker(30 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			m.Sweep(now)
		}
	}
}

func hostPort(u *url.URL) string {
	if u.Port() != "" {
		return u.Host
	}
	if u.Scheme == "https" {
		return net.JoinHostPort(u.Hostname(), "443")
	}
	return net.JoinHostPort(u.Hostname(), "80")
}

type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, "go-redis: "+fmt.Sprintf(format, v...))
}

// RedisPasswordEnv carries the Redis password (the injection webhook fills it from a Secret),
// so that it never appears in the pod spec's arguments.
const RedisPasswordEnv = "SLUICE_REDIS_PASSWORD" //nolint:gosec // the name of a variable, not a credential

// withPassword returns rawURL with password set, unless password is empty or the URL already
// has one.
func withPassword(rawURL, password string) (string, error) {
	if password == "" {
		return rawURL, nil
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", errors.New("unparseable URL")
	}
	if _, has := u.User.Password(); has {
		return rawURL, nil
	}
	u.User = url.UserPassword(u.User.Username(), password)
	return u.String(), nil
}

func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparseable)"
	}
	return u.Redacted()
}
