package proxy_test

import (
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/policy"
	st "github.com/sluice-dev/sluice/sidecar/internal/sidecartest"
)

func leased(maxAge time.Duration, maxUnits int64) func(*policy.Rule) {
	return func(r *policy.Rule) { r.Lease = &policy.Lease{MaxAgeMs: maxAge.Milliseconds(), MaxUnits: maxUnits} }
}

// TestLeasedRule: a leased rule far from its limit decides most requests without Redis, and
// near it decides exactly: a limit of 50 (its rate negligible within the test) admits exactly
// 50 of 80 requests, as the exact rule does.
func TestLeasedRule(t *testing.T) {
	doc := st.Doc(t, st.Policy("api", []policy.Rule{st.Rule("tenant", 50, time.Hour, leased(10*time.Second, 10))}))
	e := newEnv(t, doc, envOpt{})
	codes := e.codes(80, "/", nil)
	if n := count(codes, 200); n != 50 || count(codes, 429) != 30 {
		t.Fatalf("admitted %d, limited %d of 80; want 50 and 30: %v", n, count(codes, 429), codes)
	}
	for i, c := range codes[:50] {
		if c != 200 {
			t.Fatalf("request %d answered %d before the limit was reached", i, c)
		}
	}
	s := e.leases.Stats()
	if s.Leases == 0 || s.Decisions != 80 {
		t.Fatalf("stats %+v: no lease taken, or not every decision leased", s)
	}
	// 50 admitted in leases of up to 10 and the 30 denials decided in Redis.
	if s.StoreCalls >= 80-20 {
		t.Errorf("%d store calls for 80 decisions", s.StoreCalls)
	}
	if got := e.counter("api", "tenant", "allowed"); got != 50 {
		t.Errorf("allowed counter %v", got)
	}
}

// TestLeasedRuleRedisOutage: with Redis gone, a sidecar spends the units its live lease still
// holds, then falls back to its local share exactly as today.
func TestLeasedRuleRedisOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and stops redis-server")
	}
	const limit, replicas = 400, 4 // local share 100
	doc := st.Doc(t, st.Policy("api", []policy.Rule{st.Rule("tenant", limit, time.Hour, leased(10*time.Second, 50))},
		func(p *policy.Policy) { p.Replicas = replicas }))
	e := newEnv(t, doc, envOpt{cooldown: time.Hour})
	if n := count(e.codes(30, "/", nil), 200); n != 30 {
		t.Fatalf("admitted %d of 30 before the outage", n)
	}
	held := e.leases.Held()
	if held == 0 {
		t.Fatal("no units held before the outage")
	}
	e.redis.Kill()
	codes := e.codes(200, "/", nil)
	want := int(held) + limit/replicas
	if n := count(codes, 200); n != want || count(codes, 429) != 200-want {
		t.Fatalf("during the outage admitted %d of 200, want the %d held units and the local share %d", n, held, limit/replicas)
	}
	for i, c := range codes[:held] {
		if c != 200 {
			t.Fatalf("request %d answered %d while the lease held units", i, c)
		}
	}
}
