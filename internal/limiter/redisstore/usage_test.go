package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testutil/redisserver"
)

// TestAddUsage: units added to a key count as spent, for every algorithm and a calendar
// window, on a fresh key and on one takes already used; a charge beyond what the state can
// hold charges only that much and leaves it used up; and a charge never denies.
func TestAddUsage(t *testing.T) {
	srv := redisserver.StartTest(t)
	const limit = 10
	window := time.Minute
	cases := map[string]struct {
		before, charge int64 // units taken first, then charged
		wantCharged    int64
	}{
		"fresh":        {before: 0, charge: 4, wantCharged: 4},
		"after takes":  {before: 3, charge: 4, wantCharged: 4},
		"all of it":    {before: 0, charge: limit, wantCharged: limit},
		"beyond":       {before: 2, charge: 3 * limit, wantCharged: limit - 2},
		"already used": {before: limit, charge: 1, wantCharged: 0},
	}
	for _, lim := range append(limiter.Variants(limit, window, 0, window), calendarLimit(t, limiter.Day, "Europe/Berlin", limit)) {
		for name, c := range cases {
			t.Run(lim.Name()+"/"+name, func(t *testing.T) {
				s := newStore(t, newClient(t, srv.URL()), Options{Prefix: freshPrefix("charge"), Timeout: testTimeout, ExplicitTime: true})
				now := at(0)
				for range c.before {
					if r := mustTake(t, s, "k", lim, 1, now); !r.Allowed {
						t.Fatalf("take before the charge denied: %+v", r)
					}
				}
				got, err := s.AddUsage(context.Background(), "k", lim, c.charge, now)
				if err != nil {
					t.Fatal(err)
				}
				if got != c.wantCharged {
					t.Errorf("Charge(%d) after %d taken = %d, want %d", c.charge, c.before, got, c.wantCharged)
				}
				admitted := int64(0)
				for range limit + 1 {
					if mustTake(t, s, "k", lim, 1, now).Allowed {
						admitted++
					}
				}
				if want := int64(limit) - c.before - c.wantCharged; admitted != want {
					t.Errorf("%d admitted after the charge, want %d", admitted, want)
				}
			})
		}
	}
}

// TestAddUsageExpiresWithTheWindow: added usage is forgotten as the key's own takes would be:
// a fixed window's in the next window (a calendar day's the next day), a bucket's as it
// refills (leaks), a log's a window later.
func TestAddUsageExpiresWithTheWindow(t *testing.T) {
	srv := redisserver.StartTest(t)
	const limit = 10
	window := time.Minute
	for _, lim := range append(limiter.Variants(limit, window, 0, window), calendarLimit(t, limiter.Day, "Europe/Berlin", limit)) {
		t.Run(lim.Name(), func(t *testing.T) {
			s := newStore(t, newClient(t, srv.URL()), Options{Prefix: freshPrefix("charge-exp"), Timeout: testTimeout, ExplicitTime: true})
			if _, err := s.AddUsage(context.Background(), "k", lim, limit, at(0)); err != nil {
				t.Fatal(err)
			}
			if r := mustTake(t, s, "k", lim, 1, at(1)); r.Allowed {
				t.Fatalf("take right after charging the whole limit admitted: %+v", r)
			}
			later := at(2 * lim.Window.Milliseconds()) // SlidingWindowCounter forgets after two windows; a day's quota after a day
			admitted := 0
			for range limit + 1 {
				if mustTake(t, s, "k", lim, 1, later).Allowed {
					admitted++
				}
			}
			if admitted != limit {
				t.Errorf("%d admitted two windows after the charge, want %d", admitted, limit)
			}
		})
	}
}
