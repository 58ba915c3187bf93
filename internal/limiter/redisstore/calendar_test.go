package redisstore

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testutil/redisserver"
)

func calendarLimit(t testing.TB, p limiter.Period, zone string, limit int64) limiter.Limit {
	t.Helper()
	z, err := limiter.LoadZone(zone)
	if err != nil {
		t.Fatal(err)
	}
	lim := limiter.Limit{Algorithm: limiter.FixedWindow, Limit: limit, Window: p.Nominal(), Period: p, Zone: z}
	if err := lim.Validate(); err != nil {
		t.Fatal(err)
	}
	return lim
}

// TestDifferentialCalendar replays random traces of calendar windows through the Redis store
// (explicit time) and limiter.MemoryStore, single takes and requests of several rules, starting
// shortly before a month end, a leap day and both DST changes of Europe/Berlin, with gaps from
// a millisecond to days and instants that go backwards; every Result must be identical.
func TestDifferentialCalendar(t *testing.T) {
	for ti, top := range topologies {
		t.Run(top.name, func(t *testing.T) {
			client := top.client(t)
			rng := rand.New(rand.NewPCG(20261201, uint64(ti)))
			b, _ := limiter.LoadZone("Europe/Berlin")
			starts := []time.Time{
				time.Date(2026, 1, 31, 23, 0, 0, 0, b),  // month end
				time.Date(2028, 2, 28, 23, 0, 0, 0, b),  // leap day
				time.Date(2026, 3, 28, 23, 0, 0, 0, b),  // spring DST change
				time.Date(2026, 10, 24, 23, 0, 0, 0, b), // autumn DST change
				time.Date(2026, 12, 27, 23, 0, 0, 0, b), // a week across the year end
			}
			for set := range 12 {
				lims := []limiter.Limit{
					calendarLimit(t, pick(rng, limiter.Day, limiter.Week, limiter.Month), pick(rng, "Europe/Berlin", "UTC", "America/New_York", "Asia/Kolkata"), pick(rng, int64(1), 2, 5, 100)),
					calendarLimit(t, pick(rng, limiter.Day, limiter.Week, limiter.Month), "Europe/Berlin", pick(rng, int64(1), 3, 7)),
					randomLimit(rng, pick(rng, limiter.Variants(1, time.Second, 0, 0)...)),
				}
				rs := newStore(t, client, explicitTime("calendar"))
				ms := limiter.NewMemoryStore(limiter.MemoryStoreOptions{})
				now := pick(rng, starts...).UnixMilli()
				var trace []string
				for step := range 150 {
					switch rng.IntN(10) {
					case 0:
						if top.name != "cluster" { // a refund is exact only forwards (see TakeRequest)
							now -= rng.Int64N(3_600_000)
						}
					case 1, 2:
						now += rng.Int64N(2 * 86_400_000)
					case 3:
						now += 1
					default:
						now += rng.Int64N(600_000)
					}
					if top.name == "cluster" || rng.IntN(2) == 0 {
						var takes []limiter.Take
						for i, lim := range lims {
							if rng.IntN(4) == 0 {
								continue
							}
							takes = append(takes, limiter.Take{Key: fmt.Sprintf("r%d:%d", i, rng.IntN(2)), Limit: lim,
								N: randomCost(rng, lim.Capacity()), Shadow: rng.IntN(6) == 0})
						}
						want, wantOK := mustTakeRequest(t, ms, takes, time.UnixMilli(now))
						got, gotOK := mustTakeRequest(t, rs, takes, time.UnixMilli(now))
						trace = append(trace, fmt.Sprintf("  %3d now=%s %+v -> %v %+v", step, time.UnixMilli(now).In(b), takes, wantOK, want))
						if gotOK != wantOK || !slices.Equal(got, want) {
							t.Fatalf("set %d step %d:\nredis  %v %+v\nmemory %v %+v\ntrace:\n%s", set, step, gotOK, got, wantOK, want,
								strings.Join(trace[max(0, len(trace)-8):], "\n"))
						}
						continue
					}
					li := rng.IntN(2)
					lim, key := lims[li], fmt.Sprintf("k%d:%d", li, rng.IntN(2)) // a key has one limit, as in the sidecar
					c := randomCost(rng, lim.Capacity())
					want := mustTake(t, ms, key, lim, c, time.UnixMilli(now))
					got := mustTake(t, rs, key, lim, c, time.UnixMilli(now))
					trace = append(trace, fmt.Sprintf("  %3d now=%s %s c=%d -> %+v", step, time.UnixMilli(now).In(b), key, c, want))
					if got != want {
						t.Fatalf("set %d step %d (%s):\nredis  %+v\nmemory %+v\ntrace:\n%s", set, step, lim.Name(), got, want,
							strings.Join(trace[max(0, len(trace)-8):], "\n"))
					}
				}
			}
		})
	}
}

// TestCalendarServerTime checks a calendar window under Redis's own clock: the window is the
// caller's (the sidecar computes it), the TTL ends at the window's end, and a denial's
// RetryAfter counts to that end.
func TestCalendarServerTime(t *testing.T) {
	srv := redisserver.StartTest(t)
	client := newClient(t, srv.URL())
	rs := newStore(t, client, Options{Prefix: freshPrefix("calsrv"), Timeout: testTimeout})
	lim := calendarLimit(t, limiter.Day, "Europe/Berlin", 2)
	now := time.Now()
	_, end := lim.CalendarBounds(now.UnixMilli())
	for i := range 3 {
		r := mustTake(t, rs, "k", lim, 1, now)
		if r.Allowed != (i < 2) {
			t.Fatalf("request %d: %+v", i, r)
		}
		if i == 2 && (r.RetryAfter <= 0 || r.RetryAfter.Milliseconds() > end-now.UnixMilli()+1000) {
			t.Fatalf("RetryAfter %s, want up to the window's end in %dms", r.RetryAfter, end-now.UnixMilli())
		}
	}
	ttl, err := client.PTTL(t.Context(), rs.Keys("k", lim)[0]).Result()
	if err != nil || ttl <= 0 || ttl.Milliseconds() > end-now.UnixMilli()+1000 {
		t.Fatalf("TTL %s (%v), want up to the window's end in %dms", ttl, err, end-now.UnixMilli())
	}
}
