package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/limiter"
)

// TestDifferentialLateCharges replays random traces of takes, checks (requests with Check
// takes) and late charges (Charge, with costs up to far beyond the capacity, into debt) on
// FixedWindow, calendar FixedWindow and TokenBucket limits through the Redis store (explicit
// time) and limiter.MemoryStore: every Result must be identical.
func TestDifferentialLateCharges(t *testing.T) {
	for ti, top := range topologies {
		t.Run(top.name, func(t *testing.T) {
			client := top.client(t)
			rng := rand.New(rand.NewPCG(20261202, uint64(ti)))
			for set := range 16 {
				lims := []limiter.Limit{
					randomLimit(rng, limiter.Limit{Algorithm: limiter.TokenBucket}),
					randomLimit(rng, limiter.Limit{Algorithm: limiter.FixedWindow}),
					calendarLimit(t, pick(rng, limiter.Day, limiter.Month), "Europe/Berlin", pick(rng, int64(1), 3, 1000)),
				}
				if set%4 == 0 { // a bucket that refills slowly over a long window: a deep debt
					lims[0] = limiter.Limit{Algorithm: limiter.TokenBucket, Limit: 1_000_000, Window: time.Hour, Burst: 1_000_000}
				}
				rs := newStore(t, client, explicitTime("charge"))
				ms := limiter.NewMemoryStore(limiter.MemoryStoreOptions{})
				now := t0 + rng.Int64N(100_000)
				var trace []string
				for step := range 200 {
					li := rng.IntN(len(lims))
					lim := lims[li]
					gap := randomGap(rng, limiter.Limit{Algorithm: limiter.FixedWindow, Limit: 1, Window: min(lim.Window, limiter.MaxWindow)})
					if top.name == "cluster" { // a refund is exact only forwards (see TakeRequest)
						gap = max(0, gap)
					}
					now += gap
					key := fmt.Sprintf("k%d:%d", li, rng.IntN(2))
					switch rng.IntN(3) {
					case 0:
						c := pick(rng, int64(1), 1+rng.Int64N(lim.Capacity()), 1+rng.Int64N(10*lim.Capacity()), 1<<50)
						want, werr := ms.Charge(context.Background(), key, lim, c, time.UnixMilli(now))
						got, gerr := rs.Charge(context.Background(), key, lim, c, time.UnixMilli(now))
						trace = append(trace, fmt.Sprintf("  %3d now=%d charge %s c=%d -> %+v", step, now, key, c, want))
						if werr != nil || gerr != nil || got != want {
							t.Fatalf("set %d step %d %+v: charge %d:\nredis  %+v %v\nmemory %+v %v\n%s", set, step, lim, c, got, gerr, want, werr,
								strings.Join(trace[max(0, len(trace)-10):], "\n"))
						}
					default:
						takes := []limiter.Take{{Key: key, Limit: lim, N: randomCost(rng, lim.Capacity()), Check: rng.IntN(2) == 0, Shadow: rng.IntN(8) == 0}}
						if rng.IntN(2) == 0 {
							lj := (li + 1) % len(lims)
							takes = append(takes, limiter.Take{Key: fmt.Sprintf("k%d:0", lj), Limit: lims[lj], N: 1, Check: rng.IntN(2) == 0})
						}
						want, wantOK := mustTakeRequest(t, ms, takes, time.UnixMilli(now))
						got, gotOK := mustTakeRequest(t, rs, takes, time.UnixMilli(now))
						trace = append(trace, fmt.Sprintf("  %3d now=%d %+v -> %v %+v", step, now, takes, wantOK, want))
						if gotOK != wantOK || !slices.Equal(got, want) {
							t.Fatalf("set %d step %d:\nredis  %v %+v\nmemory %v %+v\n%s", set, step, gotOK, got, wantOK, want,
								strings.Join(trace[max(0, len(trace)-10):], "\n"))
						}
					}
				}
			}
		})
	}
}
