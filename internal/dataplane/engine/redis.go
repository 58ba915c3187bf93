package engine

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"time"

	"github.com/sluice-dev/sluice/internal/dataplane/breaker"
	"github.com/sluice-dev/sluice/internal/dataplane/cmdline"
	"github.com/sluice-dev/sluice/internal/dataplane/metrics"
	"github.com/sluice-dev/sluice/internal/inject"
	"github.com/sluice-dev/sluice/internal/limiter/redisstore"
)

// redisWiring is the Redis side of an engine: the store, the breaker guarding it and, on Redis
// Cluster, one breaker per master.
type redisWiring struct {
	Store         *redisstore.Store
	Breaker       *breaker.Breaker
	MasterBreaker func(master string) *breaker.Breaker
	// Close stops the store's batcher and then closes the client.
	Close func()
}

// openRedis connects to o.RedisURL (with o.RedisPassword, closing connections idle for
// o.RedisIdleTimeout) and returns the Redis wiring. The breakers report their transitions to
// m and log; the gauge is the worst of to and worst() (the decider's breakers' worst state;
// worst may return breaker.Closed before the decider exists). o.RedisURL must not be empty.
func openRedis(o *cmdline.Options, m *metrics.Metrics, log *slog.Logger, worst func() breaker.State) (*redisWiring, error) {
	rawURL, err := WithPassword(o.RedisURL, o.RedisPassword)
	if err != nil {
		return nil, fmt.Errorf("--%s: %w", inject.FlagRedisURL, err)
	}
	if o.RedisIdleTimeout < 0 {
		return nil, fmt.Errorf("--%s %s: negative", inject.FlagRedisIdleTimeout, o.RedisIdleTimeout)
	}
	idle := o.RedisIdleTimeout
	if idle == 0 {
		idle = -1 // ClientOptions: never close
	}
	client, err := redisstore.NewClient(rawURL, redisstore.ClientOptions{IdleTimeout: idle})
	if err != nil {
		return nil, fmt.Errorf("--%s: %w", inject.FlagRedisURL, err)
	}
	ro := redisstore.Options{Timeout: o.RedisTimeout}
	if err := ro.Validate(); err != nil {
		_ = client.Close()
		return nil, err
	}
	store := redisstore.New(client, ro)
	// One breaker for the store, and on Redis Cluster one per master, so that a master that
	// fails sends only its own slots' keys to the fallback. The gauge is the worst state.
	newBreaker := func(master string) *breaker.Breaker {
		return breaker.New(breaker.Options{
			Threshold: o.BreakerThreshold, Cooldown: o.BreakerCooldown, MaxCooldown: o.BreakerMaxCooldown, Jitter: true,
			OnTransition: func(from, to breaker.State, cd time.Duration) {
				m.BreakerState.Set(float64(max(to, worst())))
				m.BreakerTransitions.WithLabelValues(to.String()).Inc()
				attrs := []any{"from", from.String(), "to", to.String(), "cooldown", cd}
				if master != "" {
					attrs = append(attrs, "master", master)
				}
				log.Warn("Redis circuit breaker changed state", attrs...)
			},
		})
	}
	log.Info("Deciding with Redis; failure modes apply while it is unreachable",
		"redis", RedactURL(o.RedisURL), "timeout", o.RedisTimeout, "breakerThreshold", o.BreakerThreshold, "breakerCooldown", o.BreakerCooldown)
	return &redisWiring{
		Store: store, Breaker: newBreaker(""), MasterBreaker: newBreaker,
		Close: func() { _ = store.Close(); _ = client.Close() },
	}, nil
}

// WithPassword returns rawURL with password set, unless password is empty or the URL already
// has one.
func WithPassword(rawURL, password string) (string, error) {
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

// RedactURL is s without its password, for logs.
func RedactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparseable)"
	}
	return u.Redacted()
}
