package redisstore

import (
	"context"
	"math/rand/v2"
	"slices"
	"strconv"
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

// queueTake is the call Take makes for one take.
func queueTake(ctx context.Context, s *Store, nowArg string, t limiter.Take) queued {
	st := s.alone(t.Key, t.Limit, t.N, time.Time{}, kindEnforce, 0) // no calendar limits here
	return queued{&call{ctx: ctx, nowArg: nowArg, keys: s.Keys(t.Key, t.Limit), takes: st, done: make(chan struct{})}, []limiter.Take{t}}
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
		st = append(st, takeOf(k, &takes[i], time.Time{}))
	}
	st[len(st)-1].flags |= flagEnd
	return queued{&call{ctx: ctx, nowArg: nowArg, keys: keys, takes: st, done: make(chan struct{})}, takes}
}

// TestCoalescedBatchesEqualMemoryStore sends batches of 1 to 64 calls (Takes on one hot key and
// a few others, costs up to and beyond capacity, and two-rule requests) to the batcher as one
// batch: each batch must become one script call, and every decision must equal what
// limiter.MemoryStore decides for the same sequence at the same instant.
func TestCoalescedBatchesEqualMemoryStore(t *testing.T) {
	srv := redisserver.StartTest(t)
	client := newClient(t, srv.URL())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for vi, base := range limiter.Variants(10, time.Second, 15, 500*time.Millisecond) {
		t.Run(base.Name(), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(vi), 13))
			s := newStore(t, client, explicitTime("coalesce"))
			ms := limiter.NewMemoryStore(limiter.MemoryStoreOptions{})
			other := randomLimit(rng, limiter.Variants(1, time.Second, 0, 0)[rng.IntN(6)])
			now := int64(0)
			for size := 1; size <= 64; size++ {
				lim := base
				now += randomGap(rng, lim)
				now = max(now, -t0)
				nowArg := strconv.FormatInt(t0+now, 10)
				batch := make([]queued, size)
				for i := range batch {
					key := "hot"
					if rng.IntN(4) == 0 {
						key = "k" + strconv.Itoa(rng.IntN(3))
					}
					take := limiter.Take{Key: key, Limit: lim, N: randomCost(rng, lim.Capacity())}
					if rng.IntN(5) == 0 {
						batch[i] = queueRequest(ctx, s, nowArg, []limiter.Take{take, {Key: "o", Limit: other, N: randomCost(rng, other.Capacity()), Shadow: rng.IntN(2) == 0}})
					} else {
						batch[i] = queueTake(ctx, s, nowArg, take)
					}
				}
				calls := make([]*call, size)
				for i := range batch {
					calls[i] = batch[i].c
				}
				scripts := s.batch.scripts.Load()
				s.batch.send(calls)
				if got := s.batch.scripts.Load() - scripts; got != 1 {
					t.Fatalf("batch of %d: %d script calls, want 1", size, got)
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
		})
	}
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
