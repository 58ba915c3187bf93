// Package cmdline is the sidecar's command line: its flags, their defaults and the SLUICE_
// environment variables that stand in for them. It is a package of its own, not part of main,
// so that the webhook's tests can parse the arguments it injects with the sidecar's own flag
// set. Every name comes from package inject.
package cmdline

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"path"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/internal/dataplane/breaker"
	"github.com/sluice-dev/sluice/internal/dataplane/config"
	"github.com/sluice-dev/sluice/internal/inject"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/limiter/redisstore"
	"github.com/sluice-dev/sluice/internal/limiter/redisurl"
	"github.com/sluice-dev/sluice/internal/policy"
)

// Options are the sidecar's settings, as its flags and environment give them.
type Options struct {
	Listen, Upstream, Config, PodLabelsFile, PodLabels string
	PodName                                            string
	RedisURL                                           string
	RedisTimeout                                       time.Duration
	// RedisIdleTimeout closes Redis connections unused for that long; 0 never does.
	RedisIdleTimeout                    time.Duration
	MetricsListen                       string
	BreakerThreshold                    int
	BreakerCooldown, BreakerMaxCooldown time.Duration
	ReloadInterval, ShutdownTimeout     time.Duration
	LocalMaxKeys                        int
	LogLevel                            string
	Pprof                               bool
	// MaxHeaderBytes, ReadHeaderTimeout and IdleTimeout bound what a client may send and how
	// slowly (the sidecar's proxy.ServerOptions).
	MaxHeaderBytes                 int
	ReadHeaderTimeout, IdleTimeout time.Duration
	// RedisPassword is $SLUICE_REDIS_PASSWORD (inject.EnvRedisPassword); no flag sets it, so
	// that it never shows in the pod spec's arguments.
	RedisPassword string
}

// NewFlagSet returns the sidecar's flag set, which stores into o, with every default set.
func NewFlagSet(o *Options, h flag.ErrorHandling) *flag.FlagSet {
	fs := flag.NewFlagSet("sluice-sidecar", h)
	fs.StringVar(&o.Listen, inject.FlagListen, fmt.Sprintf(":%d", inject.DefaultListenPort), "address the proxy listens on (HTTP/1.1 and h2c)")
	fs.StringVar(&o.Upstream, inject.FlagUpstream, "http://127.0.0.1:8080", "URL of the application")
	fs.StringVar(&o.PodLabelsFile, inject.FlagPodLabelsFile, path.Join(inject.PodInfoDir, inject.PodLabelsFile), "downward API labels file (key=\"value\" lines); empty for none")
	fs.StringVar(&o.PodLabels, inject.FlagPodLabels, "", "pod labels as k=v,k2=v2; override the file's")
	sharedFlags(fs, o)
	fs.IntVar(&o.MaxHeaderBytes, inject.FlagMaxHeaderBytes, inject.DefaultMaxHeaderBytes, "largest request head (request line and header fields) in bytes; larger ones are answered 431 (414 for the request line)")
	fs.DurationVar(&o.ReadHeaderTimeout, inject.FlagReadHeaderTimeout, inject.DefaultReadHeaderTimeout, "how long a client may take to send a request's head")
	fs.DurationVar(&o.IdleTimeout, inject.FlagIdleTimeout, inject.DefaultIdleTimeout, "how long a kept-alive client connection may wait for its next request")
	return fs
}

// sharedFlags are the flags of the sidecar that the RLS server has too: the policies, the
// replica's name, Redis, the breaker, the local store, metrics, logs and shutdown.
func sharedFlags(fs *flag.FlagSet, o *Options) {
	fs.StringVar(&o.Config, inject.FlagConfig, path.Join(inject.PoliciesDir, policy.DataKey), "rendered policies file; absent means no policies")
	fs.StringVar(&o.PodName, inject.FlagPodName, "", "this pod's name (the webhook sets "+inject.EnvName(inject.FlagPodName)+" from the downward API); ranks the pod for its exact local share, which is 0 while empty and the policy lists its pods")
	fs.StringVar(&o.RedisURL, inject.FlagRedisURL, "", "Redis URL ("+strings.Join(redisurl.URLSchemes(), "://, ")+"://); empty decides locally")
	fs.DurationVar(&o.RedisTimeout, inject.FlagRedisTimeout, redisstore.DefaultTimeout, "budget of one Redis call")
	fs.DurationVar(&o.RedisIdleTimeout, inject.FlagRedisIdleTimeout, redisstore.DefaultIdleTimeout, "close Redis connections unused for this long, so a quiet pod holds none (at most "+fmt.Sprint(redisstore.MaxConns)+" per Redis node otherwise); 0 never closes them")
	fs.StringVar(&o.MetricsListen, inject.FlagMetricsListen, fmt.Sprintf(":%d", inject.DefaultMetricsPort), "address of /metrics, /healthz and /readyz")
	fs.IntVar(&o.BreakerThreshold, inject.FlagBreakerThreshold, breaker.DefaultThreshold, "consecutive Redis failures that open the breaker")
	fs.DurationVar(&o.BreakerCooldown, inject.FlagBreakerCooldown, breaker.DefaultCooldown, "how long the breaker stays open before a probe")
	fs.DurationVar(&o.BreakerMaxCooldown, inject.FlagBreakerMaxCooldown, breaker.DefaultMaxCooldown, "longest cooldown after failed probes")
	fs.DurationVar(&o.ReloadInterval, inject.FlagReloadInterval, config.DefaultRecheck, "periodic re-read of the files, behind file events")
	fs.DurationVar(&o.ShutdownTimeout, inject.FlagShutdownTimeout, 20*time.Second, "how long SIGTERM waits for in-flight requests")
	fs.IntVar(&o.LocalMaxKeys, inject.FlagLocalMaxKeys, limiter.DefaultMaxKeys, "most keys the local store holds")
	fs.StringVar(&o.LogLevel, inject.FlagLogLevel, "info", "debug, info, warn or error")
	fs.BoolVar(&o.Pprof, inject.FlagPprof, false, "serve /debug/pprof/ on the metrics listener")
}

