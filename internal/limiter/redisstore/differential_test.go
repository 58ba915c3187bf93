package redisstore

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testutil/redisserver"
)

// pick returns one of vs at random.
func pick[T any](rng *rand.Rand, vs ...T) T { return vs[rng.IntN(len(vs))] }

// randomLimit returns a valid Limit like base (algorithm, mode) with parameters from the
// small, the typical and the extreme ends of the bounds.
func randomLimit(rng *rand.Rand, base limiter.Limit) limiter.Limit {
	lim := base
	maxL := limiter.MaxLimit
	if lim.Algorithm == limiter.SlidingWindowLog {
		maxL = limiter.MaxLogLimit
	}
	lim.Limit = pick(rng, 1, 2, 3, 5, 10, 100, 1+rng.Int64N(1000), 1+rng.Int64N(maxL), maxL)
	lim.Window = time.Duration(pick(rng, int64(1), 2, 3, 7, 10, 100, 1000, 60_000,
		1+rng.Int64N(100_000), limiter.MaxWindow.Milliseconds())) * time.Millisecond
	if lim.Algorithm == limiter.TokenBucket || lim.Algorithm == limiter.LeakyBucket {
		lim.Burst = pick(rng, int64(0), 0, 1, 1+rng.Int64N(3*lim.Limit), 1+rng.Int64N(limiter.MaxLimit), limiter.MaxLimit)
		lim.Burst = min(lim.Burst, limiter.MaxLimit)
	}
	if lim.Mode == limiter.Queue {
		w := lim.Window.Milliseconds()
		lim.MaxDelay = time.Duration(min(pick(rng, int64(0), 1, rng.Int64N(w+1), rng.Int64N(3*w+1),
			limiter.MaxWindow.Milliseconds()), limiter.MaxWindow.Milliseconds())) * time.Millisecond
	}
	if err := lim.Validate(); err != nil {
		panic(err)
	}
	return lim
}

// randomGap is the step from one request to the next: mostly forward by a fraction of the
// window or the refill interval, sometimes the same instant, sometimes far ahead, sometimes
// backwards (a clock that went back).
func randomGap(rng *rand.Rand, lim limiter.Limit) int64 {
	w := lim.WindowMs()
	per := max(1, w/lim.Limit) // ms per unit at the limit's rate
	switch rng.IntN(20) {
	case 0, 1, 2:
		return 0
	case 3, 4, 5:
		return 1 + rng.Int64N(3)
	case 6, 7, 8, 9, 10:
		return rng.Int64N(2*per + 1)
	case 11, 12, 13:
		return rng.Int64N(w + 1)
	case 14, 15:
		return rng.Int64N(3*w + 1)
	case 16:
		return rng.Int64N(20*w + 1)
	case 17:
		return w - 1 // the last tick of a window
	default:
		return -rng.Int64N(w + 1)
	}
}

func randomCost(rng *rand.Rand, capacity int64) int64 {
	switch rng.IntN(10) {
	case 0:
		return 1 + rng.Int64N(capacity)
	case 1:
		return capacity
	case 2:
		if rng.IntN(4) == 0 {
			return math.MaxInt64 - rng.Int64N(3) // far beyond what the script's doubles hold
		}
		return capacity + 1 + rng.Int64N(3) // can never pass
	case 3:
		return 1 + rng.Int64N(min(capacity, 5))
	default:
		return 1
	}
}

// TestDifferentialAgainstMemoryStore replays seeded random traces, with several keys, costs up
// to and beyond capacity, and instants that go backwards, through the Redis store (explicit
// time) and limiter.MemoryStore; every Result must be identical, field by field.
func TestDifferentialAgainstMemoryStore(t *testing.T) {
	const sets, steps = 40, 200
	srv := redisserver.StartTest(t)
	client := newClient(t, srv.URL())
	for i, base := range limiter.Variants(1, time.Second, 0, 0) {
		t.Run(base.Name(), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(20260205, uint64(i)))
			for set := range sets {
				lim := randomLimit(rng, base)
				rs := newStore(t, client, Options{Prefix: freshPrefix("diff"), Timeout: testTimeout, ExplicitTime: true})
				ms := limiter.NewMemoryStore(limiter.MemoryStoreOptions{})
				keys := []string{"a", "b", "c"}[:1+rng.IntN(3)]
				now := t0 + rng.Int64N(lim.WindowMs())
				if set%8 == 7 { // near the largest instant a store accepts
					now = limiter.MaxNowMs - int64(steps)*30*lim.WindowMs() - rng.Int64N(lim.WindowMs())
				}
				var trace []string
				for step := range steps {
					now = min(max(0, now+randomGap(rng, lim)), limiter.MaxNowMs)
					key := pick(rng, keys...)
					c := randomCost(rng, lim.Capacity())
					want, werr := ms.Take(context.Background(), key, lim, c, time.UnixMilli(now))
					got, gerr := rs.Take(context.Background(), key, lim, c, time.UnixMilli(now))
					trace = append(trace, fmt.Sprintf("  %3d key=%s now=%d c=%d -> %+v", step, key, now, c, want))
					if werr != nil || gerr != nil {
						t.Fatalf("set %d step %d: memory error %v, redis error %v", set, step, werr, gerr)
					}
					if got != want {
						t.Fatalf("set %d %+v, step %d (key %s, now %d, cost %d):\nredis  %+v\nmemory %+v\ntrace (last 20):\n%s",
							set, lim, step, key, now, c, got, want, strings.Join(trace[max(0, len(trace)-20):], "\n"))
					}
				}
			}
		})
	}
}

