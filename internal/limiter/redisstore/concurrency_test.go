package redisstore

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testutil/redisserver"
)

// takeConcurrently has goroutines callers each make each requests of cost 1 on key, and
// returns the admitted results. now gives each call's instant.
func takeConcurrently(t *testing.T, s limiter.Store, key string, lim limiter.Limit, goroutines, each int, now func() time.Time) []limiter.Result {
	t.Helper()
	var (
		mu       sync.Mutex
		admitted []limiter.Result
		wg       sync.WaitGroup
	)
	for range goroutines {
		wg.Go(func() {
			for range each {
				r, err := s.Take(context.Background(), key, lim, 1, now())
				if err != nil {
					t.Error(err)
					return
				}
				if r.Allowed {
					mu.Lock()
					admitted = append(admitted, r)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return admitted
}

// checkExactlyCapacity checks that exactly lim.Capacity() requests passed, each seeing a
// different Remaining (0..cap-1): the script ran them one at a time.
func checkExactlyCapacity(t *testing.T, lim limiter.Limit, admitted []limiter.Result) {
	t.Helper()
	if int64(len(admitted)) != lim.Capacity() {
		t.Fatalf("%d admitted, want exactly %d", len(admitted), lim.Capacity())
	}
	var rem []int64
	for _, r := range admitted {
		rem = append(rem, r.Remaining)
	}
	slices.Sort(rem)
	for i, r := range rem {
		if lim.Mode != limiter.Queue && r != int64(i) {
			t.Fatalf("admitted requests saw Remaining %v, want each of 0..%d once", rem, lim.Capacity()-1)
		}
	}
}

// TestConcurrentCallersAdmitExactlyTheLimit: 64 goroutines on one key at one instant get
// exactly the capacity through, for every algorithm.
func TestConcurrentCallersAdmitExactlyTheLimit(t *testing.T) {
	const goroutines, each = 64, 25
	srv := redisserver.StartTest(t)
	client := newClient(t, srv.URL())
	for _, lim := range limiter.Variants(300, time.Minute, 0, limiter.MaxWindow) {
		t.Run(lim.Name(), func(t *testing.T) {
			s := newStore(t, client, Options{Prefix: freshPrefix("conc"), Timeout: testTimeout, ExplicitTime: true})
			admitted := takeConcurrently(t, s, "hot", lim, goroutines, each, func() time.Time { return at(0) })
			checkExactlyCapacity(t, lim, admitted)
		})
	}
}

// TestConcurrentCallersServerTime is the same with Redis's clock: FixedWindow (unless the run
// straddles a window boundary, which the test detects) and a token bucket that refills less
// than one token during the test.
func TestConcurrentCallersServerTime(t *testing.T) {
	const goroutines, each = 64, 25
	srv := redisserver.StartTest(t)
	client := newClient(t, srv.URL())
	serverMs := func() int64 {
		tm, err := client.Time(context.Background()).Result()
		if err != nil {
			t.Fatal(err)
		}
		return tm.UnixMilli()
	}
	for _, lim := range []limiter.Limit{
		{Algorithm: limiter.FixedWindow, Limit: 300, Window: time.Hour},
		// 300 tokens a day: one token every 288 s, so none arrive during the test.
		{Algorithm: limiter.TokenBucket, Limit: 300, Window: 24 * time.Hour},
	} {
		t.Run(lim.Name(), func(t *testing.T) {
			s := newStore(t, client, Options{Prefix: freshPrefix("conc-st"), Timeout: testTimeout})
			before := serverMs()
			admitted := takeConcurrently(t, s, "hot", lim, goroutines, each, time.Now)
			after := serverMs()
			if lim.Algorithm == limiter.FixedWindow && before/lim.WindowMs() != after/lim.WindowMs() {
				t.Skipf("the run straddled a window boundary (%d..%d)", before, after)
			}
			checkExactlyCapacity(t, lim, admitted)
		})
	}
}

// TestSkewedClocksShareOneLimit: two clients whose own clocks are 7 s apart share one limit
// exactly with server time; with explicit time, B's clock ahead refills the bucket A emptied and
// lets 7 more through, which is why production uses server time.
func TestSkewedClocksShareOneLimit(t *testing.T) {
	srv := redisserver.StartTest(t)
	const skew = 7 * time.Second
	lim := limiter.Limit{Algorithm: limiter.TokenBucket, Limit: 10, Window: 10 * time.Second}
	run := func(serverTime bool) int {
		prefix := freshPrefix("skew")
		// Separate clients, as two pods would have.
		a := newStore(t, newClient(t, srv.URL()), Options{Prefix: prefix, Timeout: testTimeout, ExplicitTime: !serverTime})
		b := newStore(t, newClient(t, srv.URL()), Options{Prefix: prefix, Timeout: testTimeout, ExplicitTime: !serverTime})
		base := time.Now()
		admitted := 0
		for i := range 40 {
			s, now := a, base
			if i >= 20 { // B's requests come after A's, on a clock 7 s ahead
				s, now = b, base.Add(skew)
			}
			if mustTake(t, s, "shared", lim, 1, now).Allowed {
				admitted++
			}
		}
		return admitted
	}
	// The test takes milliseconds; at 1 token per second at most one more could refill.
	if got := run(true); got < 10 || got > 11 {
		t.Errorf("server time: %d of 40 admitted across skewed clients, want 10 (11 if a token refilled)", got)
	}
	if got := run(false); got != 17 {
		t.Errorf("explicit skewed time: %d admitted; expected 10 + 7 tokens refilled by the skew", got)
	}
}