// RLSOptions are the RLS server's (cmd/ratelimit) settings: the flags it shares with the
// sidecar, and its gRPC address. The proxy's fields of Options stay zero.
type RLSOptions struct {
	Options
	GRPCListen string
}

// NewRLSFlagSet returns the RLS server's flag set, which stores into o.
func NewRLSFlagSet(o *RLSOptions, h flag.ErrorHandling) *flag.FlagSet {
	fs := flag.NewFlagSet("sluice-ratelimit", h)
	fs.StringVar(&o.GRPCListen, inject.FlagGRPCListen, fmt.Sprintf(":%d", inject.DefaultRLSPort), "address of the gRPC rate limit service (envoy.service.ratelimit.v3)")
	sharedFlags(fs, &o.Options)
	return fs
}

// ParseRLS is Parse for the RLS server: its flags, the same SLUICE_ variables.
func ParseRLS(args []string, h flag.ErrorHandling, lookupEnv func(string) (string, bool)) (*RLSOptions, error) {
	o := &RLSOptions{}
	return o, parse(NewRLSFlagSet(o, h), &o.Options, args, lookupEnv)
}

// Parse parses args with the sidecar's flag set, then sets every flag not given on the
// command line from its environment variable (inject.EnvName), as lookupEnv (os.LookupEnv in
// production) finds it, and reads the Redis password from inject.EnvRedisPassword. A flag on
// the command line wins over its variable.
func Parse(args []string, h flag.ErrorHandling, lookupEnv func(string) (string, bool)) (*Options, error) {
	o := &Options{}
	return o, parse(NewFlagSet(o, h), o, args, lookupEnv)
}

// parse parses args with fs (which stores into o), then the environment.
func parse(fs *flag.FlagSet, o *Options, args []string, lookupEnv func(string) (string, bool)) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	// Go's flag package stops at the first argument that is not a flag: every flag after a
	// stray word would be ignored, and limiting silently changed.
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q: %s takes flags only, and would ignore every flag after it", fs.Arg(0), fs.Name())
	}
	if err := envDefaults(fs, lookupEnv); err != nil {
		return err
	}
	o.RedisPassword, _ = lookupEnv(inject.EnvRedisPassword)
	return contradictions(fs)
}

// contradictions rejects flags that cannot hold together: two listeners on one address, a
// breaker's longest cooldown below its first.
func contradictions(fs *flag.FlagSet) error {
	addrs := map[string]string{} // address -> flag
	for _, name := range []string{inject.FlagListen, inject.FlagGRPCListen, inject.FlagMetricsListen} {
		f := fs.Lookup(name)
		if f == nil {
			continue
		}
		addr := f.Value.String()
		if _, port, err := net.SplitHostPort(addr); err == nil && port == "0" {
			continue // each gets a port of its own
		}
		if other, ok := addrs[addr]; ok {
			return fmt.Errorf("--%s and --%s are both %q: they must differ", other, name, addr)
		}
		addrs[addr] = name
	}
	cd, maxCD := fs.Lookup(inject.FlagBreakerCooldown).Value.(flag.Getter), fs.Lookup(inject.FlagBreakerMaxCooldown).Value.(flag.Getter)
	if a, b := cd.Get().(time.Duration), maxCD.Get().(time.Duration); b < a {
		return fmt.Errorf("--%s %s is below --%s %s", inject.FlagBreakerMaxCooldown, b, inject.FlagBreakerCooldown, a)
	}
	return nil
}

// envDefaults sets every flag not given on the command line from its environment variable.
func envDefaults(fs *flag.FlagSet, lookupEnv func(string) (string, bool)) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] {
			return
		}
		env := inject.EnvName(f.Name)
		if v, ok := lookupEnv(env); ok {
			if err := f.Value.Set(v); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", env, err))
			}
		}
	})
	return errors.Join(errs...)
}
