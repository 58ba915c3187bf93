package cmdline

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"time"

	"github.com/sluice-dev/sluice/internal/inject"
	"github.com/sluice-dev/sluice/internal/limiter/redisstore"
	"github.com/sluice-dev/sluice/sidecar/breaker"
	"github.com/sluice-dev/sluice/sidecar/metrics"
)

// OpenRedis connects to o.RedisURL (with o.RedisPassword) and returns the Redis store, the
// breaker that guards it, reporting its transitions to m and log, and a close function that
// stops the store's batcher and then closes the client. The sidecar and the RLS server both
// wire Redis with it. o.RedisURL must not be empty.
func OpenRedis(o *Options, m *metrics.Metrics, log *slog.Logger) (*redisstore.Store, *breaker.Breaker, func(), error) {
	rawURL, err := WithPassword(o.RedisURL, o.RedisPassword)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("--%s: %w", inject.FlagRedisURL, err)
	}
	client, err := redisstore.NewClientFromURL(rawURL)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("--%s: %w", inject.FlagRedisURL, err)
	}
	ro := redisstore.Options{Timeout: o.RedisTimeout}
	if err := ro.Validate(); err != nil {
		_ = client.Close()
		return nil, nil, nil, err
	}
	store := redisstore.New(client, ro)
	brk := breaker.New(breaker.Options{
		Threshold: o.BreakerThreshold, Cooldown: o.BreakerCooldown, MaxCooldown: o.BreakerMaxCooldown,
		OnTransition: func(from, to breaker.State, cd time.Duration) {
			m.BreakerState.Set(float64(to))
			m.BreakerTransitions.WithLabelValues(to.String()).Inc()
			log.Warn("Redis circuit breaker changed state", "from", from.String(), "to", to.String(), "cooldown", cd)
		},
	})
	log.Info("Deciding with Redis; failure modes apply while it is unreachable",
		"redis", RedactURL(o.RedisURL), "timeout", o.RedisTimeout, "breakerThreshold", o.BreakerThreshold, "breakerCooldown", o.BreakerCooldown)
	return store, brk, func() { _ = store.Close(); _ = client.Close() }, nil
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
