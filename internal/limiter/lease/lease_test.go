package lease

import (
	"context"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/limiter"
)

const t0 = int64(1_700_000_000_000)

var leasable = []limiter.Limit{{Algorithm: limiter.FixedWindow}, {Algorithm: limiter.SlidingWindowCounter},
	{Algorithm: limiter.TokenBucket}, {Algorithm: limiter.LeakyBucket, Mode: limiter.Meter}}

// recorder is a Store that remembers the last grant it issued and counts its calls.
type recorder struct {
	*limiter.MemoryStore
	last  limiter.Grant
	calls int
}

func (r *recorder) Issue(ctx context.Context, key string, lim limiter.Limit, k int64, now time.Time) (limiter.Grant, error) {
	r.calls++
	g, err := r.MemoryStore.Issue(ctx, key, lim, k, now)
	r.last = g
	return g, err
}

func (r *recorder) Take(ctx context.Context, key string, lim limiter.Limit, n int64, now time.Time) (limiter.Result, error) {
	r.calls++
	return r.MemoryStore.Take(ctx, key, lim, n, now)
}

func (r *recorder) Return(ctx context.Context, key string, lim limiter.Limit, g limiter.Grant, unused int64) (int64, error) {
	r.calls++
	return r.MemoryStore.Return(ctx, key, lim, g, unused)
}

// TestEngineSpendsOnlyLiveLeases: on random traces, a request the engine admits without a
// store call is spent from a lease issued less than maxAge before, in the same aligned window
// for the window algorithms, and a lease never exceeds maxUnits.
func TestEngineSpendsOnlyLiveLeases(t *testing.T) {
	ctx := context.Background()
	for ai, base := range leasable {
		t.Run(base.Name(), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(7, uint64(ai)))
			spent := 0
			for range 200 {
				lim := base
				lim.Limit = 1 + rng.Int64N(50)
				lim.Window = time.Duration(1+rng.Int64N(300)) * time.Millisecond
				p := Params{MaxAge: time.Duration(1+rng.Int64N(2*lim.WindowMs())) * time.Millisecond}
				if rng.IntN(2) == 0 {
					p.MaxUnits = 1 + rng.Int64N(lim.Capacity())
				}
				st := &recorder{MemoryStore: limiter.NewMemoryStore(limiter.MemoryStoreOptions{})}
				e := New(st, Options{})
				now := t0 + rng.Int64N(lim.WindowMs())
				for range 300 {
					now += rng.Int64N(max(2, lim.WindowMs()/lim.Limit))
					if rng.IntN(10) == 0 {
						now += p.MaxAge.Milliseconds() - 1 + rng.Int64N(3)
					}
					before := st.calls
					r, err := e.Take(ctx, "k", lim, p, 1, time.UnixMilli(now))
					if err != nil {
						t.Fatal(err)
					}
					if st.last.Units > p.MaxUnitsFor(lim) {
						t.Fatalf("%+v %+v: a lease of %d units", lim, p, st.last.Units)
					}
					if st.calls > before || !r.Allowed {
						continue
					}
					spent++
					g := st.last
					if now-g.At >= p.MaxAge.Milliseconds() || now < g.At {
						t.Fatalf("%+v %+v: spent at %d a unit issued at %d", lim, p, now, g.At)
					}
					if g.WindowLeft(lim) <= now-g.At {
						t.Fatalf("%+v: spent at %d a unit issued at %d, in another window", lim, now, g.At)
					}
				}
			}
			if spent == 0 {
				t.Fatal("no request was spent from a lease")
			}
		})
	}
}

// TestWorstIntervalAgainstBruteForce: WorstInterval finds the interval a search of every pair
// finds.
func TestWorstIntervalAgainstBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 500 {
		lim := leasable[rng.IntN(len(leasable))]
		lim.Limit, lim.Window, lim.Burst = 1+rng.Int64N(20), time.Duration(1+rng.Int64N(50))*time.Millisecond, rng.Int64N(30)
		A := 1 + rng.Int64N(100)
		var admits []Admit
		now := t0
		for range rng.IntN(60) {
			now += rng.Int64N(10)
			admits = append(admits, Admit{At: now, Units: 1 + rng.Int64N(3)})
		}
		got := WorstInterval(lim, A, admits)
		W, L := lim.WindowMs(), lim.Limit
		// The least slack over every aligned window (windows) or every pair of admits (buckets).
		best := int64(1 << 62)
		if lim.Algorithm == limiter.FixedWindow || lim.Algorithm == limiter.SlidingWindowCounter {
			per := map[int64]int64{}
			for _, a := range admits {
				per[a.At/W] += a.Units
			}
			for _, n := range per {
				best = min(best, L-n)
			}
		} else {
			for i := range admits {
				for j := i; j < len(admits); j++ {
					var n int64
					for _, a := range admits {
						if a.At >= admits[i].At && a.At <= admits[j].At {
							n += a.Units
						}
					}
					best = min(best, lim.Capacity()*W+L*(admits[j].At-admits[i].At+A)-W*n)
				}
			}
		}
		if len(admits) == 0 {
			continue
		}
		var gotSlack int64
		if lim.Algorithm == limiter.FixedWindow || lim.Algorithm == limiter.SlidingWindowCounter {
			gotSlack = got.Bound - got.Admitted
		} else {
			gotSlack = lim.Capacity()*W + L*(got.To-got.From+A) - W*got.Admitted
		}
		if gotSlack != best {
			t.Fatalf("%+v A=%d %v: WorstInterval %+v has slack %d, brute force %d", lim, A, admits, got, gotSlack, best)
		}
	}
}

