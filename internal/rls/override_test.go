package rls_test

import (
	"testing"
	"time"

	rlsv3common "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-dev/sluice/internal/policy"
)

// limited is a descriptor tenant=value with a limit override of rpu per multiplier units
// (multiplier 0: unset).
func limited(value string, rpu uint32, unit typev3.RateLimitUnit, multiplier uint32) *rlsv3common.RateLimitDescriptor {
	d := desc(0, "tenant", value)
	d.Limit = &rlsv3common.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: unit}
	if multiplier > 0 {
		d.Limit.UnitMultiplier = wrapperspb.UInt32(multiplier)
	}
	return d
}

// admitted asks for d until the answer is OVER_LIMIT (at most max+1 times) and returns how many
// were OK, with the last OK's status.
func admitted(t *testing.T, s *env, d *rlsv3common.RateLimitDescriptor, max int) (int, *rlsv3.RateLimitResponse_DescriptorStatus) {
	t.Helper()
	var last *rlsv3.RateLimitResponse_DescriptorStatus
	for i := range max + 1 {
		resp := s.ask(t, "edge", 0, d)
		if resp.OverallCode == over {
			return i, last
		}
		last = resp.Statuses[0]
	}
	return max + 1, last
}

// overridePolicy serves domain edge with a FixedWindow of 100 a minute per tenant (a
// descriptor [tenant]), whose table gives acme 50, for the RLS replicas pods.
func overridePolicy(pods ...string) policy.Policy {
	r := descRule("per-tenant", "FixedWindow", 100, [][2]string{{"tenant", ""}}, "tenant")
	r.Tenants = &policy.Tenants{Limits: []policy.TenantLimit{{Value: "acme", Limit: 50}}}
	return domainPolicy("shop", policy.FailureLocal, pods, r)
}

