package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testutil/redisserver"
)

// leasable is the variants leases apply to.
func leasable() []limiter.Limit {
	var out []limiter.Limit
	for _, lim := range limiter.Variants(1, time.Second, 0, 0) {
		if lim.Leasable() == nil {
			out = append(out, lim)
		}
	}
	return out
}

// TestDifferentialLeases replays seeded random traces of takes, lease issues and returns
// (of any outstanding grant, any part of it, in any order, with instants that go backwards)
// through the Redis store and limiter.MemoryStore: every Result, Grant and returned count must
// be identical.
func TestDifferentialLeases(t *testing.T) {
	const sets, steps = 30, 200
	srv := redisserver.StartTest(t)
	client := newClient(t, srv.URL())
	for i, base := range leasable() {
		t.Run(base.Name(), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(20261201, uint64(i)))
			ctx := context.Background()
			for set := range sets {
				lim := randomLimit(rng, base)
				rs := newStore(t, client, Options{Prefix: freshPrefix("lease"), Timeout: testTimeout, ExplicitTime: true})
				ms := limiter.NewMemoryStore(limiter.MemoryStoreOptions{})
				keys := []string{"a", "b"}[:1+rng.IntN(2)]
				type held struct {
					key string
					g   limiter.Grant
				}
				var grants []held
				now := t0 + rng.Int64N(lim.WindowMs())
				var trace []string
				fail := func(step int, format string, args ...any) {
					t.Fatalf("set %d %+v, step %d: %s\ntrace (last 20):\n%s", set, lim, step, fmt.Sprintf(format, args...),
						strings.Join(trace[max(0, len(trace)-20):], "\n"))
				}
				for step := range steps {
					now = max(0, now+randomGap(rng, lim))
					key := pick(rng, keys...)
					at := time.UnixMilli(now)
					switch op := rng.IntN(10); {
					case op < 3:
						c := randomCost(rng, lim.Capacity())
						want, werr := ms.Take(ctx, key, lim, c, at)
						got, gerr := rs.Take(ctx, key, lim, c, at)
						trace = append(trace, fmt.Sprintf("  %3d take key=%s now=%d c=%d -> %+v", step, key, now, c, want))
						if werr != nil || gerr != nil || got != want {
							fail(step, "take: redis %+v (%v), memory %+v (%v)", got, gerr, want, werr)
						}
					case op < 7:
						k := pick(rng, int64(1), 2, 1+rng.Int64N(lim.Capacity()), lim.Capacity(), lim.Capacity()+1+rng.Int64N(5))
						want, werr := ms.Issue(ctx, key, lim, k, at)
						got, gerr := rs.Issue(ctx, key, lim, k, at)
						trace = append(trace, fmt.Sprintf("  %3d issue key=%s now=%d k=%d -> %+v", step, key, now, k, want))
						if werr != nil || gerr != nil || got != want {
							fail(step, "issue: redis %+v (%v), memory %+v (%v)", got, gerr, want, werr)
						}
						if want.Units > 0 {
							grants = append(grants, held{key, want})
						}
					default:
						if len(grants) == 0 {
							continue
						}
						j := rng.IntN(len(grants))
						h := grants[j]
						grants = append(grants[:j], grants[j+1:]...)
						unused := pick(rng, h.g.Units, 1+rng.Int64N(h.g.Units), 0)
						want, werr := ms.Return(ctx, h.key, lim, h.g, unused)
						got, gerr := rs.Return(ctx, h.key, lim, h.g, unused)
						trace = append(trace, fmt.Sprintf("  %3d return key=%s unused=%d of %+v -> %d", step, h.key, unused, h.g, want))
						if werr != nil || gerr != nil || got != want {
							fail(step, "return: redis %d (%v), memory %d (%v)", got, gerr, want, werr)
						}
					}
				}
			}
		})
	}
}

// TestIssueRejectsWhatCannotBeLeased: the algorithms without a bound, and k < 1.
func TestIssueRejectsWhatCannotBeLeased(t *testing.T) {
	srv := redisserver.StartTest(t)
	rs := newStore(t, newClient(t, srv.URL()), Options{Prefix: freshPrefix("lease-bad"), Timeout: testTimeout, ExplicitTime: true})
	for _, lim := range limiter.Variants(5, time.Second, 0, 0) {
		_, err := rs.Issue(context.Background(), "k", lim, 1, at(0))
		if (err != nil) != (lim.Leasable() != nil) {
			t.Errorf("%s: Issue error %v", lim.Name(), err)
		}
	}
	if _, err := rs.Issue(context.Background(), "k", leasable()[0], 0, at(0)); err == nil {
		t.Error("a lease of 0 units was issued")
	}
}