// hotLease returns an engine whose key "k" holds a live lease of at least want units
// (at most 10000: the requests come one per ms, and a lease is what the pod spends in maxAge).
func hotLease(t testing.TB, want int64) (*Engine, limiter.Limit, Params) {
	lim := limiter.Limit{Algorithm: limiter.TokenBucket, Limit: limiter.MaxLimit, Window: time.Second}
	p := Params{MaxAge: limiter.MaxLeaseAge}
	e := New(limiter.NewMemoryStore(limiter.MemoryStoreOptions{}), Options{})
	for i := int64(0); e.Held() < want; i++ {
		if i > 100_000 {
			t.Fatalf("no lease of %d units after %d requests", want, i)
		}
		if _, err := e.Take(context.Background(), "k", lim, p, 1, time.UnixMilli(t0+i)); err != nil {
			t.Fatal(err)
		}
	}
	return e, lim, p
}

// TestLiveLeaseDoesNotAllocate: deciding from a live lease, with Take or Spend, allocates
// nothing and calls no store.
func TestLiveLeaseDoesNotAllocate(t *testing.T) {
	e, lim, p := hotLease(t, 1000)
	calls := e.Stats().StoreCalls
	now := time.UnixMilli(t0 + 1000)
	ctx := context.Background()
	if a := testing.AllocsPerRun(200, func() {
		if r, err := e.Take(ctx, "k", lim, p, 1, now); err != nil || !r.Allowed {
			t.Fatal(r, err)
		}
		if _, ok := e.Spend("k", lim, p, 1, now); !ok {
			t.Fatal("no live lease")
		}
	}); a != 0 {
		t.Errorf("%v allocations per decision from a live lease", a)
	}
	if c := e.Stats().StoreCalls; c != calls {
		t.Errorf("%d store calls deciding from a live lease", c-calls)
	}
}

// BenchmarkEngineLiveLease is a decision spent from a live lease, the leased rule's hot path.
func BenchmarkEngineLiveLease(b *testing.B) {
	e, lim, p := hotLease(b, 5000)
	ctx, now := context.Background(), time.UnixMilli(t0+1000)
	b.ReportAllocs()
	for b.Loop() {
		r, err := e.Take(ctx, "k", lim, p, 1, now)
		if err != nil || !r.Allowed {
			b.Fatal(r, err)
		}
	}
}

// TestReturnAllGivesBackEveryUnit: on shutdown every unused unit goes back to the shared
// limit: a FixedWindow with all its units leased out admits its whole limit again after.
func TestReturnAllGivesBackEveryUnit(t *testing.T) {
	ctx := context.Background()
	lim := limiter.Limit{Algorithm: limiter.FixedWindow, Limit: 100, Window: time.Hour}
	p := Params{MaxAge: limiter.MaxLeaseAge, MaxUnits: 40}
	store := limiter.NewMemoryStore(limiter.MemoryStoreOptions{})
	e := New(store, Options{})
	now := time.UnixMilli(t0 - t0%lim.WindowMs())
	for range 20 {
		if r, err := e.Take(ctx, "k", lim, p, 1, now); err != nil || !r.Allowed {
			t.Fatal(r, err)
		}
	}
	held := e.Held()
	if held == 0 {
		t.Fatal("no units held")
	}
	e.ReturnAll(ctx)
	if e.Held() != 0 || e.Stats().UnitsReturned != held {
		t.Fatalf("held %d after ReturnAll, returned %d of %d", e.Held(), e.Stats().UnitsReturned, held)
	}
	if r, _ := store.Take(ctx, "k", lim, 80, now); !r.Allowed || r.Remaining != 0 {
		t.Fatalf("the shared limit after the return: %+v, want 80 of 100 left", r)
	}
}

