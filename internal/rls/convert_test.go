package rls_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-dev/sluice/internal/convert"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/render"
)

// converted writes the policies `sluicectl convert envoy-ratelimit` makes of the files in
// internal/convert/testdata (envoyproxy/ratelimit's documented examples) to e.file, rendered
// as `sluicectl render` renders them.
func (e *env) converted(t *testing.T, names ...string) {
	t.Helper()
	var files []convert.File
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join("..", "convert", "testdata", n))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, convert.File{Name: n, Content: b})
	}
	res, err := convert.EnvoyRatelimit(files, convert.Options{})
	if err != nil {
		t.Fatal(err)
	}
	doc, _, verdicts, err := render.BuildFit("sluice-system", res.Policies, render.FixedReplicas(1), 0)
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range verdicts {
		if v.Err != nil {
			t.Fatalf("converted policy %s not accepted: %v", name, v.Err)
		}
	}
	b, err := policy.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.file, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestConvertedSemantics decides envoyproxy/ratelimit's documented examples, converted, with
// the RLS server and redis-server, and checks each answer against what that server's
// documentation says of them: the most specific descriptor of a level wins (an exact value,
// then wildcards in order, then the key alone), an unlimited descriptor is never limited,
// requests_per_unit 0 denies every request, shadow_mode never denies, share_threshold shares
// one counter among a wildcard's values, and nested descriptors limit the whole path.
func TestConvertedSemantics(t *testing.T) {
	e, store := start(t, policies()...)
	e.converted(t, "edge_proxy_per_ip.yaml", "internal.yaml", "messaging.yaml", "wildcards.yaml", "example6.yaml", "mongo_cps.yaml", "example8.yaml")
	s := e.replica(t, "rls-0", store)

	// expect sends n requests of one descriptor and checks each code; limited reports
	// whether a current_limit was expected.
	expect := func(domain string, n int, want rlsv3.RateLimitResponse_Code, limit uint32, kv ...string) {
		t.Helper()
		for i := range n {
			resp := s.ask(t, domain, 0, desc(0, kv...))
			st := resp.Statuses[0]
			if st.Code != want || resp.OverallCode != want {
				t.Fatalf("%s %v request %d: %v, want %v", domain, kv, i+1, st.Code, want)
			}
			if limit == 0 && want == ok {
				if st.CurrentLimit != nil {
					t.Fatalf("%s %v: current_limit %v on an unlimited descriptor", domain, kv, st.CurrentLimit)
				}
				continue
			}
			if got := st.CurrentLimit.GetRequestsPerUnit(); st.CurrentLimit == nil || got != limit {
				t.Fatalf("%s %v request %d: requests_per_unit %d, want %d", domain, kv, i+1, got, limit)
			}
		}
	}

	// requests_per_unit 0 blocks one address, every time, with no wait that helps; the
	// key-only limit counts the others, and never the blocked one.
	// A request the blocked address denies charges nothing to its other descriptors (first,
	// so that nothing but its cost can make a store deny the blocked address).
	resp := s.ask(t, "edge_proxy_per_ip", 0, desc(0, "remote_address", "50.0.0.5"), desc(0, "remote_address", "50.0.0.3"))
	if resp.OverallCode != over || resp.Statuses[1].Code != ok || resp.Statuses[1].LimitRemaining != 10 {
		t.Fatalf("blocked beside another address: %v, the other %v remaining %d; want OVER_LIMIT, OK 10", resp.OverallCode, resp.Statuses[1].Code, resp.Statuses[1].LimitRemaining)
	}
	expect("edge_proxy_per_ip", 10, ok, 10, "remote_address", "50.0.0.3")
	expect("edge_proxy_per_ip", 1, over, 10, "remote_address", "50.0.0.3")
	expect("edge_proxy_per_ip", 3, over, 0, "remote_address", "50.0.0.5")
	resp = s.ask(t, "edge_proxy_per_ip", 0, desc(0, "remote_address", "50.0.0.5"))
	if st := resp.Statuses[0]; st.DurationUntilReset != nil || st.LimitRemaining != 0 {
		t.Fatalf("a blocked address: duration_until_reset %v, remaining %d; want none and 0", st.DurationUntilReset, st.LimitRemaining)
	}
	if _, has := header(resp, "Retry-After"); has {
		t.Fatal("Retry-After for a blocked address: no wait lets it pass")
	}
	expect("edge_proxy_per_ip", 10, ok, 10, "remote_address", "50.0.0.1")
	expect("edge_proxy_per_ip", 1, over, 10, "remote_address", "50.0.0.1")
	expect("edge_proxy_per_ip", 10, ok, 10, "remote_address", "50.0.0.2") // a counter per address
	e.clk.Step(time.Second)
	expect("edge_proxy_per_ip", 1, ok, 10, "remote_address", "50.0.0.1")

	// unlimited: ldap and user=admin pass without a limit; azure and other users are limited.
	expect("internal", 20, ok, 0, "ldap", "x")
	expect("internal", 20, ok, 0, "user", "admin")
	expect("internal", 3, ok, 3, "user", "bob")
	expect("internal", 1, over, 3, "user", "bob")
	expect("internal", 100, ok, 100, "azure", "a")
	expect("internal", 1, over, 100, "azure", "a")

	// Nested descriptors: 5 marketing messages a day per number, 100 messages a day per number.
	for i := range 5 {
		resp := s.ask(t, "messaging", 0, desc(0, "message_type", "marketing", "to_number", "2061111111"), desc(0, "to_number", "2061111111"))
		if resp.OverallCode != ok || resp.Statuses[1].LimitRemaining != uint32(100-i-1) {
			t.Fatalf("marketing message %d: %v, to_number remaining %d", i+1, resp.OverallCode, resp.Statuses[1].LimitRemaining)
		}
	}
	resp = s.ask(t, "messaging", 0, desc(0, "message_type", "marketing", "to_number", "2061111111"), desc(0, "to_number", "2061111111"))
	if resp.OverallCode != over || resp.Statuses[0].Code != over || resp.Statuses[1].Code != ok || resp.Statuses[1].LimitRemaining != 95 {
		t.Fatalf("6th marketing message: %v %v/%v, to_number remaining %d; want OVER_LIMIT by the marketing limit, 95 left (uncharged)",
			resp.OverallCode, resp.Statuses[0].Code, resp.Statuses[1].Code, resp.Statuses[1].LimitRemaining)
	}
	expect("messaging", 95, ok, 100, "to_number", "2061111111")
	expect("messaging", 1, over, 100, "to_number", "2061111111")
	expect("messaging", 5, ok, 5, "message_type", "marketing", "to_number", "2062222222")

	// Wildcards: /files/* per value, /models/* shared, /files/big exact, /f* after /files/*,
	// the key alone for the rest.
	expect("wildcards", 2, ok, 2, "path", "/files/a")
	expect("wildcards", 1, over, 2, "path", "/files/a")
	expect("wildcards", 2, ok, 2, "path", "/files/b")
	expect("wildcards", 2, ok, 3, "path", "/models/x")
	expect("wildcards", 1, ok, 3, "path", "/models/y")
	expect("wildcards", 1, over, 3, "path", "/models/z") // one counter for every model
	expect("wildcards", 1, ok, 1, "path", "/files/big")
	expect("wildcards", 1, over, 1, "path", "/files/big")
	expect("wildcards", 4, ok, 4, "path", "/fun")
	expect("wildcards", 1, over, 4, "path", "/fun")
	expect("wildcards", 5, ok, 5, "path", "/other")
	expect("wildcards", 1, over, 5, "path", "/other")

	// shadow_mode never denies; the other user is enforced.
	expect("example6", 15, ok, 10, "service", "auth", "user", "user-a")
	expect("example6", 20, ok, 20, "service", "auth", "user", "user-b")
	expect("example6", 1, over, 20, "service", "auth", "user", "user-b")
	expect("example6", 1, ok, 0, "service", "auth", "user", "user-c") // no descriptor for user-c

	// Values of one key with their own limits; detailed_metric changes nothing decided.
	expect("mongo_cps", 500, ok, 500, "database", "users")
	expect("mongo_cps", 1, over, 500, "database", "users")
	expect("mongo_cps", 1, ok, 0, "database", "other")
	for _, v := range []string{"a", "b"} {
		expect("example8", 10, ok, 10, "key1", v)
		expect("example8", 1, over, 10, "key1", v)
	}
	expect("example8", 20, ok, 20, "key1", "value1")
}
