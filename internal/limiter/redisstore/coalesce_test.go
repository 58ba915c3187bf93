package redisstore

import (
	"context"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testutil/redisserver"
)

// queued is one call built as Take and TakeRequest build theirs, to hand to a batcher
// directly: a test then chooses exactly which calls one batch carries.
type queued struct {
	c     *call
	takes []limiter.Take
}

// instantOf is the instant of an explicit nowArg (a calendar limit's window depends on it),
// the zero time for server time.
func instantOf(nowArg string) time.Time {
	ms, err := strconv.ParseInt(nowArg, 10, 64)
	if err != nil {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// queueTake is the call Take makes for one take.
func queueTake(ctx context.Context, s *Store, nowArg string, t limiter.Take) queued {
	st := s.alone(t.Key, t.Limit, t.N, instantOf(nowArg), kindEnforce, 0)
	return queued{&call{ctx: ctx, nowArg: nowArg, keys: s.Keys(t.Key, t.Limit), takes: st, done: make(chan struct{}, 1)}, []limiter.Take{t}}
}

// queueRequest is the call TakeRequest makes on a single node.
func queueRequest(ctx context.Context, s *Store, nowArg string, takes []limiter.Take) queued {
	var keys []string
	var st []scriptTake
	for i := range takes {
		rk := s.Keys(takes[i].Key, takes[i].Limit)[0]
		k := slices.Index(keys, rk)
		if k < 0 {
			k = len(keys)
			keys = append(keys, rk)
		}
		st = append(st, takeOf(k, &takes[i], instantOf(nowArg)))
	}
	st[len(st)-1].flags |= flagEnd
	return queued{&call{ctx: ctx, nowArg: nowArg, keys: keys, takes: st, done: make(chan struct{}, 1)}, takes}
}

// TestCoalescedBatchesEqualMemoryStore sends batches of 1 to 64 calls (Takes on one hot key and
// a few others, costs up to and beyond capacity, and two-rule requests; every algorithm and a
// calendar day) to the batcher as one
// batch: each batch must become one script call, and every decision must equal what
// limiter.MemoryStore decides for the same sequence at the same instant.
func TestCoalescedBatchesEqualMemoryStore(t *testing.T) {
	srv := redisserver.StartTest(t)
	client := newClient(t, srv.URL())
	variants := append(limiter.Variants(10, time.Second, 15, 500*time.Millisecond), calendarLimit(t, limiter.Day, "Europe/Berlin", 10))
	for vi, base := range variants {
		t.Run(base.Name(), func(t *testing.T) {
			s := newStore(t, client, explicitTime("coalesce"))
			checkCoalescedBatches(t, batchTarget{
				store: s, batcher: func(string) *batcher { return s.batch },
				key: func(name string, _ limiter.Limit) string { return name }, requests: true,
				scriptCalls: func() int64 { return scriptCalls(t, srv) },
			}, base, uint64(vi))
		})
	}
}

// batchTarget is where checkCoalescedBatches sends its batches.
type batchTarget struct {
	store *Store
	// batcher is the batcher of a Redis key (all of one batch share one).
	batcher func(rk string) *batcher
	// key maps a test key name to the key to use under a Limit (on a cluster, one served by
	// the batch's master).
	key func(name string, lim limiter.Limit) string
	// requests adds two-rule requests (one script group over two keys) to the batches.
	requests bool
	// scriptCalls is the script calls the batch's server has run (INFO commandstats).
	scriptCalls func() int64
}

// checkCoalescedBatches sends batches of 1 to 64 calls like base (see
// TestCoalescedBatchesEqualMemoryStore) to tgt, each as one batch, and checks that each is one
// script call, counted by the server, and decides what limiter.MemoryStore decides.
func checkCoalescedBatches(t *testing.T, tgt batchTarget, base limiter.Limit, seed uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rng := rand.New(rand.NewPCG(seed, 13))
	s := tgt.store
	ms := limiter.NewMemoryStore(limiter.MemoryStoreOptions{})
	other := randomLimit(rng, limiter.Variants(1, time.Second, 0, 0)[rng.IntN(6)])
	b := tgt.batcher(s.Keys(tgt.key("hot", base), base)[0])
	b.loadScripts() // now, not in the background: a NOSCRIPT would count a script call more
	now := int64(0)
	for size := 1; size <= 64; size++ {
		lim := base
		now += randomGap(rng, lim)
		now = max(now, -t0)
		nowArg := strconv.FormatInt(t0+now, 10)
		batch := make([]queued, size)
		// Every other batch is mostly one Take repeated, the hot key's usual batch: runs the
		// script decides together (see lua/request.lua) that cross the limit, or start denied.
		run, runCost, others := size%2 == 0, randomCost(rng, lim.Capacity()), 4
		if run {
			others = 16
		}
		for i := range batch {
			key := "hot"
			if rng.IntN(others) == 0 {
				key = "k" + strconv.Itoa(rng.IntN(3))
			}
			cost := randomCost(rng, lim.Capacity())
			if run && key == "hot" {
				cost = runCost
			}
			take := limiter.Take{Key: tgt.key(key, lim), Limit: lim, N: cost}
			if tgt.requests && rng.IntN(5*others/4) == 0 {
				batch[i] = queueRequest(ctx, s, nowArg, []limiter.Take{take, {Key: tgt.key("o", other), Limit: other, N: randomCost(rng, other.Capacity()), Shadow: rng.IntN(2) == 0}})
			} else {
				batch[i] = queueTake(ctx, s, nowArg, take)
			}
		}
		calls := make([]*call, size)
		for i := range batch {
			calls[i] = batch[i].c
		}
		scripts, counted := b.scripts.Load(), tgt.scriptCalls()
		b.send(calls)
		if got := b.scripts.Load() - scripts; got != 1 {
			t.Fatalf("batch of %d: %d script calls, want 1", size, got)
		}
		if got := tgt.scriptCalls() - counted; got != 1 {
			t.Fatalf("batch of %d: the server counted %d script calls, want 1", size, got)
		}
		for i, q := range batch {
			<-q.c.done
			if q.c.err != nil {
				t.Fatalf("batch of %d, call %d: %v", size, i, q.c.err)
			}
			got := make([]limiter.Result, len(q.takes))
			for j := range q.takes {
				got[j] = resultFrom(q.c.vals[requestFields*j:], q.takes[j].Limit.Capacity())
			}
			want := make([]limiter.Result, len(q.takes))
			if q.c.takes[0].flags&flagAlone != 0 {
				r, err := ms.Take(ctx, q.takes[0].Key, q.takes[0].Limit, q.takes[0].N, at(now))
				if err != nil {
					t.Fatal(err)
				}
				want[0] = r
			} else if _, err := ms.TakeRequest(ctx, q.takes, at(now), want); err != nil {
				t.Fatal(err)
			}
			for j := range want {
				if got[j] != want[j] {
					t.Fatalf("batch of %d at %d, call %d take %d (%+v): redis %+v, memory %+v", size, now, i, j, q.takes[j], got[j], want[j])
				}
			}
		}
	}
}

// scriptCalls is the script calls (EVALSHA and EVAL) srv has run, from INFO commandstats.
func scriptCalls(t testing.TB, srv *redisserver.TestServer) int64 {
	t.Helper()
	info, err := srv.Do("INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, line := range strings.Fields(info) {
		name, stats, _ := strings.Cut(line, ":")
		if name != "cmdstat_evalsha" && name != "cmdstat_eval" {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(stats, "calls="), ",")
		c, err := strconv.ParseInt(calls, 10, 64)
		if err != nil {
			t.Fatalf("INFO commandstats: %q: %v", line, err)
		}
		n += c
	}
	return n
}

// TestTwoStoresShareOneLimit: two Stores on one Redis (two sidecars), 150 concurrent Takes
// each on one key, admit exactly 100 of the 300 under a limit of 100, and coalesce.
func TestTwoStoresShareOneLimit(t *testing.T) {
	srv := redisserver.StartTest(t)
	for _, tc := range []struct {
		lim  limiter.Limit
		opts Options
	}{
		{limiter.Limit{Algorithm: limiter.FixedWindow, Limit: 100, Window: time.Minute}, Options{Timeout: testTimeout, ExplicitTime: true}},
		// Server time: a day's window refills one token per 864 s, none within the test.
		{limiter.Limit{Algorithm: limiter.TokenBucket, Limit: 100, Window: limiter.MaxWindow}, Options{Timeout: testTimeout}},
	} {
		t.Run(tc.lim.Name(), func(t *testing.T) {
			tc.opts.Prefix = freshPrefix("two")
			stores := []*Store{newStore(t, newClient(t, srv.URL()), tc.opts), newStore(t, newClient(t, srv.URL()), tc.opts)}
			var admitted atomic.Int64
			var wg sync.WaitGroup
			start := make(chan struct{})
			for _, s := range stores {
				for range 150 {
					wg.Go(func() {
						<-start
						r, err := s.Take(context.Background(), "hot", tc.lim, 1, at(0))
						if err != nil {
							t.Error(err)
						} else if r.Allowed {
							admitted.Add(1)
						}
					})
				}
			}
			close(start)
			wg.Wait()
			if got := admitted.Load(); got != 100 {
				t.Fatalf("%d of 300 admitted, want exactly 100", got)
			}
			for i, s := range stores {
				t.Logf("store %d: %d pipelines, %d script calls, at most %d groups in one", i, s.batch.batches.Load(), s.batch.scripts.Load(), s.batch.coalesced.Load())
			}
		})
	}
}
