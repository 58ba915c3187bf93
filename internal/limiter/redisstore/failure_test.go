package redisstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testutil/proc"
	"github.com/sluice-dev/sluice/internal/testutil/redisserver"
)

// failureBudget is the Timeout of the failure tests: the production default.
const failureBudget = DefaultTimeout

// failedTake makes one Take against a Redis that is down or hung, checks that it fails with an
// *Error matching ErrUnavailable (and ErrTimeout when wantTimeout), and logs how long it took.
// No wall-clock bound is asserted (a loaded machine delays any wake-up): that the store's own
// deadline ended the call, not go-redis's 3 s read timeout, shows in the error, whose Timeout
// only the store's budget sets.
func failedTake(t *testing.T, s *Store, lim limiter.Limit, wantTimeout bool) time.Duration {
	t.Helper()
	start := time.Now()
	r, err := s.Take(context.Background(), "k", lim, 1, time.Now())
	elapsed := time.Since(start)
	if err == nil {
		t.Fatalf("Take succeeded (%+v) against a Redis that is down", r)
	}
	var e *Error
	if !errors.As(err, &e) || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Take error %v (%T) is not an *Error matching ErrUnavailable", err, err)
	}
	if errors.Is(err, ErrTimeout) != wantTimeout || e.Timeout != wantTimeout {
		t.Fatalf("Take error %v: errors.Is(ErrTimeout) = %v, want %v", err, errors.Is(err, ErrTimeout), wantTimeout)
	}
	t.Logf("failed after %s (budget %s): %v", elapsed, failureBudget, err)
	return elapsed
}

// takeThroughTimeouts takes one unit of key against a Redis that is up, retrying a take that
// timed out: a store with the production budget may time out on a loaded machine, and this
// test is about what a dead server does, not about a live one's latency. A retried take may
// count twice (a timeout says "unknown"); the callers' limits leave room for that.
func takeThroughTimeouts(t *testing.T, s *Store, key string, lim limiter.Limit) limiter.Result {
	t.Helper()
	var r limiter.Result
	var err error
	_ = wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, proc.Patience, true, func(context.Context) (bool, error) {
		r, err = s.Take(context.Background(), key, lim, 1, time.Time{})
		return !errors.Is(err, ErrTimeout), nil
	})
	if err != nil {
		t.Fatalf("Take(%q, %s): %v", key, lim.Name(), err)
	}
	return r
}

// TestKilledRedisFailsFast: after SIGKILL, calls fail at once as unavailable (connections are
// refused); after a restart, which drops the script cache, the store recovers (NOSCRIPT falls
// back to EVAL).
func TestKilledRedisFailsFast(t *testing.T) {
	srv := redisserver.StartTest(t)
	s := newStore(t, newClient(t, srv.URL()), Options{Timeout: failureBudget})
	for _, lim := range limiter.Variants(10, time.Second, 0, time.Second) {
		takeThroughTimeouts(t, s, "k", lim)
	}
	srv.Kill()
	lim := limiter.Limit{Algorithm: limiter.TokenBucket, Limit: 10, Window: time.Second}
	for range 3 {
		failedTake(t, s, lim, false)
	}
	srv.Restart()
	// The failed dial started a backoff (see conns.go): calls fail at once until it runs out,
	// within MaxDialBackoff, and a call after it reconnects.
	probe := limiter.Limit{Algorithm: limiter.FixedWindow, Limit: 1000, Window: time.Hour}
	var err error
	_ = wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, proc.Patience, true, func(context.Context) (bool, error) {
		_, err = s.Take(context.Background(), "probe", probe, 1, time.Time{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("no Take succeeded within %s of the restart: %v", proc.Patience, err)
	}
	for _, lim := range limiter.Variants(10, time.Second, 0, time.Second) {
		if r := takeThroughTimeouts(t, s, "k", lim); !r.Allowed {
			t.Fatalf("%s after restart: %+v, want a fresh key's admission", lim.Name(), r)
		}
	}
}

// TestPausedRedisTimesOutWithinBudget: a server that accepts connections but never answers
// (SIGSTOP) makes calls fail as timeouts after the budget, on a pooled connection and on a
// new one; after SIGCONT the store works again.
func TestPausedRedisTimesOutWithinBudget(t *testing.T) {
	srv := redisserver.StartTest(t)
	client := newClient(t, srv.URL())
	s := newStore(t, client, Options{Timeout: failureBudget})
	lim := limiter.Limit{Algorithm: limiter.FixedWindow, Limit: 1000, Window: time.Hour}
	takeThroughTimeouts(t, s, "k", lim)
	srv.Pause()
	for range 3 {
		if d := failedTake(t, s, lim, true); d < failureBudget {
			t.Fatalf("timed out after %s, before the %s budget", d, failureBudget)
		}
	}
	srv.Resume()
	// The requests that timed out may still run once Redis resumes: a timeout says "unknown",
	// not "not counted". The store works again either way.
	if r := mustTake(t, newStore(t, client, Options{Timeout: testTimeout}), "k", lim, 1, time.Time{}); !r.Allowed {
		t.Fatalf("after resume: %+v", r)
	}
}

// TestCallerCancelIsNotUnavailability: a caller that gives up is not Redis failing, so the
// error must not trip a breaker that counts ErrUnavailable.
func TestCallerCancelIsNotUnavailability(t *testing.T) {
	srv := redisserver.StartTest(t)
	s := newStore(t, newClient(t, srv.URL()), Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := s.Take(ctx, "k", limiter.Limit{Algorithm: limiter.FixedWindow, Limit: 1, Window: time.Second}, 1, time.Time{})
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrUnavailable) {
		t.Fatalf("Take with a canceled context: %v; want context.Canceled, not ErrUnavailable", err)
	}
}

// TestInvalidArguments: bad limits, costs and instants are the caller's errors, reported
// without a round trip, never as ErrUnavailable.
func TestInvalidArguments(t *testing.T) {
	// A store whose Redis does not exist: any round trip would fail with ErrUnavailable.
	s := newStore(t, newClient(t, "redis://127.0.0.1:1"), Options{ExplicitTime: true})
	ok := limiter.Limit{Algorithm: limiter.FixedWindow, Limit: 1, Window: time.Second}
	for name, tc := range map[string]struct {
		lim  limiter.Limit
		n    int64
		now  time.Time
		want error
	}{
		"zero limit":        {limiter.Limit{}, 1, at(0), limiter.ErrInvalidLimit},
		"log limit too big": {limiter.Limit{Algorithm: limiter.SlidingWindowLog, Limit: limiter.MaxLogLimit + 1, Window: time.Second}, 1, at(0), limiter.ErrInvalidLimit},
		"sub-ms window":     {limiter.Limit{Algorithm: limiter.FixedWindow, Limit: 1, Window: time.Second + 1}, 1, at(0), limiter.ErrInvalidLimit},
		"zero cost":         {ok, 0, at(0), limiter.ErrInvalidLimit},
		"before the epoch":  {ok, 1, time.UnixMilli(-1), limiter.ErrInvalidTime},
		"after MaxNowMs":    {ok, 1, time.UnixMilli(limiter.MaxNowMs + 1), limiter.ErrInvalidTime},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := s.Take(context.Background(), "k", tc.lim, tc.n, tc.now)
			if !errors.Is(err, tc.want) || errors.Is(err, ErrUnavailable) {
				t.Fatalf("Take: %v, want %v", err, tc.want)
			}
		})
	}
}
