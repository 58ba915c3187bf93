package proxy_test

import (
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/sluice-dev/sluice/internal/policy"
	st "github.com/sluice-dev/sluice/internal/testutil/sidecartest"
)

// TestCalendarQuotaCountsToTheRealBoundary runs calendar rules through the proxy and Redis at
// instants of a fake clock: Retry-After, RateLimit's t and X-RateLimit-Reset count to the local
// midnight that ends the window, across a month end and both DST changes of Europe/Berlin.
func TestCalendarQuotaCountsToTheRealBoundary(t *testing.T) {
	b, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	calendar := func(period string) func(*policy.Rule) {
		return func(r *policy.Rule) {
			r.Algorithm, r.Burst, r.WindowMs = "FixedWindow", 0, 0
			r.Calendar = &policy.Calendar{Period: period, TimeZone: "Europe/Berlin"}
		}
	}
	type step struct {
		at                  time.Time
		code                int
		reset, retry, limit string
	}
	tests := map[string]struct {
		period string
		steps  []step
	}{
		"month end": {"Month", []step{
			{time.Date(2026, 1, 31, 23, 0, 0, 0, b), 200, "3600", "", `"monthly";q=2;w=2682000`},
			{time.Date(2026, 1, 31, 23, 30, 0, 0, b), 200, "1800", "", ""},
			{time.Date(2026, 1, 31, 23, 59, 59, 500e6, b), 429, "1", "1", ""},
			{time.Date(2026, 2, 1, 0, 0, 0, 0, b), 200, "2419200", "", ""}, // February: 28 days
		}},
		"spring DST day is 23 hours": {"Day", []step{
			{time.Date(2026, 3, 29, 0, 0, 0, 0, b), 200, "82800", "", ""},
			{time.Date(2026, 3, 29, 1, 0, 0, 0, b), 200, "79200", "", ""},
			{time.Date(2026, 3, 29, 4, 0, 0, 0, b), 429, "72000", "72000", ""}, // 03:00 came at 02:00
		}},
		"autumn DST day is 25 hours": {"Day", []step{
			{time.Date(2026, 10, 25, 0, 0, 0, 0, b), 200, "90000", "", ""},
			{time.Date(2026, 10, 25, 0, 0, 0, 0, b), 200, "90000", "", ""},
			{time.Date(2026, 10, 25, 4, 0, 0, 0, b), 429, "72000", "72000", ""}, // 5 of the 25 hours gone
		}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			clock := clocktesting.NewFakeClock(tc.steps[0].at)
			doc := st.Doc(t, st.Policy("plan", []policy.Rule{st.Rule("monthly", 2, 0, calendar(tc.period))}))
			e := newEnv(t, doc, envOpt{clock: clock})
			for i, s := range tc.steps {
				clock.SetTime(s.at)
				resp, body := e.do("GET", "/", nil)
				if resp.StatusCode != s.code {
					t.Fatalf("step %d at %s: status %d, want %d: %s", i, s.at, resp.StatusCode, s.code, body)
				}
				if got := resp.Header.Get("X-RateLimit-Reset"); got != s.reset {
					t.Errorf("step %d at %s: X-RateLimit-Reset %s, want %s", i, s.at, got, s.reset)
				}
				if got, want := resp.Header.Get("RateLimit"), `"monthly";r=`; len(got) < len(want) || got[:len(want)] != want || got[len(got)-len(s.reset)-2:] != "t="+s.reset {
					t.Errorf("step %d: RateLimit %q, want t=%s", i, got, s.reset)
				}
				if got := resp.Header.Get("Retry-After"); got != s.retry {
					t.Errorf("step %d at %s: Retry-After %q, want %q", i, s.at, got, s.retry)
				}
				if s.limit != "" {
					if got := resp.Header.Get("RateLimit-Policy"); got != s.limit {
						t.Errorf("step %d: RateLimit-Policy %q, want %q", i, got, s.limit)
					}
				}
			}
		})
	}
}
