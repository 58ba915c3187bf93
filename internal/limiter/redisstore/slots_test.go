package redisstore

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testutil/proc"
	"github.com/sluice-dev/sluice/internal/testutil/redisserver"
)

// slotReq is a request of one Concurrency take of holding h on key, with an optional rate take.
func slotReq(key string, lim limiter.Limit, h int64, rate *limiter.Take) []limiter.Take {
	takes := []limiter.Take{{Key: key, Limit: lim, N: 1, Holder: h}}
	if rate != nil {
		takes = append(takes, *rate)
	}
	return takes
}

// TestConcurrencySlots decides Concurrency takes in Redis and in memory side by side: limit
// slots admitted, the next denied with ConcurrencyRetryAfter, a release (even repeated) frees
// exactly one (repeated, in Redis, still one), and a request a rate rule denies takes no slot, nor does a slot's denial charge
// the rate rule.
func TestConcurrencySlots(t *testing.T) {
	for _, tp := range topologies {
		t.Run(tp.name, func(t *testing.T) {
			ctx := context.Background()
			s := newStore(t, tp.client(t), explicitTime("slots"))
			mem := limiter.NewMemoryStore(limiter.MemoryStoreOptions{})
			lim := limiter.Limit{Algorithm: limiter.Concurrency, Limit: 3, Window: 30 * time.Second}
			rate := limiter.Limit{Algorithm: limiter.FixedWindow, Limit: 5, Window: time.Hour}
			stores := map[string]interface {
				limiter.RequestStore
				limiter.SlotStore
			}{"redis": s, "memory": mem}
			for name, st := range stores {
				decide := func(h int64, withRate bool) (bool, []limiter.Result) {
					t.Helper()
					var rt *limiter.Take
					if withRate {
						rt = &limiter.Take{Key: "r", Limit: rate, N: 1}
					}
					takes := slotReq("k", lim, h, rt)
					res := make([]limiter.Result, len(takes))
					ok, err := st.TakeRequest(ctx, takes, at(0), res)
					if err != nil {
						t.Fatalf("%s: TakeRequest: %v", name, err)
					}
					return ok, res
				}
				for h := int64(1); h <= 3; h++ {
					if ok, res := decide(h, true); !ok || res[0].Remaining != 3-h {
						t.Fatalf("%s: holding %d: admitted %v, %+v", name, h, ok, res[0])
					}
				}
				ok, res := decide(4, true)
				if ok || res[0].Allowed || res[0].RetryAfter != limiter.ConcurrencyRetryAfter || res[0].Reason != limiter.ReasonLimited {
					t.Fatalf("%s: a 4th holding: admitted %v, %+v", name, ok, res[0])
				}
				if !res[1].Allowed || res[1].Remaining != 1 {
					t.Fatalf("%s: the rate rule of the denied request: %+v, want allowed with 1 left (uncharged)", name, res[1])
				}
				// Release holding 2 (in Redis twice): one slot frees, not two.
				for range map[string]int{"redis": 2, "memory": 1}[name] {
					if err := st.Release(ctx, "k", lim, 2); err != nil {
						t.Fatalf("%s: Release: %v", name, err)
					}
				}
				if ok, _ := decide(5, false); !ok {
					t.Fatalf("%s: denied after a release", name)
				}
				if ok, _ := decide(6, false); ok {
					t.Fatalf("%s: a repeated release freed a second slot", name)
				}
				// Two more rate charges use up the rate rule (3 charged, 2 left): a request the
				// rate rule denies takes no slot.
				_ = st.Release(ctx, "k", lim, 1)
				_ = st.Release(ctx, "k", lim, 3)
				for h := int64(7); h <= 8; h++ {
					if ok, _ := decide(h, true); !ok {
						t.Fatalf("%s: holding %d denied", name, h)
					}
				}
				_ = st.Release(ctx, "k", lim, 7)
				ok, res = decide(9, true)
				if ok || !res[0].Allowed || res[1].Allowed {
					t.Fatalf("%s: over the rate: admitted %v, %+v", name, ok, res)
				}
				if ok, _ := decide(10, false); !ok {
					t.Fatalf("%s: the rate-denied request took the slot", name)
				}
			}
		})
	}
}

