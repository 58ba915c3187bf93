package redisstore

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testutil/redisserver"
)

// TestSingleNodeClientBatches: a single-node client gets a batcher, and concurrent callers on
// one key share pipelines yet admit exactly the limit (each decision is still one script).
func TestSingleNodeClientBatches(t *testing.T) {
	const goroutines, each = 64, 25
	srv := redisserver.StartTest(t)
	s := newStore(t, newClient(t, srv.URL()), Options{Prefix: freshPrefix("batch"), Timeout: testTimeout, ExplicitTime: true})
	if s.batch == nil {
		t.Fatal("a single-node client's Store has no batcher")
	}
	lim := limiter.Limit{Algorithm: limiter.FixedWindow, Limit: 300, Window: time.Minute}
	checkExactlyCapacity(t, lim, takeConcurrently(t, s, "hot", lim, goroutines, each, func() time.Time { return at(0) }))
	batches, largest := s.batch.batches.Load(), s.batch.largest.Load()
	t.Logf("%d decisions in %d pipelines, the largest of %d", goroutines*each, batches, largest)
	if largest < 2 {
		t.Errorf("no pipeline carried more than one decision (%d pipelines for %d decisions)", batches, goroutines*each)
	}
}

// TestNoScriptMidBatch: after SCRIPT FLUSH, the concurrent batches that find the script gone
// recover: the calls answered NOSCRIPT are sent again as EVAL, and no request is counted twice.
func TestNoScriptMidBatch(t *testing.T) {
	const goroutines, each = 32, 20
	srv := redisserver.StartTest(t)
	s := newStore(t, newClient(t, srv.URL()), Options{Prefix: freshPrefix("noscript"), Timeout: testTimeout, ExplicitTime: true})
	fw := limiter.Limit{Algorithm: limiter.FixedWindow, Limit: 200, Window: time.Minute}
	tb := limiter.Limit{Algorithm: limiter.TokenBucket, Limit: 200, Window: limiter.MaxWindow}
	now := func() time.Time { return at(0) }

	// The first few concurrent calls make their own round trips, falling back to EVAL on
	// NOSCRIPT; this test is about pipelines, so it pretends those calls are always in flight.
	s.batch.active.Add(directMax)
	defer s.batch.active.Add(-directMax)

	// The script cached, some units taken; then the cache is flushed between calls, so the
	// concurrent batches below find it missing.
	first := map[limiter.Algorithm][]limiter.Result{}
	for _, lim := range []limiter.Limit{fw, tb} {
		for range 50 {
			first[lim.Algorithm] = append(first[lim.Algorithm], mustTake(t, s, "k", lim, 1, at(0)))
		}
	}
	if _, err := srv.Do("SCRIPT", "FLUSH"); err != nil {
		t.Fatal(err)
	}
	reloads := s.batch.reloads.Load()

	var wg sync.WaitGroup
	lims := []limiter.Limit{fw, tb}
	results := make([][]limiter.Result, len(lims))
	for i, lim := range lims {
		wg.Go(func() { results[i] = takeConcurrently(t, s, "k", lim, goroutines, each, now) })
	}
	wg.Wait()
	for i, lim := range lims {
		checkExactlyCapacity(t, lim, append(first[lim.Algorithm], results[i]...))
	}
	if got := s.batch.reloads.Load() - reloads; got < 1 {
		t.Errorf("no batch hit NOSCRIPT after the flush (%d recoveries)", got)
	}
	t.Logf("NOSCRIPT recoveries: %d before the concurrent calls, %d during", reloads, s.batch.reloads.Load()-reloads)
}