// TestDifferentialLongLog drives a SlidingWindowLog with hundreds of entries, so the script
// drops expired entries and walks the log for RetryAfter over several LRANGE chunks.
func TestDifferentialLongLog(t *testing.T) {
	srv := redisserver.StartTest(t)
	rs := newStore(t, newClient(t, srv.URL()), Options{Prefix: freshPrefix("longlog"), Timeout: testTimeout, ExplicitTime: true})
	ms := limiter.NewMemoryStore(limiter.MemoryStoreOptions{})
	lim := limiter.Limit{Algorithm: limiter.SlidingWindowLog, Limit: limiter.MaxLogLimit, Window: 10 * time.Second}
	rng := rand.New(rand.NewPCG(1, 2))
	now := t0
	for step := range 3000 {
		// ~1 entry per 3 ms: about 3300 live entries, so large costs are denied and their
		// RetryAfter walks far into the log; now and then a jump expires hundreds at once.
		now += rng.Int64N(6)
		if step%500 == 499 {
			now += 2000
		}
		c := int64(1)
		if rng.IntN(4) == 0 {
			c = 1 + rng.Int64N(lim.Limit)
		}
		want := mustTake(t, ms, "k", lim, c, time.UnixMilli(now))
		got := mustTake(t, rs, "k", lim, c, time.UnixMilli(now))
		if got != want {
			t.Fatalf("step %d (now %d, cost %d): redis %+v, memory %+v", step, now, c, got, want)
		}
	}
}

// TestDifferentialLimitChanges replays seeded random traces in which each key's limit changes
// now and then (a tenant's entry edited, an Envoy override: the same algorithm, window and
// mode, another limit, burst or maxDelay), through the Redis store and limiter.MemoryStore:
// every Result must be identical, so the arithmetic of a limit changed mid-window is the same
// in both. A key whose state expired under its old limit (its TTL with Redis's clock, the
// ResetAfter of its last decision, counted from the latest instant it was decided at when the
// trace's clock goes back) starts fresh in both: with explicit time Redis keeps every key, so
// the trace deletes the key where Redis's clock would have expired it.
func TestDifferentialLimitChanges(t *testing.T) {
	const sets, steps = 30, 300
	srv := redisserver.StartTest(t)
	client := newClient(t, srv.URL())
	for i, base := range limiter.Variants(1, time.Second, 0, 0) {
		t.Run(base.Name(), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(20261207, uint64(i)))
			for set := range sets {
				// A few limits of one algorithm, window and mode, as a tenant table holds.
				first := randomLimit(rng, base)
				lims := []limiter.Limit{first}
				for range 2 {
					l := randomLimit(rng, base)
					l.Window = first.Window
					if err := l.Validate(); err != nil {
						t.Fatal(err)
					}
					lims = append(lims, l)
				}
				rs := newStore(t, client, Options{Prefix: freshPrefix("change"), Timeout: testTimeout, ExplicitTime: true})
				ms := limiter.NewMemoryStore(limiter.MemoryStoreOptions{})
				keys := []string{"a", "b", "c"}[:1+rng.IntN(3)]
				type seen struct {
					lim             limiter.Limit
					expires, latest int64
				}
				last := map[string]seen{}
				now := t0 + rng.Int64N(first.WindowMs())
				var trace []string
				for step := range steps {
					key := pick(rng, keys...)
					lim := last[key].lim
					if _, ok := last[key]; !ok || rng.IntN(8) == 0 {
						lim = pick(rng, lims...)
					}
					now = min(max(0, now+randomGap(rng, lim)), limiter.MaxNowMs)
					latest := now
					if s, ok := last[key]; ok && s.lim != lim && s.expires <= max(now, s.latest) {
						if _, err := rs.Reset(context.Background(), key, lim); err != nil {
							t.Fatal(err)
						}
					} else if ok {
						latest = max(now, s.latest)
					}
					c := randomCost(rng, lim.Capacity())
					want, werr := ms.Take(context.Background(), key, lim, c, time.UnixMilli(now))
					got, gerr := rs.Take(context.Background(), key, lim, c, time.UnixMilli(now))
					trace = append(trace, fmt.Sprintf("  %3d key=%s now=%d lim=%d/%d/%d c=%d -> %+v", step, key, now, lim.Limit, lim.Burst, lim.MaxDelay.Milliseconds(), c, want))
					if werr != nil || gerr != nil {
						t.Fatalf("set %d step %d: memory error %v, redis error %v", set, step, werr, gerr)
					}
					if got != want {
						t.Fatalf("set %d %+v, step %d (key %s, now %d, cost %d):\nredis  %+v\nmemory %+v\ntrace (last 20):\n%s",
							set, lim, step, key, now, c, got, want, strings.Join(trace[max(0, len(trace)-20):], "\n"))
					}
					last[key] = seen{lim, now + want.ResetAfter.Milliseconds(), latest}
				}
			}
		})
	}
}