// TestConcurrencyExpiry: a holding expires Window after it was taken or last renewed, on the
// decisions' clock; a renewal pushes it back, and holds again a holding that expired while its
// request ran.
func TestConcurrencyExpiry(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, newClient(t, redisserver.StartTest(t).URL()), explicitTime("expiry"))
	lim := limiter.Limit{Algorithm: limiter.Concurrency, Limit: 2, Window: 10 * time.Second}
	take := func(h int64, ms int64) bool {
		t.Helper()
		takes := slotReq("k", lim, h, nil)
		res := make([]limiter.Result, 1)
		ok, err := s.TakeRequest(ctx, takes, at(ms), res)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if !take(1, 0) || !take(2, 5_000) || take(3, 9_999) {
		t.Fatal("the first two holdings, then a denial")
	}
	hs, err := s.Holdings(ctx, "k", lim)
	if err != nil || len(hs) != 2 || hs[0].Expires.UnixMilli() != t0+10_000 || hs[1].Expires.UnixMilli() != t0+15_000 || hs[0].Holder != s.HolderID() {
		t.Fatalf("holdings %+v, %v: want expiries t0+10s and t0+15s", hs, err)
	}
	if n, err := s.Renew(ctx, "k", lim, []int64{2}, at(9_000)); err != nil || n != 0 {
		t.Fatalf("Renew of a holding Redis holds: %d (want 0 added), %v", n, err)
	}
	if !take(3, 10_000) { // holding 1 expired at 10 s exactly
		t.Fatal("holding 1 did not expire after Window")
	}
	// Holding 1's request still runs (its holder was cut off): its renewal holds it again,
	// beyond the limit, so that Redis counts every request in flight.
	if n, err := s.Renew(ctx, "k", lim, []int64{1}, at(11_000)); err != nil || n != 1 {
		t.Fatalf("Renew of an expired holding: %d (want 1 added), %v", n, err)
	}
	if take(4, 18_999) {
		t.Fatal("holding 2, renewed at 9 s, expired before 19 s")
	}
	if take(4, 19_000) {
		t.Fatal("admitted beside holdings 1 (held again) and 3")
	}
	if err := s.Release(ctx, "k", lim, 1); err != nil {
		t.Fatal(err)
	}
	if !take(4, 19_000) {
		t.Fatal("denied once holding 2 expired and holding 1 was released")
	}
}

// takeSlots takes holdings 1 to n of key under lim, failing t unless each is admitted.
func takeSlots(t *testing.T, s *Store, key string, lim limiter.Limit, n int64) {
	t.Helper()
	for h := int64(1); h <= n; h++ {
		res := make([]limiter.Result, 1)
		if ok, err := s.TakeRequest(context.Background(), slotReq(key, lim, h, nil), at(0), res); err != nil || !ok {
			t.Fatalf("%s holding %d: %v %+v", key, h, err, res[0])
		}
	}
}

