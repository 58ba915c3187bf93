package redisstore

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testutil/redisserver"
)

// TestLoneCallerNeverWaits: a single caller's Takes each make one round trip of their own at
// once (one script call each, none through the sender, none lingering), before and after a
// busy spell: once the batcher has sent nothing for its policy's idle time it forgets the load
// it saw. Counts, not times.
func TestLoneCallerNeverWaits(t *testing.T) {
	srv := redisserver.StartTest(t)
	s := newStore(t, newClient(t, srv.URL()), Options{Prefix: freshPrefix("lone"), Timeout: testTimeout})
	b := s.batch
	lim := limiter.Limit{Algorithm: limiter.TokenBucket, Limit: limiter.MaxLimit, Window: time.Second}

	// The connection's dial has the scripts preloaded in the background, holding the wire
	// tokens meanwhile (see preload), so that a call then queues: warm up, and let it finish.
	mustTake(t, s, "warm", lim, 1, time.Time{})
	for b.preloading.Load() {
		runtime.Gosched()
	}

	lone := func(phase string) {
		t.Helper()
		const n = 50
		calls, direct, batches, lingered := scriptCalls(t, srv), b.direct.Load(), b.batches.Load(), b.lingered.Load()
		for i := range n {
			mustTake(t, s, fmt.Sprintf("k%d", i%3), lim, 1, time.Time{})
		}
		if got := scriptCalls(t, srv) - calls; got != n {
			t.Errorf("%s: %d script calls for %d lone Takes, want one each", phase, got, n)
		}
		if got := b.direct.Load() - direct; got != n {
			t.Errorf("%s: %d of %d lone Takes sent on their own, want all", phase, got, n)
		}
		if got := b.batches.Load() - batches; got != 0 {
			t.Errorf("%s: %d pipelines sent for lone Takes, want none", phase, got)
		}
		if got := b.lingered.Load() - lingered; got != 0 {
			t.Errorf("%s: %d batches waited for more calls, want none", phase, got)
		}
	}
	lone("idle store")

	busySpell(t, s, lim)
	// As if the policy's idle time had passed since the last batch.
	b.flow.sent.Add(-int64(b.policy.idle) - 1)
	lone("after a busy spell")
}

// busySpell makes s's batcher busy: bursts of 32 callers at once on one key. A burst's last
// batches may carry only stragglers (under -race on a loaded machine the callers can run
// nearly one after another), so it bursts until the batcher says busy. It returns once the
// sender has given its wire token back: the callers have their replies before the sender
// records that they came (flow.replied), which would undo what a test does to the flow next.
func busySpell(t *testing.T, s *Store, lim limiter.Limit) {
	t.Helper()
	b := s.batch
	for try := 0; !b.flow.busy(b.policy); try++ {
		if try == 20 {
			t.Fatalf("the batcher is not busy after 20 bursts of 32 callers (saw %d, %d in flight lately)", b.flow.peak.Load(), b.flow.recent.Load())
		}
		start := make(chan struct{})
		var wg sync.WaitGroup
		for range 32 {
			wg.Go(func() {
				<-start
				if _, err := s.Take(context.Background(), "hot", lim, 1, time.Time{}); err != nil {
					t.Error(err)
				}
			})
		}
		close(start)
		wg.Wait()
	}
	for b.inFlight.Load() != 0 {
		runtime.Gosched()
	}
}

// TestBusyBatchWaitsAtItsPace: a busy batcher's batch waits for the calls it wants at most its
// policy's pace for each, however long its linger: with a linger of a minute and a pace of
// 1 ms, a lone Take right after a busy spell of 32 callers waits (once) for the calls it wants,
// and gets its decision well within the Store's timeout (testTimeout), where a wait of linger
// would time it out.
func TestBusyBatchWaitsAtItsPace(t *testing.T) {
	srv := redisserver.StartTest(t)
	s := newStore(t, newClient(t, srv.URL()), Options{Prefix: freshPrefix("pace"), Timeout: testTimeout})
	b := s.batch
	b.policy.pace, b.policy.linger, b.policy.idle = time.Millisecond, time.Minute, time.Minute
	lim := limiter.Limit{Algorithm: limiter.TokenBucket, Limit: limiter.MaxLimit, Window: time.Second}
	mustTake(t, s, "warm", lim, 1, time.Time{})
	busySpell(t, s, lim)
	want := b.wants()
	if want < b.policy.busy {
		t.Fatalf("a busy batcher wants %d calls, want at least %d", want, b.policy.busy)
	}
	if got := b.policy.wait(want); got != time.Duration(want)*time.Millisecond {
		t.Errorf("a batch that wants %d calls waits up to %v, want %d ms", want, got, want)
	}
	lingered := b.lingered.Load()
	if _, err := s.Take(t.Context(), "lone", lim, 1, time.Time{}); err != nil {
		t.Fatalf("a lone Take after a busy spell: %v (its batch waited for linger, not %d x pace)", err, want)
	}
	if got := b.lingered.Load() - lingered; got != 1 {
		t.Errorf("%d batches waited for the lone Take, want 1 (the batcher was busy)", got)
	}
}

