package simulate

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/limiter/lease"
)

func memoryLessor() (lease.Store, func(), error) {
	return limiter.NewMemoryStore(limiter.MemoryStoreOptions{}), func() {}, nil
}

// randomFleetTrace draws arrivals over n pods: bursts far above the limit's rate, lulls (some
// just past a lease's age, when a lease kept too long would still be spent), pods that go
// quiet, sometimes many at one instant.
func randomFleetTrace(rng *rand.Rand, lim limiter.Limit, maxAgeMs int64, pods, n int) []Arrival {
	perMs := max(1, lim.WindowMs()/max(1, lim.Limit)) // ms per unit at the rate
	var out []Arrival
	now := int64(1_700_000_000_000) + rng.Int64N(lim.WindowMs())
	hot := rng.IntN(pods)
	for range n {
		switch rng.IntN(12) {
		case 0, 1, 2, 3:
		case 4, 5, 6:
			now += rng.Int64N(perMs + 1)
		case 7, 8:
			now += rng.Int64N(3*perMs + 1)
		case 9:
			now += rng.Int64N(2*lim.WindowMs() + 1)
		case 10:
			hot = rng.IntN(pods)
			if rng.IntN(2) == 0 {
				now += maxAgeMs + rng.Int64N(2*maxAgeMs)
			}
		default:
			now++
		}
		pod := rng.IntN(pods)
		if rng.IntN(3) > 0 {
			pod = hot
		}
		out = append(out, Arrival{At: now, Pod: pod})
	}
	return out
}

// TestLeasedBoundProperty: on random traces spread over random fleets, for every leasable
// algorithm, every interval keeps the bound (lease.WorstInterval) and the pods never hold more
// than pods × maxUnits unused units.
func TestLeasedBoundProperty(t *testing.T) {
	algs := []limiter.Limit{{Algorithm: limiter.FixedWindow}, {Algorithm: limiter.SlidingWindowCounter},
		{Algorithm: limiter.TokenBucket}, {Algorithm: limiter.LeakyBucket, Mode: limiter.Meter}}
	for ai, base := range algs {
		t.Run(base.Name(), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(14, uint64(ai)))
			leased := 0
			for trace := range 200 {
				lim := base
				lim.Limit = 1 + rng.Int64N(40)
				lim.Window = time.Duration(1+rng.Int64N(400)) * time.Millisecond
				if lim.Algorithm == limiter.TokenBucket || lim.Algorithm == limiter.LeakyBucket {
					lim.Burst = rng.Int64N(60)
				}
				fleet := Fleet{Pods: 1 + rng.IntN(8), Lease: lease.Params{MaxAge: time.Duration(1+rng.Int64N(2*lim.WindowMs())) * time.Millisecond}}
				if rng.IntN(2) == 0 {
					fleet.Lease.MaxUnits = 1 + rng.Int64N(lim.Capacity())
				}
				cost := int64(1)
				if rng.IntN(4) == 0 {
					cost = 1 + rng.Int64N(min(3, lim.Capacity()))
				}
				arr := randomFleetTrace(rng, lim, fleet.Lease.MaxAge.Milliseconds(), fleet.Pods, 400)
				rep, err := ReplayFleet(arr, memoryLessor, lim, cost, fleet)
				if err != nil {
					t.Fatal(err)
				}
				if !rep.Worst.Holds() {
					var b strings.Builder
					_ = rep.Write(&b)
					t.Fatalf("trace %d %+v %+v cost %d: the bound fails:\n%s", trace, lim, fleet, cost, b.String())
				}
				if rep.MaxHeld > rep.HeldBound {
					t.Fatalf("trace %d: %d units held unused at once, bound %d", trace, rep.MaxHeld, rep.HeldBound)
				}
				if rep.Stats.Leases > 0 {
					leased++
				}
			}
			if leased < 100 {
				t.Fatalf("only %d of 200 traces took a lease: the property was hardly exercised", leased)
			}
		})
	}
}

// TestLeasedFewerStoreCalls: far from the limit, one hot key on two pods costs the store a
// small fraction of a call per decision, and admits what the exact rule admits.
func TestLeasedFewerStoreCalls(t *testing.T) {
	lim := limiter.Limit{Algorithm: limiter.TokenBucket, Limit: 100_000, Window: time.Second}
	var arr []Arrival
	for i := range 20_000 { // 10 requests per ms, a tenth of the rate
		arr = append(arr, Arrival{At: 1_700_000_000_000 + int64(i/10), Pod: i % 2})
	}
	rep, err := ReplayFleet(arr, memoryLessor, lim, 1, Fleet{Pods: 2, Lease: lease.Params{MaxAge: 100 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Leased.Allowed != rep.Exact.Allowed || rep.Leased.Allowed != int64(len(arr)) {
		t.Errorf("leased admitted %d, exact %d, of %d", rep.Leased.Allowed, rep.Exact.Allowed, len(arr))
	}
	if rep.Leased.StoreCalls*50 > int64(len(arr)) {
		t.Errorf("%d store calls for %d decisions, want at most 0.02 per decision", rep.Leased.StoreCalls, len(arr))
	}
}