// TestReserveDoesNotAllocate: reserving from a live lease, then committing or cancelling,
// allocates nothing and calls no store; a cancelled reservation's units are spendable again.
func TestReserveDoesNotAllocate(t *testing.T) {
	e, lim, p := hotLease(t, 1000)
	calls := e.Stats().StoreCalls
	now := time.UnixMilli(t0 + 1000)
	ctx := context.Background()
	held := e.Held()
	if a := testing.AllocsPerRun(200, func() {
		r, v, ok, err := e.Reserve(ctx, "k", lim, p, 2, now)
		if err != nil || !ok || !r.Allowed {
			t.Fatal(r, ok, err)
		}
		e.Cancel(v)
		_, v, _, _ = e.Reserve(ctx, "k", lim, p, 1, now)
		e.Commit(v)
	}); a != 0 {
		t.Errorf("%v allocations per reservation from a live lease", a)
	}
	if c := e.Stats().StoreCalls; c != calls {
		t.Errorf("%d store calls reserving from a live lease", c-calls)
	}
	if got := e.Held(); got != held-201 { // AllocsPerRun runs the function once more
		t.Errorf("held %d after 201 commits of one unit and as many cancels, want %d", got, held-201)
	}
	_, v, ok, _ := e.Reserve(ctx, "k", lim, p, 1, now)
	if !ok || v.Issued() {
		t.Errorf("a reservation from the live lease: ok %v, issued %v", ok, v.Issued())
	}
	e.Commit(v)
	// Past the lease's age the next reservation issues a lease: a store call.
	later := now.Add(2 * p.MaxAge)
	if _, v, ok, err := e.Reserve(ctx, "k", lim, p, 1, later); err != nil || !ok || !v.Issued() {
		t.Errorf("a reservation past maxAge: ok %v, issued %v, %v", ok, v.Issued(), err)
	} else {
		e.Commit(v)
	}
}

// TestReservationsAccountForEveryUnit: goroutines reserve (then commit or cancel), take and
// sweep concurrently on one key; once every lease is returned the shared limit has given out
// exactly the units committed and taken, whatever the interleaving. The bucket decides at one
// instant (a refill would blur the count); the fixed window's time runs on within one window,
// past many leases' maxAge, so leases expire and are swept while reservations hold them.
func TestReservationsAccountForEveryUnit(t *testing.T) {
	ctx := context.Background()
	for ai, tc := range []struct {
		lim     limiter.Limit
		maxAge  time.Duration
		advance bool
	}{
		{limiter.Limit{Algorithm: limiter.TokenBucket, Limit: 100_000, Window: time.Hour}, limiter.MaxLeaseAge, false},
		{limiter.Limit{Algorithm: limiter.FixedWindow, Limit: 100_000, Window: time.Hour}, 3 * time.Millisecond, true},
	} {
		lim := tc.lim
		t.Run(lim.Name(), func(t *testing.T) {
			store := limiter.NewMemoryStore(limiter.MemoryStoreOptions{})
			e := New(store, Options{})
			p := Params{MaxAge: tc.maxAge, MaxUnits: 50}
			start := t0 - t0%lim.WindowMs()
			var ops atomic.Int64
			var spent [8]int64
			done := make(chan struct{})
			for g := range spent {
				go func() {
					defer func() { done <- struct{}{} }()
					rng := rand.New(rand.NewPCG(uint64(ai), uint64(g)))
					for range 2000 {
						now := time.UnixMilli(start)
						if tc.advance {
							now = time.UnixMilli(start + ops.Add(1)/20) // 800 ms in all
						}
						n := 1 + rng.Int64N(3)
						switch rng.IntN(8) {
						case 0:
							if r, err := e.Take(ctx, "k", lim, p, n, now); err != nil {
								t.Error(err)
							} else if r.Allowed {
								spent[g] += n
							}
						case 1:
							e.Sweep(ctx, now)
						default:
							_, v, ok, err := e.Reserve(ctx, "k", lim, p, n, now)
							if err != nil {
								t.Error(err)
							}
							if !ok {
								// Decided exactly with the request's other rules.
								if r, err := store.Take(ctx, "k", lim, n, now); err == nil && r.Allowed {
									spent[g] += n
								}
								continue
							}
							if rng.IntN(2) == 0 {
								e.Commit(v)
								spent[g] += n
							} else {
								e.Cancel(v)
							}
						}
					}
				}()
			}
			for range spent {
				<-done
			}
			now := time.UnixMilli(start)
			e.ReturnAll(ctx)
			var total int64
			for _, s := range spent {
				total += s
			}
			if s := e.Stats(); e.Held() != 0 || s.Leases == 0 || (tc.advance && s.UnitsReturned == 0) {
				t.Fatalf("held %d after ReturnAll; stats %+v", e.Held(), s)
			}
			left := lim.Limit - total
			if r, _ := store.Take(ctx, "k", lim, left, now); !r.Allowed || r.Remaining != 0 {
				t.Fatalf("spent %d of %d; the shared limit then has %+v, want exactly %d left", total, lim.Limit, r, left)
			}
		})
	}
}