// TestConcurrencyReleasesCoalesced: many releases at once (sharing pipelines) each remove their
// own holding and no other; with Redis gone they fail, and the holdings stay until they expire.
func TestConcurrencyReleasesCoalesced(t *testing.T) {
	ctx := context.Background()
	srv := redisserver.StartTest(t)
	s := newStore(t, newClient(t, srv.URL()), explicitTime("releases"))
	lim := limiter.Limit{Algorithm: limiter.Concurrency, Limit: 100, Window: 30 * time.Second}
	takeSlots(t, s, "k", lim, 60)
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for h := int64(1); h <= 50; h++ {
		wg.Go(func() { errs <- s.Release(ctx, "k", lim, h) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	hs, err := s.Holdings(ctx, "k", lim)
	if err != nil || len(hs) != 10 {
		t.Fatalf("holdings after 50 releases of 60: %d, %v", len(hs), err)
	}
	for _, h := range hs {
		if h.Number <= 50 {
			t.Fatalf("holding %d still held", h.Number)
		}
	}
	srv.Kill()
	if err := s.Release(ctx, "k", lim, 51); err == nil {
		t.Fatal("a release with Redis gone succeeded")
	}
}

// zremCalls is how many ZREM commands the server has run.
func zremCalls(t *testing.T, c redis.UniversalClient) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\r\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_zrem:calls="); ok {
			n, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
			return n
		}
	}
	return 0
}

// TestConcurrencyReleasesRideTheBatch: the releases queued when the batcher sends a pipeline
// go in it, one ZREM per key before the script calls, and each learns its outcome.
func TestConcurrencyReleasesRideTheBatch(t *testing.T) {
	ctx := context.Background()
	srv := redisserver.StartTest(t)
	c := newClient(t, srv.URL())
	s := newStore(t, c, explicitTime("ride"))
	lim := limiter.Limit{Algorithm: limiter.Concurrency, Limit: 100, Window: 30 * time.Second}
	takeSlots(t, s, "a", lim, 4)
	takeSlots(t, s, "b", lim, 4)
	before := zremCalls(t, c)
	// Queued without waking the sender, so that the pipeline below carries them.
	var ps []*pendingRelease
	for _, r := range []struct {
		key string
		h   int64
	}{{"a", 1}, {"b", 1}, {"a", 2}, {"a", 3}, {"b", 2}, {"a", 9}} {
		p := &pendingRelease{key: s.Keys(r.key, lim)[0], member: s.member(r.h), done: make(chan error, 1)}
		s.batch.rel.add(p)
		ps = append(ps, p)
	}
	_ = s.batch.exec(ctx, nil, false)
	for i, p := range ps {
		select {
		case err := <-p.done:
			if err != nil {
				t.Fatalf("release %d: %v", i, err)
			}
		case <-time.After(proc.Patience):
			t.Fatalf("release %d was not sent with the pipeline", i)
		}
	}
	if n := zremCalls(t, c) - before; n != 2 {
		t.Errorf("%d ZREMs for the releases of two keys, want 2", n)
	}
	for k, want := range map[string]int{"a": 1, "b": 2} {
		if hs, err := s.Holdings(ctx, k, lim); err != nil || len(hs) != want {
			t.Errorf("key %s: %d holdings (%v), want %d", k, len(hs), err, want)
		}
	}
}

// TestConcurrencyReleaseAsync: a release not waited for reaches Redis, and one that cannot
// reach it reports its error.
func TestConcurrencyReleaseAsync(t *testing.T) {
	ctx := context.Background()
	srv := redisserver.StartTest(t)
	s := newStore(t, newClient(t, srv.URL()), explicitTime("async"))
	lim := limiter.Limit{Algorithm: limiter.Concurrency, Limit: 100, Window: 30 * time.Second}
	takeSlots(t, s, "k", lim, 20)
	for h := int64(1); h <= 20; h++ {
		s.ReleaseAsync("k", lim, h, func(err error) { t.Errorf("release %d: %v", h, err) })
	}
	deadline := time.Now().Add(proc.Patience)
	for {
		hs, err := s.Holdings(ctx, "k", lim)
		if err == nil && len(hs) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d holdings left after 20 releases of 20 (%v)", len(hs), err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	srv.Kill()
	failed := make(chan error, 1)
	s.ReleaseAsync("k", lim, 1, func(err error) { failed <- err })
	select {
	case err := <-failed:
		if err == nil {
			t.Fatal("a release with Redis gone reported a nil error")
		}
	case <-time.After(proc.Patience):
		t.Fatal("a release with Redis gone never reported its failure")
	}
}
