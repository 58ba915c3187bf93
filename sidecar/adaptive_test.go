package main

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/testutil/redisserver"
	st "github.com/sluice-dev/sluice/internal/testutil/sidecartest"
)

// TestAdaptiveConcurrencySheds: an adaptive rule's limit pinned at 2 (minLimit = limit)
// through the built sidecar, for the paths under /s, beside a Shadow adaptive rule of limit 1
// for every path. With 2 requests held at the application, a third under /s is shed with 503
// and Retry-After: 1 before any other rule sees it (the rate rule counts only the others, and
// no 429), and the shed is counted and the limit shown; /fast, which the enforced rule does not
// match, passes, as does everything the Shadow rule would shed (counted, not shed). Once the 2
// end, requests pass again.
func TestAdaptiveConcurrencySheds(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	up := newSlowUpstream(t)
	r := redisserver.StartTest(t)
	doc := st.Doc(t, st.Policy("guard", []policy.Rule{
		st.Rule("rate", 1000, time.Hour),
		st.AdaptiveRule("app", 2, 2, func(r *policy.Rule) { r.Match = &policy.Match{PathPrefix: "/s"} }),
		st.AdaptiveRule("watch", 1, 1, func(r *policy.Rule) { r.Mode = policy.Shadow }),
	}, func(p *policy.Policy) {
		p.Selector.MatchLabels = map[string]string{"app": "guard"}
	}))
	s := startSidecarDoc(t, up.URL, doc, "app=guard", r.URL())
	done := make(chan int, 2)
	for range 2 {
		go func() { c, _, _ := get(t, s, "/slow", "k"); done <- c }()
	}
	up.waitInflight(t, 2)
	code, hdr, body := get(t, s, "/slow", "k")
	if code != http.StatusServiceUnavailable || hdr.Get("Retry-After") != "1" || !strings.Contains(body, `"overloaded"`) {
		t.Fatalf("a third request in flight: %d, Retry-After %q, %s; want 503, 1, overloaded", code, hdr.Get("Retry-After"), body)
	}
	if code, _, _ := get(t, s, "/fast", "k"); code != http.StatusOK {
		t.Fatalf("a request the enforced adaptive rule does not match: %d, want 200", code)
	}
	m := scrape(t, "http://"+s.Admin+"/metrics")
	for _, want := range []string{
		`sluice_adaptive_shed_total{policy="guard",rule="app"} 1`,
		`sluice_adaptive_limit{policy="guard",rule="app"} 2`,
		`sluice_adaptive_shed_total{policy="guard",rule="watch"} 2`,
		`sluice_requests_total{decision="allowed",policy="guard",rule="rate"} 3`,
	} {
		if !strings.Contains(m, want+"\n") {
			t.Errorf("metrics without %s", want)
		}
	}
	up.open()
	for range 2 {
		if c := <-done; c != http.StatusOK {
			t.Fatalf("a held request answered %d", c)
		}
	}
	st.Eventually(t, func() error {
		if c, _, _ := get(t, s, "/fast", "k"); c != http.StatusOK {
			return errStatus(c)
		}
		return nil
	})
}

type errStatus int

func (e errStatus) Error() string { return "status " + http.StatusText(int(e)) }