// TestDescriptorLimitOverride drives RateLimitDescriptor.limit through the gRPC server against
// redis-server: an override is the rule at requests_per_unit per its unit, counted apart from
// the rule's own window when its unit differs (envoyproxy/ratelimit keys an override's counter
// by its unit) and on the same counter when it does not, where the count is kept and compared
// to the override (the arithmetic of a limit changed mid-window); it takes precedence over the
// tenant table; an override no rule can take leaves the rule's own limit, counted.
func TestDescriptorLimitOverride(t *testing.T) {
	e, store := start(t, overridePolicy("rls-a"))
	s := e.replica(t, "rls-a", store)

	// 3 per 2 seconds: 3 OK, then OVER until the 2-second window ends; reported as such.
	perTwo := limited("x", 3, typev3.RateLimitUnit_SECOND, 2)
	n, st := admitted(t, s, perTwo, 3)
	cl := st.GetCurrentLimit()
	if n != 3 || cl.GetRequestsPerUnit() != 3 || cl.GetUnit() != rlsv3.RateLimitResponse_RateLimit_SECOND || cl.GetUnitMultiplier().GetValue() != 2 {
		t.Fatalf("3 per 2 s: %d admitted, current_limit %v", n, cl)
	}
	e.clk.Step(2 * time.Second)
	if n, _ := admitted(t, s, perTwo, 3); n != 3 {
		t.Fatalf("the next 2-second window: %d admitted, want 3", n)
	}
	// The rule's own minute counts apart: none of those 6 hits is in it.
	if resp := s.ask(t, "edge", 0, desc(0, "tenant", "x")); resp.OverallCode != ok || resp.Statuses[0].LimitRemaining != 99 {
		t.Fatalf("the rule's own limit after 6 overridden hits: %v", resp)
	}

	// 5 a minute is the rule's window: one counter, 3 used of it, so 2 more.
	for range 3 {
		s.ask(t, "edge", 0, desc(0, "tenant", "y"))
	}
	if n, st := admitted(t, s, limited("y", 5, typev3.RateLimitUnit_MINUTE, 0), 5); n != 2 || st.GetCurrentLimit().GetRequestsPerUnit() != 5 {
		t.Fatalf("5 a minute after 3 of 100 used: %d admitted (%v), want 2", n, st)
	}
	if resp := s.ask(t, "edge", 0, desc(0, "tenant", "y")); resp.OverallCode != ok || resp.Statuses[0].LimitRemaining != 100-6 {
		t.Fatalf("y back on its own 100: %v", resp)
	}

	// The override wins over acme's entry in the table (50).
	if n, _ := admitted(t, s, limited("acme", 2, typev3.RateLimitUnit_MINUTE, 0), 50); n != 2 {
		t.Fatalf("acme with an override of 2: %d admitted", n)
	}
	if resp := s.ask(t, "edge", 0, desc(0, "tenant", "acme")); resp.Statuses[0].GetCurrentLimit().GetRequestsPerUnit() != 50 || resp.Statuses[0].LimitRemaining != 50-3 {
		t.Fatalf("acme without an override gets its table's 50: %v", resp)
	}

	// 0 requests per unit denies, with no time until a reset.
	if resp := s.ask(t, "edge", 0, limited("z", 0, typev3.RateLimitUnit_SECOND, 0)); resp.OverallCode != over || resp.Statuses[0].DurationUntilReset != nil {
		t.Fatalf("an override of 0: %v", resp)
	}

	// A calendar month, for a FixedWindow.
	if resp := s.ask(t, "edge", 0, limited("m", 1000, typev3.RateLimitUnit_MONTH, 0)); resp.OverallCode != ok ||
		resp.Statuses[0].GetCurrentLimit().GetUnit() != rlsv3.RateLimitResponse_RateLimit_MONTH || resp.Statuses[0].LimitRemaining != 999 {
		t.Fatalf("1000 a month: %v", resp)
	}

	// Units no rule takes: the rule's own limit applies, and the override counts as ignored.
	for _, d := range []*rlsv3common.RateLimitDescriptor{
		limited("w", 1, typev3.RateLimitUnit_YEAR, 0), limited("w", 1, typev3.RateLimitUnit_UNKNOWN, 0),
		limited("w", 1, typev3.RateLimitUnit_DAY, 2), limited("w", 1, typev3.RateLimitUnit_MONTH, 2),
	} {
		if resp := s.ask(t, "edge", 0, d); resp.OverallCode != ok || resp.Statuses[0].GetCurrentLimit().GetRequestsPerUnit() != 100 {
			t.Fatalf("override %v: %v, want the rule's own 100 a minute", d.Limit, resp)
		}
	}
	// ... and a tenant's own limit from the table, when it has one.
	if resp := s.ask(t, "edge", 0, limited("acme", 1, typev3.RateLimitUnit_YEAR, 0)); resp.Statuses[0].GetCurrentLimit().GetRequestsPerUnit() != 50 {
		t.Fatalf("acme with an override of a year: %v, want its table's 50", resp)
	}
	if got := s.m.LimitOverride("shop", "per-tenant", false).Value(); got != 5 {
		t.Fatalf("%v overrides counted ignored, want 5", got)
	}
}

// TestDescriptorLimitOverrideShares: while Redis cannot decide, the replicas' shares of an
// override sum to it exactly, by rank: 5 a minute over rls-a and rls-b is 3 and 2.
func TestDescriptorLimitOverrideShares(t *testing.T) {
	e, store := start(t, overridePolicy("rls-a", "rls-b"))
	a, b := e.replica(t, "rls-a", store), e.replica(t, "rls-b", store)
	e.redis.Kill()
	for _, tc := range []struct {
		s    *env
		want int
	}{{a, 3}, {b, 2}} {
		if n, _ := admitted(t, tc.s, limited("x", 5, typev3.RateLimitUnit_MINUTE, 0), 10); n != tc.want {
			t.Fatalf("%s admitted %d on its share of 5, want %d", tc.s.loader.PodName, n, tc.want)
		}
	}
}
