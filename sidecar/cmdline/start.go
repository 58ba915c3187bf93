package cmdline

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/redis/go-redis/v9"
	"k8s.io/utils/clock"

	"github.com/sluice-dev/sluice/internal/inject"
	"github.com/sluice-dev/sluice/internal/limiter"
)

// Logger is the JSON logger at --log-level that both binaries log with. go-redis logs every
// failed dial, which while Redis is down is one line per probe; the breaker's transitions say it
// once, so go-redis's lines go to debug.
func (o *Options) Logger() (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.LogLevel)); err != nil {
		return nil, fmt.Errorf("--%s: %w", inject.FlagLogLevel, err)
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	redis.SetLogger(redisLogger{log})
	return log, nil
}

type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, "go-redis: "+fmt.Sprintf(format, v...))
}

// Every calls fn with the tick's time every period until ctx ends: the local store's sweep of
// expired keys, the lease engine's end of expired leases.
func Every(ctx context.Context, clk clock.WithTicker, period time.Duration, fn func(time.Time)) {
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

// localSweep is how often the local store drops the keys whose windows have ended.
const localSweep = 30 * time.Second

// SweepLocal drops the local store's ended keys every localSweep until ctx ends.
func SweepLocal(ctx context.Context, clk clock.WithTicker, m *limiter.MemoryStore) {
	Every(ctx, clk, localSweep, func(now time.Time) { m.Sweep(now) })
}