// TestPausedRedisFailsEveryWaitingCaller: with Redis hung, every caller, whether its pipeline
// is in flight or it is still queued behind full pipelines, fails as a timeout within its own
// budget, not after the batch's.
func TestPausedRedisFailsEveryWaitingCaller(t *testing.T) {
	// More callers than the pipelines in flight can carry, so some wait in the queue.
	const callers = senders*maxBatch + 100
	srv := redisserver.StartTest(t)
	client := newClient(t, srv.URL())
	s := newStore(t, client, Options{Timeout: failureBudget})
	lim := limiter.Limit{Algorithm: limiter.FixedWindow, Limit: 1000, Window: time.Hour}
	mustTake(t, s, "k", lim, 1, time.Time{})
	srv.Pause()
	t.Cleanup(srv.Resume)

	elapsed := make([]time.Duration, callers)
	errs := make([]error, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			start := time.Now()
			_, errs[i] = s.Take(context.Background(), "k", lim, 1, time.Time{})
			elapsed[i] = time.Since(start)
		})
	}
	wg.Wait()
	for i, err := range errs {
		var e *Error
		if !errors.As(err, &e) || !errors.Is(err, ErrUnavailable) || !errors.Is(err, ErrTimeout) {
			t.Fatalf("caller %d: %v (%T), want an *Error matching ErrUnavailable and ErrTimeout", i, err, err)
		}
		if elapsed[i] < failureBudget {
			t.Fatalf("caller %d timed out after %s, before the %s budget", i, elapsed[i], failureBudget)
		}
	}
	slices.Sort(elapsed)
	t.Logf("%d callers against a paused Redis, budget %s: failed after min %s, median %s, p99 %s, max %s",
		callers, failureBudget, elapsed[0], elapsed[callers/2], elapsed[callers*99/100], elapsed[callers-1])

	srv.Resume()
	if r := mustTake(t, newStore(t, client, Options{Timeout: testTimeout}), "k", lim, 1, time.Time{}); !r.Allowed {
		t.Fatalf("after resume: %+v", r)
	}
}

// TestCloseStopsTheBatcher: Close returns once the batcher's senders have returned (counted by
// the batcher itself, not by runtime.NumGoroutine, which other tests' goroutines and the
// client's disturb), is idempotent, fails a call in flight at once with ErrClosed, and every
// later Take too.
func TestCloseStopsTheBatcher(t *testing.T) {
	srv := redisserver.StartTest(t)
	client := newClient(t, srv.URL())
	lim := limiter.Limit{Algorithm: limiter.FixedWindow, Limit: 1000, Window: time.Hour}

	const budget = time.Second
	s := New(client, Options{Timeout: budget})
	b := s.batch
	if got := b.live.Load(); got != senders {
		t.Fatalf("%d senders running after New, want %d", got, senders)
	}
	takeConcurrently(t, s, "k", lim, 8, 10, time.Now)

	// A call in a pipeline when Close comes: Redis is paused, so the pipeline hangs for the
	// budget. Other calls pretend to be in flight, so this one is not sent on its own.
	srv.Pause()
	t.Cleanup(srv.Resume)
	b.active.Add(directMax)
	defer b.active.Add(-directMax)
	sent := b.batches.Load()
	inFlight := make(chan error, 1)
	go func() {
		_, err := s.Take(context.Background(), "k", lim, 1, time.Time{})
		inFlight <- err
	}()
	for b.batches.Load() == sent {
		runtime.Gosched()
	}
	start := time.Now()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	closed := time.Since(start)
	if got := b.live.Load(); got != 0 {
		t.Errorf("%d senders still running after Close returned", got)
	}
	// ErrClosed, not a timeout: the caller was released before its budget ran out.
	if err := <-inFlight; !errors.Is(err, ErrClosed) || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("call in flight during Close: %v, want ErrClosed and ErrUnavailable", err)
	}
	t.Logf("Close with a pipeline in flight took %s (budget %s)", closed, budget)
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := s.Take(context.Background(), "k", lim, 1, time.Time{}); !errors.Is(err, ErrClosed) || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Take after Close: %v, want ErrClosed and ErrUnavailable", err)
	}
}
