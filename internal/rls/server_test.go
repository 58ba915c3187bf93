package rls_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	rlsv3common "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/sluice-dev/sluice/internal/dataplane/breaker"
	"github.com/sluice-dev/sluice/internal/dataplane/config"
	"github.com/sluice-dev/sluice/internal/dataplane/decide"
	"github.com/sluice-dev/sluice/internal/dataplane/metrics"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/limiter/lease"
	"github.com/sluice-dev/sluice/internal/limiter/redisstore"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/rls"
	"github.com/sluice-dev/sluice/internal/testutil/redisserver"
)

const (
	ok   = rlsv3.RateLimitResponse_OK
	over = rlsv3.RateLimitResponse_OVER_LIMIT
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// descRule is a descriptor rule of limit per minute matching entries (key=value, or key alone
// when value is empty), keyed on keyed.
func descRule(name, alg string, limit int64, entries [][2]string, keyed ...string) policy.Rule {
	r := policy.Rule{Name: name, Algorithm: alg, Limit: limit, WindowMs: 60_000, Cost: 1, Mode: policy.Enforce,
		Match: &policy.Match{}}
	if alg == "TokenBucket" {
		r.Burst = limit
	}
	for _, e := range entries {
		r.Match.Descriptors = append(r.Match.Descriptors, policy.DescriptorEntry{Key: e[0], Value: e[1]})
	}
	for _, k := range keyed {
		r.Key = append(r.Key, policy.KeyPart{Source: policy.SourceDescriptor, Name: k})
	}
	return r
}

// domainPolicy serves domain edge with rules, for the RLS replicas named pods.
func domainPolicy(name string, mode policy.FailureMode, pods []string, rules ...policy.Rule) policy.Policy {
	return policy.Policy{Name: name, Domain: "edge", Replicas: int32(len(pods)), Pods: pods, FailureMode: mode,
		Response: policy.Response{StatusCode: 429, Headers: policy.HeadersBoth}, Rules: rules}
}

type env struct {
	// leases makes the replicas lease the rules that have a lease, as cmd/ratelimit does.
	leases bool
	lease  *lease.Engine
	clk    *clocktesting.FakeClock
	redis  *redisserver.TestServer
	file   string
	m      *metrics.Metrics
	loader *config.Loader
	client rlsv3.RateLimitServiceClient
}

// replica starts one RLS server named podName on loopback, deciding with the store of shared
// (Redis, explicit time) and a local store of its own, its policies read from e.file.
func (e *env) replica(t *testing.T, podName string, remote decide.Store) *env {
	t.Helper()
	r := &env{clk: e.clk, redis: e.redis, file: e.file, m: metrics.New(), leases: e.leases}
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	r.loader = config.NewLoader(e.file, "", nil, r.m, log)
	r.loader.Domains, r.loader.PodName = true, podName
	if err := r.loader.Load(); err != nil {
		t.Fatal(err)
	}
	do := decide.Options{Remote: remote, Local: limiter.NewMemoryStore(limiter.MemoryStoreOptions{}), Metrics: r.m,
		Breaker: breaker.New(breaker.Options{Cooldown: time.Hour, MaxCooldown: time.Hour}), Log: log, Clock: e.clk}
	if e.leases {
		r.lease = lease.New(remote.(lease.Store), lease.Options{})
		do.Leases = r.lease
	}
	d := decide.New(do)
	srv := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(srv, rls.New(rls.Options{Config: r.loader.Current, Decider: d, Metrics: r.m, Clock: e.clk}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	r.client = rlsv3.NewRateLimitServiceClient(conn)
	return r
}

// start writes policies to a file, starts redis-server and returns the shared store.
func start(t *testing.T, policies ...policy.Policy) (*env, decide.Store) {
	t.Helper()
	e := &env{clk: clocktesting.NewFakeClock(t0), file: filepath.Join(t.TempDir(), policy.DataKey)}
	e.write(t, policies...)
	e.redis = redisserver.StartTest(t)
	client, err := redisstore.NewClientFromURL(e.redis.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	store := redisstore.New(client, redisstore.Options{Timeout: time.Second, ExplicitTime: true})
	t.Cleanup(func() { _ = store.Close() })
	return e, store
}

func (e *env) write(t *testing.T, policies ...policy.Policy) {
	t.Helper()
	b, err := policy.Marshal(&policy.Document{Version: policy.Version, Namespace: "sluice-system", Policies: policies})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := policy.Parse(b); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.file, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// desc is a descriptor of key=value pairs, with a descriptor-level hits_addend when hits > 0.
func desc(hits uint64, kv ...string) *rlsv3common.RateLimitDescriptor {
	d := &rlsv3common.RateLimitDescriptor{}
	for i := 0; i < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlsv3common.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	if hits > 0 {
		d.HitsAddend = wrapperspb.UInt64(hits)
	}
	return d
}

func (e *env) ask(t *testing.T, domain string, hits uint32, descs ...*rlsv3common.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	t.Helper()
	resp, err := e.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: domain, HitsAddend: hits, Descriptors: descs})
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	if len(resp.GetStatuses()) != len(descs) {
		t.Fatalf("%d statuses for %d descriptors", len(resp.GetStatuses()), len(descs))
	}
	return resp
}

func header(resp *rlsv3.RateLimitResponse, name string) (string, bool) {
	for _, h := range resp.GetResponseHeadersToAdd() {
		if h.GetKey() == name {
			return h.GetValue(), true
		}
	}
	return "", false
}

func policies() []policy.Policy {
	return []policy.Policy{domainPolicy("shop", policy.FailureLocal, []string{"rls-a", "rls-b"},
		descRule("checkout", "FixedWindow", 3, [][2]string{{"generic_key", "checkout"}}, "generic_key"),
		descRule("per-ip", "TokenBucket", 2, [][2]string{{"generic_key", "api"}, {"remote_address", ""}}, "remote_address"),
		func() policy.Rule {
			r := descRule("shadowed", "FixedWindow", 1, [][2]string{{"generic_key", "shadowed"}}, "generic_key")
			r.Mode = policy.Shadow
			return r
		}(),
		descRule("by-path", "FixedWindow", 1, [][2]string{{"path", "/v1/*"}}, "path"),
	)}
}

// TestSemantics drives every documented semantic through the generated gRPC client against
// redis-server, with exact counts.
func TestSemantics(t *testing.T) {
	e, store := start(t, policies()...)
	s := e.replica(t, "rls-a", store)
	checkout := desc(0, "generic_key", "checkout")

	for i, want := range []uint32{2, 1, 0} {
		resp := s.ask(t, "edge", 0, checkout)
		st := resp.Statuses[0]
		if resp.OverallCode != ok || st.Code != ok || st.LimitRemaining != want {
			t.Fatalf("checkout %d: %v %v remaining %d, want OK with %d", i+1, resp.OverallCode, st.Code, st.LimitRemaining, want)
		}
		cl := st.CurrentLimit
		if cl.GetRequestsPerUnit() != 3 || cl.GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE || cl.GetUnitMultiplier() != nil || cl.GetName() != "shop/checkout" {
			t.Fatalf("current_limit %v", cl)
		}
		if got := st.DurationUntilReset.AsDuration(); got != time.Minute {
			t.Fatalf("duration_until_reset %s, want 1m (a fixed window at its start)", got)
		}
		if _, has := header(resp, "Retry-After"); has {
			t.Fatal("Retry-After on an admitted request")
		}
		if v, _ := header(resp, "X-Ratelimit-Remaining"); v != string(rune('0'+want)) {
			t.Fatalf("X-Ratelimit-Remaining %q, want %d", v, want)
		}
	}
	e.clk.Step(20 * time.Second)
	resp := s.ask(t, "edge", 0, checkout)
	if resp.OverallCode != over || resp.Statuses[0].Code != over || resp.Statuses[0].LimitRemaining != 0 ||
		resp.Statuses[0].DurationUntilReset.AsDuration() != 40*time.Second {
		t.Fatalf("the 4th checkout: %v", resp)
	}
	if v, _ := header(resp, "Retry-After"); v != "40" {
		t.Fatalf("Retry-After %q, want 40", v)
	}
	if v, _ := header(resp, "Ratelimit"); v != `"checkout";r=0;t=40` {
		t.Fatalf("RateLimit %q", v)
	}

	// Unmatched descriptors and other domains: OK and unlimited.
	for _, resp := range []*rlsv3.RateLimitResponse{
		s.ask(t, "edge", 0, desc(0, "generic_key", "other")),
		s.ask(t, "edge", 0, desc(0, "generic_key", "api")),                               // per-ip needs two entries
		s.ask(t, "edge", 0, desc(0, "remote_address", "10.0.0.1", "generic_key", "api")), // the order is the path
		s.ask(t, "elsewhere", 0, checkout),
	} {
		if resp.OverallCode != ok || resp.Statuses[0].Code != ok || resp.Statuses[0].CurrentLimit != nil || len(resp.ResponseHeadersToAdd) != 0 {
			t.Fatalf("unmatched: %v", resp)
		}
	}

	// hits_addend is the cost: the request's, overridden by the descriptor's.
	ip := func(a string, hits uint64) *rlsv3common.RateLimitDescriptor {
		return desc(hits, "generic_key", "api", "remote_address", a)
	}
	if resp := s.ask(t, "edge", 2, ip("10.0.0.1", 0)); resp.OverallCode != ok || resp.Statuses[0].LimitRemaining != 0 {
		t.Fatalf("hits_addend 2 of 2: %v", resp)
	}
	if resp := s.ask(t, "edge", 0, ip("10.0.0.1", 0)); resp.OverallCode != over {
		t.Fatalf("a third token: %v", resp)
	}
	if resp := s.ask(t, "edge", 5, ip("10.0.0.2", 1)); resp.OverallCode != ok || resp.Statuses[0].LimitRemaining != 1 {
		t.Fatalf("the descriptor's hits_addend 1 must override the request's 5: %v", resp)
	}
	if resp := s.ask(t, "edge", 0, ip("10.0.0.3", 3)); resp.OverallCode != over {
		t.Fatalf("a cost above the burst: %v", resp)
	}

	// Over when any descriptor is; nothing charged then (all or nothing).
	// The descriptor that had room tells the state the request left it in: uncharged, 2 of 2.
	resp = s.ask(t, "edge", 0, ip("10.0.0.4", 0), checkout, desc(0, "generic_key", "other"))
	if resp.OverallCode != over || resp.Statuses[0].Code != ok || resp.Statuses[1].Code != over || resp.Statuses[2].Code != ok || resp.Statuses[2].CurrentLimit != nil {
		t.Fatalf("one descriptor over: %v", resp)
	}
	if got := resp.Statuses[0].LimitRemaining; got != 2 {
		t.Fatalf("one descriptor over: the other reports %d remaining, want 2 (it was not charged)", got)
	}
	if resp := s.ask(t, "edge", 2, ip("10.0.0.4", 0)); resp.OverallCode != ok || resp.Statuses[0].LimitRemaining != 0 {
		t.Fatalf("10.0.0.4 was charged by a request another descriptor denied: %v", resp)
	}

	// A wildcard value matches the values it prefixes, each counted apart (the rule keys on
	// the entry); a value it does not prefix is unlimited.
	for _, path := range []string{"/v1/", "/v1/users", "/v1/orders"} {
		if resp := s.ask(t, "edge", 0, desc(0, "path", path)); resp.OverallCode != ok || resp.Statuses[0].CurrentLimit == nil {
			t.Fatalf("%s, first: %v, want OK under by-path", path, resp)
		}
		if resp := s.ask(t, "edge", 0, desc(0, "path", path)); resp.OverallCode != over {
			t.Fatalf("%s, second: %v, want OVER_LIMIT (1 a minute)", path, resp)
		}
	}
	for _, path := range []string{"/v2/users", "/v1", "v1/x"} {
		if resp := s.ask(t, "edge", 0, desc(0, "path", path)); resp.OverallCode != ok || resp.Statuses[0].CurrentLimit != nil {
			t.Fatalf("%s: %v, want no rule matched", path, resp)
		}
	}

	// A descriptor's own hits_addend of 0 checks without charging: OK while one more hit
	// would pass, with the remaining it leaves (all of it), OVER_LIMIT once none would.
	check := func(a string) *rlsv3common.RateLimitDescriptor {
		d := ip(a, 0)
		d.HitsAddend = wrapperspb.UInt64(0)
		return d
	}
	for i := range 3 {
		if resp := s.ask(t, "edge", 5, check("10.0.0.5")); resp.OverallCode != ok || resp.Statuses[0].LimitRemaining != 2 {
			t.Fatalf("check %d of an unused key: %v, want OK with 2 remaining", i+1, resp)
		}
	}
	if resp := s.ask(t, "edge", 2, ip("10.0.0.5", 0)); resp.OverallCode != ok || resp.Statuses[0].LimitRemaining != 0 {
		t.Fatalf("2 of 2 after the checks: %v (a check charged)", resp)
	}
	if resp := s.ask(t, "edge", 0, check("10.0.0.5")); resp.OverallCode != over || resp.Statuses[0].LimitRemaining != 0 || resp.Statuses[0].DurationUntilReset == nil {
		t.Fatalf("a check of a spent key: %v, want OVER_LIMIT with a reset", resp)
	}

	// Shadow answers OK and counts its would-be denials.
	for range 3 {
		if resp := s.ask(t, "edge", 0, desc(0, "generic_key", "shadowed")); resp.OverallCode != ok || resp.Statuses[0].Code != ok {
			t.Fatalf("shadow: %v", resp)
		}
	}
	sh := s.m.ForRule("shop", "shadowed")
	if a, d := sh.Allowed.Value(), sh.ShadowDenied.Value(); a != 1 || d != 2 {
		t.Fatalf("shadow counted %v allowed, %v shadow_denied; want 1 and 2", a, d)
	}
	ck := s.m.ForRule("shop", "checkout")
	if a, d, nc := ck.Allowed.Value(), ck.Denied.Value(), ck.NotCharged.Value(); a != 3 || d != 2 || nc != 0 {
		t.Fatalf("checkout counted %v allowed, %v denied, %v not charged; want 3, 2, 0", a, d, nc)
	}
}

// TestOutage: with Redis killed each replica decides on its share (limit 5 over rls-a and
// rls-b: 3 and 2), with no error to Envoy; Open answers OK; Closed fails the call.
func TestOutage(t *testing.T) {
	pods := []string{"rls-a", "rls-b"}
	open := domainPolicy("open", policy.FailureOpen, pods, descRule("o", "FixedWindow", 1, [][2]string{{"generic_key", "open"}}))
	closed := domainPolicy("closed", policy.FailureClosed, pods, descRule("c", "FixedWindow", 1, [][2]string{{"generic_key", "closed"}}))
	local := domainPolicy("local", policy.FailureLocal, pods, descRule("l", "FixedWindow", 5, [][2]string{{"generic_key", "local"}}))
	for _, r := range []*policy.Rule{&open.Rules[0], &closed.Rules[0], &local.Rules[0]} {
		r.Key = []policy.KeyPart{{Source: policy.SourceDescriptor, Name: "generic_key"}}
	}
	e, store := start(t, open, closed, local)
	a, b := e.replica(t, "rls-a", store), e.replica(t, "rls-b", store)
	e.redis.Kill()
	for _, tc := range []struct {
		s    *env
		want int
	}{{a, 3}, {b, 2}} {
		admitted := 0
		for range 10 {
			if resp := tc.s.ask(t, "edge", 0, desc(0, "generic_key", "local")); resp.OverallCode == ok {
				admitted++
			}
		}
		if admitted != tc.want {
			t.Fatalf("%s admitted %d of 10 on its share, want %d", tc.s.loader.PodName, admitted, tc.want)
		}
	}
	for range 3 {
		if resp := a.ask(t, "edge", 0, desc(0, "generic_key", "open")); resp.OverallCode != ok {
			t.Fatalf("Open while Redis is down: %v", resp)
		}
	}
	_, err := a.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlsv3common.RateLimitDescriptor{desc(0, "generic_key", "closed")}})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("Closed while Redis is down: %v, want Unavailable", err)
	}
	if got := a.m.ForPolicy("local").Local.Value(); got != 10 {
		t.Fatalf("%v local fallback decisions, want 10", got)
	}
}

// TestReload: a new policies.json takes effect in a running server.
func TestReload(t *testing.T) {
	e, store := start(t, policies()...)
	s := e.replica(t, "rls-a", store)
	checkout := desc(0, "generic_key", "checkout")
	if resp := s.ask(t, "edge", 0, checkout); resp.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 3 {
		t.Fatalf("before: %v", resp)
	}
	ps := policies()
	ps[0].Rules[0].Limit = 1
	e.write(t, ps...)
	if err := s.loader.Load(); err != nil {
		t.Fatal(err)
	}
	resp := s.ask(t, "edge", 0, checkout)
	if resp.OverallCode != over || resp.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 1 {
		t.Fatalf("after the reload, the 2nd checkout of limit 1: %v", resp)
	}
}
