package limiter

import (
	"context"
	"math/rand"
	"testing"
	"time"
)

var leasableAlgorithms = []Limit{
	{Algorithm: FixedWindow}, {Algorithm: SlidingWindowCounter}, {Algorithm: TokenBucket},
	{Algorithm: LeakyBucket, Mode: Meter},
}

// TestIssueIsKTakesOfCostOne: on random traces, a lease of k units issues exactly as many units
// as k takes of cost 1 at the same instant pass, and leaves the same state: a second store that
// gets the k takes instead decides every later take the same.
func TestIssueIsKTakesOfCostOne(t *testing.T) {
	ctx := context.Background()
	for _, base := range leasableAlgorithms {
		t.Run(base.Name(), func(t *testing.T) {
			for seed := range int64(traces) {
				rng := rand.New(rand.NewSource(seed))
				lim := randomLimit(rng, base.Algorithm)
				lim.Mode = base.Mode
				leased, taken := NewMemoryStore(MemoryStoreOptions{}), NewMemoryStore(MemoryStoreOptions{})
				now := int64(1_700_000_000_000) + rng.Int63n(lim.WindowMs())
				for step := range 100 {
					now += randomGap(rng, lim.WindowMs())
					at := time.UnixMilli(now)
					if rng.Intn(2) == 0 {
						c := randomCost(rng, lim.Capacity())
						a, _ := leased.Take(ctx, "k", lim, c, at)
						b, _ := taken.Take(ctx, "k", lim, c, at)
						if a != b {
							t.Fatalf("seed %d %+v step %d: take after leases %+v, after takes %+v", seed, lim, step, a, b)
						}
						continue
					}
					k := 1 + rng.Int63n(lim.Capacity()+3)
					g, err := leased.Issue(ctx, "k", lim, k, at)
					if err != nil {
						t.Fatal(err)
					}
					var passed int64
					for j := range k {
						r, _ := taken.Take(ctx, "k", lim, 1, at)
						if r.Allowed {
							passed++
						}
						if j == 0 && g.Units == 0 && r != g.Result {
							t.Fatalf("seed %d %+v step %d: a lease of none reports %+v, a take of 1 %+v", seed, lim, step, g.Result, r)
						}
					}
					if g.Units != passed || g.Units > k || g.Units < 0 {
						t.Fatalf("seed %d %+v step %d: lease of %d issued %d, %d takes of cost 1 passed", seed, lim, step, k, g.Units, passed)
					}
				}
			}
		})
	}
}

// TestReturnNeverBeyondWithoutTheLease: returning a lease's unused units leaves a state no more
// permissive than had the lease issued only the units it used, and gives back all of them
// while nothing else happened: a store that issued Units-unused units instead makes the same
// decisions afterwards when the return is immediate, and never denies what the returned one
// admits later on.
func TestReturnNeverBeyondWithoutTheLease(t *testing.T) {
	ctx := context.Background()
	for _, base := range leasableAlgorithms {
		t.Run(base.Name(), func(t *testing.T) {
			for seed := range int64(traces) {
				rng := rand.New(rand.NewSource(seed))
				lim := randomLimit(rng, base.Algorithm)
				lim.Mode = base.Mode
				now := int64(1_700_000_000_000) + rng.Int63n(lim.WindowMs())
				returned, used := NewMemoryStore(MemoryStoreOptions{}), NewMemoryStore(MemoryStoreOptions{})
				// A common history.
				for range rng.Intn(20) {
					now += randomGap(rng, lim.WindowMs())
					c := randomCost(rng, lim.Capacity())
					_, _ = returned.Take(ctx, "k", lim, c, time.UnixMilli(now))
					_, _ = used.Take(ctx, "k", lim, c, time.UnixMilli(now))
				}
				now += randomGap(rng, lim.WindowMs())
				k := 1 + rng.Int63n(lim.Capacity())
				g, _ := returned.Issue(ctx, "k", lim, k, time.UnixMilli(now))
				if g.Units == 0 {
					continue
				}
				unused := rng.Int63n(g.Units + 1)
				if g.Units > unused {
					if h, _ := used.Issue(ctx, "k", lim, g.Units-unused, time.UnixMilli(now)); h.Units != g.Units-unused {
						t.Fatalf("seed %d: the smaller lease issued %d of %d", seed, h.Units, g.Units-unused)
					}
				} else {
					_, _ = used.Take(ctx, "k", lim, lim.Capacity()+1, time.UnixMilli(now)) // only bring it forward
				}
				// Other takes in between.
				between := rng.Intn(3)
				for range between {
					now += randomGap(rng, lim.WindowMs())
					// The other requests' charges are the same in both: what the lease's store
					// admits, the other admits too (it holds more).
					c := int64(1)
					if r, _ := returned.Take(ctx, "k", lim, 1, time.UnixMilli(now)); !r.Allowed {
						c = lim.Capacity() + 1 // denied: only brought forward
					}
					if r, _ := used.Take(ctx, "k", lim, c, time.UnixMilli(now)); r.Allowed != (c == 1) {
						t.Fatalf("seed %d: a take the lease's store admits is denied without the lease: %+v", seed, r)
					}
				}
				back, err := returned.Return(ctx, "k", lim, g, unused)
				if err != nil || back > unused {
					t.Fatalf("seed %d: returned %d of %d (%v)", seed, back, unused, err)
				}
				for step := range 30 {
					now += randomGap(rng, lim.WindowMs())
					c := randomCost(rng, lim.Capacity())
					a, _ := returned.Take(ctx, "k", lim, c, time.UnixMilli(now))
					b, _ := used.Take(ctx, "k", lim, c, time.UnixMilli(now))
					if a.Allowed && !b.Allowed {
						t.Fatalf("seed %d %+v step %d: after the return %+v, without the lease %+v", seed, lim, step, a, b)
					}
					if between == 0 && a != b {
						t.Fatalf("seed %d %+v step %d: an immediate return is not exact: %+v, without the lease %+v", seed, lim, step, a, b)
					}
					if a.Allowed != b.Allowed {
						break // the returned state is stricter; from here on the charges differ
					}
				}
			}
		})
	}
}
