package cmdline

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/inject"
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
