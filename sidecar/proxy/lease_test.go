package proxy_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/sluice-dev/sluice/internal/policy"
	st "github.com/sluice-dev/sluice/internal/testutil/sidecartest"
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

// TestLeasedMultiRuleAllOrNothing: requests matching several rules, some leased, are decided
// request for request as the same rules unleased decide them (issue 21's all-or-nothing: a
// request one rule denies spends no other rule's units, leased or not), while the leased
// rules' units come mostly from leases. One sidecar, sequential requests at fixed instants
// of a fake clock (Redis decides at them), so the exact rules' decisions are the reference:
// with one pod and no refill a leased rule admits exactly what the exact rule admits. Two
// leased rules (per tenant and per client IP) and two exact ones (per user, and per API key
// on /api) over random headers; 600 requests, the most of them denied by one rule or other.
func TestLeasedMultiRuleAllOrNothing(t *testing.T) {
	day := 24 * time.Hour // no refill within the test
	doc := func(lease bool) []byte {
		l := func(maxUnits int64) func(*policy.Rule) {
			if !lease {
				return func(*policy.Rule) {}
			}
			return leased(10*time.Second, maxUnits)
		}
		header := func(name string) func(*policy.Rule) {
			return func(r *policy.Rule) { r.Key = []policy.KeyPart{{Source: policy.SourceHeader, Name: name}} }
		}
		return st.Doc(t, st.Policy("api", []policy.Rule{
			st.Rule("tenant", 60, day, header("X-Tenant"), l(8)),
			st.Rule("ip", 150, day, l(5)),
			st.Rule("user", 12, day, header("X-User")),
			st.Rule("key", 20, day, header("X-Key"), func(r *policy.Rule) { r.Match = &policy.Match{PathPrefix: "/api"} }),
		}))
	}
	t0 := time.Date(2026, 2, 5, 0, 0, 0, 0, time.UTC)
	leasedEnv := newEnv(t, doc(true), envOpt{clock: clocktesting.NewFakeClock(t0), cooldown: time.Hour})
	exactEnv := newEnv(t, doc(false), envOpt{clock: clocktesting.NewFakeClock(t0), cooldown: time.Hour})
	rng := rand.New(rand.NewPCG(21, 14))
	pick := func(prefix string, n int) string { return fmt.Sprintf("%s%d", prefix, rng.IntN(n)) }
	var admitted, denied int
	for i := range 600 {
		hdr := map[string]string{"X-Tenant": pick("t", 3), "X-User": pick("u", 12), "X-Key": pick("k", 4)}
		path := []string{"/", "/api/x"}[rng.IntN(2)]
		got, _ := leasedEnv.do("GET", path, hdr)
		want, _ := exactEnv.do("GET", path, hdr)
		if got.StatusCode != want.StatusCode {
			t.Fatalf("request %d (%s %v): leased %d, exact %d", i, path, hdr, got.StatusCode, want.StatusCode)
		}
		if got.StatusCode == 200 {
			admitted++
		} else {
			denied++
		}
		if i%50 == 49 { // time moves on, within one lease's age
			leasedEnv.clock.Step(time.Second)
			exactEnv.clock.Step(time.Second)
		}
	}
	s := leasedEnv.leases.Stats()
	t.Logf("admitted %d, denied %d; leases: %+v", admitted, denied, s)
	if admitted < 100 || denied < 100 {
		t.Errorf("admitted %d, denied %d: the trace does not exercise both", admitted, denied)
	}
	// Every request matches tenant and ip: 1,200 leased decisions, most from leases.
	if s.Leases == 0 || s.StoreCalls*2 > s.Decisions {
		t.Errorf("leased rules made %d store calls for %d decisions in %d leases: not leased", s.StoreCalls, s.Decisions, s.Leases)
	}
	if c := leasedEnv.counter("api", "user", "not_charged"); c == 0 {
		t.Errorf("no request was denied by a rule other than user")
	}
}
