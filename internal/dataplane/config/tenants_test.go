package config

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/dataplane/keys"
	"github.com/sluice-dev/sluice/internal/dataplane/metrics"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/policy"
	st "github.com/sluice-dev/sluice/internal/testutil/sidecartest"
)

// tenantDoc is a policy of one rule keyed by X-Tenant (and client IP) with a table, over pods.
func tenantDoc(t *testing.T, alg string, pods []string, limits ...policy.TenantLimit) *policy.Document {
	t.Helper()
	doc, err := policy.Parse(st.Doc(t, st.Policy("api", []policy.Rule{st.Rule("per-tenant", 100, time.Minute, func(r *policy.Rule) {
		r.Key = []policy.KeyPart{{Source: policy.SourceClientIP}, {Source: policy.SourceHeader, Name: "X-Tenant"}}
		r.Algorithm = alg
		if alg != "TokenBucket" && alg != "LeakyBucket" {
			r.Burst = 0
		}
		r.Tenants = &policy.Tenants{Part: 1, Limits: limits}
	})}, func(p *policy.Policy) { p.Pods, p.Replicas = pods, int32(len(pods)) })))
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// keyOf is the rule's key of a request from addr with header X-Tenant: tenant (none when "").
func keyOf(r *Rule, addr, tenant string) string {
	h := keys.HTTPHeader{}
	if tenant != "" {
		h["X-Tenant"] = []string{tenant}
	}
	req := keys.Request{Header: h}
	req.SetRemoteAddr(addr + ":1234")
	return string(r.Key.Append(nil, &req))
}

func TestTenantsGiveTheirLimit(t *testing.T) {
	doc := tenantDoc(t, "TokenBucket", []string{"a"},
		policy.TenantLimit{Value: "acme", Limit: 500, Burst: 50},
		policy.TenantLimit{Value: "blocked", Limit: 0},
		policy.TenantLimit{Value: "globex", Limit: 500, Burst: 50},
		policy.TenantLimit{Value: "initech", Limit: 7, Burst: 7})
	c, err := Compile(doc, nil, metrics.New())
	if err != nil {
		t.Fatal(err)
	}
	r := c.Policies[0].Rules[0]
	if r.Tenants() != 4 {
		t.Fatalf("Tenants() = %d", r.Tenants())
	}
	for tenant, want := range map[string]struct {
		limit, burst int64
		blocked      bool
		value        string
	}{
		"acme": {500, 50, false, "50"}, "globex": {500, 50, false, "50"}, "initech": {7, 7, false, "7"},
		"blocked": {1, 0, true, "0"}, "other": {100, 100, false, "100"}, "": {100, 100, false, "100"},
	} {
		v := r.ForKey(keyOf(r, "198.18.0.1", tenant))
		if v.Limit.Limit != want.limit || v.Limit.Burst != want.burst || v.Blocked != want.blocked || v.LimitValue != want.value {
			t.Errorf("tenant %q: limit %+v blocked %v value %s, want %+v", tenant, v.Limit, v.Blocked, v.LimitValue, want)
		}
		if (tenant == "other" || tenant == "") != (v == r) {
			t.Errorf("tenant %q: the rule itself is %v", tenant, v == r)
		}
		if v.Metrics != r.Metrics || v.Name != r.Name || v.Policy != r.Policy {
			t.Errorf("tenant %q: a variant counts and names as its rule", tenant)
		}
	}
	if r.ForKey(keyOf(r, "198.18.0.1", "acme")) != r.ForKey(keyOf(r, "198.18.0.2", "globex")) {
		t.Error("tenants of the same limit and burst do not share their variant")
	}
}

// TestTenantSharesSumToTheirLimit: while Redis cannot decide, the pods' shares of each
// tenant's limit (by rank) sum to that tenant's limit exactly, for every algorithm.
func TestTenantSharesSumToTheirLimit(t *testing.T) {
	for _, alg := range []string{"FixedWindow", "SlidingWindowCounter", "TokenBucket", "LeakyBucket"} {
		for _, n := range []int{1, 2, 3, 7} {
			pods := podNames(n)
			var limits []policy.TenantLimit
			for i, l := range []int64{1, 2, 5, 99, 1000, 12345} {
				e := policy.TenantLimit{Value: fmt.Sprintf("t%d", i), Limit: l}
				if alg == "TokenBucket" || alg == "LeakyBucket" {
					e.Burst = l/2 + 1
				}
				limits = append(limits, e)
			}
			doc := tenantDoc(t, alg, pods, limits...)
			sums := map[string][2]int64{}
			for _, pod := range pods {
				c, err := CompileFor(doc, nil, pod, metrics.New())
				if err != nil {
					t.Fatal(err)
				}
				r := c.Policies[0].Rules[0]
				for _, e := range limits {
					v := r.ForKey(keyOf(r, "198.18.0.1", e.Value))
					s := sums[e.Value]
					if !v.ZeroShare {
						s[0] += v.Local.Limit * int64(time.Minute) / int64(v.Local.Window)
						s[1] += v.Local.Capacity()
					}
					sums[e.Value] = s
				}
			}
			for _, e := range limits {
				capacity := e.Limit
				if e.Burst > 0 {
					capacity = e.Burst
				}
				// A bucket's rate is split among the pods holding part of its capacity; a
				// pod without any holds nothing (ZeroShare).
				if got := sums[e.Value]; got[1] != capacity || (got[0] != e.Limit && e.Limit >= int64(n)) {
					t.Errorf("%s over %d pods, tenant %s (%d, burst %d): shares sum to %d per minute, capacity %d",
						alg, n, e.Value, e.Limit, e.Burst, got[0], got[1])
				}
			}
		}
	}
}

func TestOverrides(t *testing.T) {
	doc, err := policy.Parse(st.Doc(t, st.Policy("edge", []policy.Rule{
		st.Rule("fw", 100, time.Minute, func(r *policy.Rule) {
			r.Algorithm, r.Burst = "FixedWindow", 0
			r.Match = &policy.Match{Descriptors: []policy.DescriptorEntry{{Key: "tenant"}}}
			r.Key = []policy.KeyPart{{Source: policy.SourceDescriptor, Name: "tenant"}}
		}),
		st.Rule("tb", 100, time.Minute, func(r *policy.Rule) {
			r.Match = &policy.Match{Descriptors: []policy.DescriptorEntry{{Key: "tenant"}}}
			r.Key = []policy.KeyPart{{Source: policy.SourceDescriptor, Name: "tenant"}}
			r.Lease = &policy.Lease{MaxAgeMs: 100, MaxUnits: 80}
		}),
	}, func(p *policy.Policy) { p.Domain, p.Selector = "edge", nil })))
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New()
	c, err := CompileDomains(doc, "", m)
	if err != nil {
		t.Fatal(err)
	}
	fw, tb := c.Domains["edge"][0], c.Domains["edge"][1]
	type want struct {
		ok     bool
		lim    limiter.Limit
		leased int64 // the lease's maxUnits, -1 for none
	}
	for name, tc := range map[string]struct {
		rule *Rule
		o    Override
		want want
	}{
		"per second":            {fw, Override{Limit: 10, WindowMs: 1000}, want{true, limiter.Limit{Algorithm: limiter.FixedWindow, Limit: 10, Window: time.Second}, -1}},
		"a bucket's burst":      {tb, Override{Limit: 10, WindowMs: 3_600_000}, want{true, limiter.Limit{Algorithm: limiter.TokenBucket, Limit: 10, Window: time.Hour, Burst: 10}, 10}},
		"blocked":               {fw, Override{Limit: 0, WindowMs: 1000}, want{true, limiter.Limit{Algorithm: limiter.FixedWindow, Limit: 1, Window: time.Second}, -1}},
		"a month, fixed window": {fw, Override{Limit: 1000, Month: true}, want{true, limiter.Limit{Algorithm: limiter.FixedWindow, Limit: 1000, Window: limiter.Month.Nominal(), Period: limiter.Month, Zone: time.UTC}, -1}},
		"a month, a bucket":     {tb, Override{Limit: 1000, Month: true}, want{false, tb.Limit, 80}},
		"beyond a day":          {fw, Override{Limit: 10, WindowMs: 2 * 86_400_000}, want{false, fw.Limit, -1}},
		"no window (UNKNOWN)":   {fw, Override{Limit: 10}, want{false, fw.Limit, -1}},
		"beyond the bounds":     {fw, Override{Limit: limiter.MaxLimit + 1, WindowMs: 1000}, want{false, fw.Limit, -1}},
	} {
		t.Run(name, func(t *testing.T) {
			v, ok := tc.rule.WithOverride(tc.o)
			if ok != tc.want.ok || v.Limit != tc.want.lim {
				t.Errorf("got %v %+v, want %+v", ok, v.Limit, tc.want)
			}
			if !ok && v != tc.rule {
				t.Error("an ignored override did not give the rule itself")
			}
			if v.Lease != nil {
				if got := v.Lease.MaxUnits; got != tc.want.leased {
					t.Errorf("lease maxUnits %d, want %d", got, tc.want.leased)
				}
			} else if tc.want.leased != -1 {
				t.Errorf("no lease, want maxUnits %d", tc.want.leased)
			}
			again, _ := tc.rule.WithOverride(tc.o)
			if ok && again != v {
				t.Error("the same override made another variant")
			}
		})
	}
	if got := m.LimitOverride("edge", "fw", false).Value(); got != 6 {
		t.Errorf("%v ignored overrides of fw counted, want 6 (3 ignored, twice)", got)
	}
}

// TestTenantsOfABlockedRule: a rule of limit 0 with a table admits only the tenants listed, at
// their limits: an allowlist.
func TestTenantsOfABlockedRule(t *testing.T) {
	doc, err := policy.Parse(st.Doc(t, st.Policy("api", []policy.Rule{st.Rule("listed", 0, time.Minute, func(r *policy.Rule) {
		r.Algorithm, r.Burst = "FixedWindow", 0
		r.Key = []policy.KeyPart{{Source: policy.SourceHeader, Name: "X-Tenant"}}
		r.Tenants = &policy.Tenants{Limits: []policy.TenantLimit{{Value: "acme", Limit: 5}}}
	})})))
	if err != nil {
		t.Fatal(err)
	}
	c, err := Compile(doc, nil, metrics.New())
	if err != nil {
		t.Fatal(err)
	}
	r := c.Policies[0].Rules[0]
	key := func(tenant string) string {
		req := keys.Request{Header: keys.HTTPHeader{"X-Tenant": {tenant}}}
		return string(r.Key.Append(nil, &req))
	}
	if v := r.ForKey(key("acme")); v.Blocked || v.Limit.Limit != 5 || v.ZeroShare {
		t.Errorf("acme: %+v blocked %v", v.Limit, v.Blocked)
	}
	if v := r.ForKey(key("other")); !v.Blocked {
		t.Error("a tenant not listed is not blocked")
	}
}