// TestBusyBatcherFillsBatches: 32 callers in a closed loop, on one hot key or on distinct
// keys, get far more decisions per script call (INFO commandstats) than natural batching gave
// (about 2.5 at 8 callers, 5 through the sidecar at 32 connections), and while the batcher is
// busy no call goes on its own. The batches' waits are long here (a second) so that what the
// test sees is the policy's rule (a busy batch waits for the calls it wants), not how fast a
// loaded machine brings the callers back: a batch sent on a short wait's expiry would carry
// the stragglers of a slow wave.
func TestBusyBatcherFillsBatches(t *testing.T) {
	const callers, each, minPerCall = 32, 40, 12
	srv := redisserver.StartTest(t)
	lim := limiter.Limit{Algorithm: limiter.TokenBucket, Limit: limiter.MaxLimit, Window: time.Second}
	for _, distinct := range []bool{false, true} {
		t.Run(fmt.Sprintf("distinct=%v", distinct), func(t *testing.T) {
			s := newStore(t, newClient(t, srv.URL()), Options{Prefix: freshPrefix("busy"), Timeout: testTimeout})
			b := s.batch
			// A batch waits up to a second here, not 3.2 ms (32 at the policy's pace), and
			// what was in flight is remembered for a minute (so not forgotten while a batch
			// waits). Set before any caller runs.
			b.policy.pace, b.policy.linger, b.policy.idle = 0, time.Second, time.Minute
			calls := scriptCalls(t, srv)
			var wg sync.WaitGroup
			for g := range callers {
				wg.Go(func() {
					for i := range each {
						key := "hot"
						if distinct {
							key = fmt.Sprintf("k%d-%d", g, i)
						}
						if _, err := s.Take(t.Context(), key, lim, 1, time.Time{}); err != nil {
							t.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			scripts := scriptCalls(t, srv) - calls
			per := float64(callers*each) / float64(scripts)
			t.Logf("%d decisions in %d script calls (%.1f each), %d pipelines, %d calls on their own, %d batches waited, largest %d",
				callers*each, scripts, per, b.batches.Load(), b.direct.Load(), b.lingered.Load(), b.largest.Load())
			if per < minPerCall {
				t.Errorf("%.1f decisions per script call with %d callers, want at least %d", per, callers, minPerCall)
			}
			// Before the batcher has seen busy load, the first calls go on their own (at most
			// directMax at once); after that none should. Allow a few waves' worth.
			if got := b.direct.Load(); got > 4*directMax {
				t.Errorf("%d calls sent on their own under %d callers, want at most %d", got, callers, 4*directMax)
			}
			if b.lingered.Load() == 0 {
				t.Error("no batch waited for more calls under load")
			}
		})
	}
}

// TestClusterHotKeyFillsBatches: on a 3-master cluster a master's batch waits for 16 calls
// while the Store has 16 or more in flight, or, when the master carried at least three quarters
// of them (a hot key's), for as many as it carried. (A closed loop of 48 callers on one key
// got 23 decisions per script call without the second rule, 47 with it; too loaded a machine
// blurs that, so the rule is checked as such.)
func TestClusterHotKeyFillsBatches(t *testing.T) {
	c := redisserver.StartCluster(t, 3)
	a := c.Addrs()
	s := newStore(t, newClient(t, "redis+cluster://"+a[0]+"?addr="+a[1]+"&addr="+a[2]), Options{Prefix: freshPrefix("hotc"), Timeout: testTimeout})
	lim := limiter.Limit{Algorithm: limiter.TokenBucket, Limit: limiter.MaxLimit, Window: time.Second}
	mustTake(t, s, "hot", lim, 1, time.Time{}) // makes the master's batcher
	b, err := s.batcherFor(t.Context(), s.Keys("hot", lim)[0])
	if err != nil {
		t.Fatal(err)
	}
	seen := func(f *flow, n int64) {
		f.recent.Store(n)
		f.peak.Store(n)
		f.sent.Store(monoNow())
	}
	for _, c := range []struct {
		store, master, want int64
	}{
		{48, 48, 48}, // a hot key: all of them
		{48, 36, 36}, // three quarters
		{50, 20, 16}, // distinct keys: the Store-wide wait
		{50, 37, 16}, // below three quarters
		{12, 12, 0},  // not busy
		{400, 400, maxBatch},
	} {
		seen(&b.flow, c.store)
		seen(&b.own, c.master)
		if got := b.wants(); got != c.want {
			t.Errorf("%d calls in flight, %d of them on the master: the batch waits for %d, want %d", c.store, c.master, got, c.want)
		}
	}
}
