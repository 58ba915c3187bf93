package engine

import (
	"context"
	"flag"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/dataplane/cmdline"
	"github.com/sluice-dev/sluice/internal/dataplane/metrics"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testutil/redisserver"
)

func parse(t *testing.T, args ...string) *cmdline.Options {
	t.Helper()
	o, err := cmdline.ParseRLS(args, flag.ContinueOnError, func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	return &o.Options
}

// TestOpen: without --redis-url the engine decides with the local store alone; with it, the
// Decider takes through Redis, the lease engine exists only when asked for, and Close may be
// called twice.
func TestOpen(t *testing.T) {
	lim := limiter.Limit{Algorithm: limiter.FixedWindow, Limit: 5, Window: time.Minute}
	t.Run("local", func(t *testing.T) {
		e, err := Open(Options{Flags: parse(t), Metrics: metrics.New(), Leases: true})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		if e.Decider.Remote() != nil || e.Leases != nil || e.Decider.Local() == nil {
			t.Fatalf("remote %v, leases %v, local %v", e.Decider.Remote(), e.Leases, e.Decider.Local())
		}
	})
	t.Run("redis", func(t *testing.T) {
		srv := redisserver.StartTest(t)
		for _, leases := range []bool{false, true} {
			e, err := Open(Options{Flags: parse(t, "--redis-url", srv.URL(), "--redis-timeout", "5s"), Metrics: metrics.New(), Leases: leases})
			if err != nil {
				t.Fatal(err)
			}
			if (e.Leases != nil) != leases || e.Decider.Remote() == nil {
				t.Fatalf("leases asked %v: engine %v, remote %v", leases, e.Leases, e.Decider.Remote())
			}
			key := fmt.Sprint("engine-test-", leases)
			ctx, cancel := context.WithCancel(context.Background())
			e.Start(ctx)
			r, err := e.Decider.Remote().Take(ctx, key, lim, 1, time.Now())
			if err != nil || !r.Allowed || r.Remaining != 4 {
				t.Fatalf("take through Redis: %+v, %v", r, err)
			}
			cancel()
			e.Close()
			e.Close()
			if _, err := e.Decider.Remote().Take(context.Background(), key, lim, 1, time.Now()); err == nil {
				t.Fatal("the store still answers after Close")
			}
		}
	})
}
