package policy

import (
	"strings"
	"testing"
)

func validDoc() *Document {
	return &Document{Version: Version, Namespace: "shop", Policies: []Policy{{
		Name:        "api",
		Selector:    &LabelSelector{MatchLabels: map[string]string{"app": "web"}},
		FailureMode: "Local",
		Response:    Response{StatusCode: 429, Headers: "Both"},
		Rules: []Rule{{Name: "r", Key: []KeyPart{{Source: SourceClientIP}}, Algorithm: "TokenBucket",
			Limit: 10, WindowMs: 1000, Burst: 10, Cost: 1, Mode: "Enforce"}},
	}}}
}

// TestParseRejectsWhatReadersCannotUse: the sidecar keeps its last good config when Parse
// fails, so every way a document can be unusable must fail here, with a message saying where.
func TestParseRejectsWhatReadersCannotUse(t *testing.T) {
	tests := map[string]struct {
		mutate func(*Document)
		want   string
	}{
		"another version":    {func(d *Document) { d.Version = 2 }, "version 2"},
		"bad failure mode":   {func(d *Document) { d.Policies[0].FailureMode = "Maybe" }, "failureMode"},
		"bad status code":    {func(d *Document) { d.Policies[0].Response.StatusCode = 200 }, "statusCode 200"},
		"bad header style":   {func(d *Document) { d.Policies[0].Response.Headers = "Fancy" }, "response.headers"},
		"bad trusted proxy":  {func(d *Document) { d.Policies[0].TrustedProxies = []string{"10.0.0.1"} }, "trustedProxies"},
		"no rules":           {func(d *Document) { d.Policies[0].Rules = nil }, "no rules"},
		"window not exact":   {func(d *Document) { d.Policies[0].Rules[0].WindowMs = 0 }, "window"},
		"limit above bound":  {func(d *Document) { d.Policies[0].Rules[0].Limit = 100_000_001 }, "limit"},
		"cost above burst":   {func(d *Document) { d.Policies[0].Rules[0].Cost = 11 }, "cost 11"},
		"unknown key source": {func(d *Document) { d.Policies[0].Rules[0].Key[0].Source = "cookie" }, "cookie"},
		"header key unnamed": {func(d *Document) { d.Policies[0].Rules[0].Key[0].Source = SourceHeader }, "without a name"},
		"bad mode":           {func(d *Document) { d.Policies[0].Rules[0].Mode = "Loud" }, "mode"},
		"adaptive min above limit": {func(d *Document) {
			d.Policies[0].Rules = append(d.Policies[0].Rules, Rule{Name: "app", Algorithm: "Concurrency", Limit: 4, WindowMs: 30000, Cost: 1, Mode: Enforce, Adaptive: &Adaptive{MinLimit: 5, TolerancePct: 125}})
		}, "minLimit 5 <= limit 4"},
		"adaptive tolerance below 100": {func(d *Document) {
			d.Policies[0].Rules = append(d.Policies[0].Rules, Rule{Name: "app", Algorithm: "Concurrency", Limit: 4, WindowMs: 30000, Cost: 1, Mode: Enforce, Adaptive: &Adaptive{MinLimit: 1, TolerancePct: 99}})
		}, "tolerancePct 99"},
		"adaptive with a key": {func(d *Document) {
			d.Policies[0].Rules = append(d.Policies[0].Rules, Rule{Name: "app", Algorithm: "Concurrency", Limit: 4, WindowMs: 30000, Cost: 1, Mode: Enforce, Key: []KeyPart{{Source: SourceClientIP}}, Adaptive: &Adaptive{MinLimit: 1, TolerancePct: 125}})
		}, "no key parts"},
		"adaptive on a window": {func(d *Document) { d.Policies[0].Rules[0].Adaptive = &Adaptive{MinLimit: 1, TolerancePct: 125} }, "adaptive applies only to algorithm Concurrency"},
		"lease age zero":       {func(d *Document) { d.Policies[0].Rules[0].Lease = &Lease{} }, "lease.maxAgeMs 0"},
		"lease age too long":   {func(d *Document) { d.Policies[0].Rules[0].Lease = &Lease{MaxAgeMs: 10_001} }, "lease.maxAgeMs 10001"},
		"lease above burst":    {func(d *Document) { d.Policies[0].Rules[0].Lease = &Lease{MaxAgeMs: 100, MaxUnits: 11} }, "lease.maxUnits 11"},
		"lease on a log": {func(d *Document) {
			d.Policies[0].Rules[0].Algorithm, d.Policies[0].Rules[0].Burst = "SlidingWindowLog", 0
			d.Policies[0].Rules[0].Lease = &Lease{MaxAgeMs: 100}
		}, "lease: leases do not apply to SlidingWindowLog"},
		"countWhen on a descriptor rule": {func(d *Document) {
			p := &d.Policies[0]
			p.Domain = "edge"
			p.Rules[0].Match = &Match{Descriptors: []DescriptorEntry{{Key: "remote_address"}}}
			p.Rules[0].Key = []KeyPart{{Source: SourceDescriptor, Name: "remote_address"}}
			p.Rules[0].CountWhen = []StatusRange{{Lo: 401, Hi: 401}}
		}, "matches descriptors and has countWhen"},
		"responseCost with neither source": {func(d *Document) { d.Policies[0].Rules[0].ResponseCost = &ResponseCost{} }, "exactly one of header and jsonField"},
		"responseCost with both sources": {func(d *Document) {
			d.Policies[0].Rules[0].ResponseCost = &ResponseCost{Header: "X-Usage", JSONField: "usage"}
		}, "exactly one of header and jsonField"},
		"responseCost on an empty key": {func(d *Document) {
			d.Policies[0].Rules[0].ResponseCost = &ResponseCost{JSONField: "usage..total"}
		}, "not a dotted path"},
		"responseCost on a log": {func(d *Document) {
			d.Policies[0].Rules[0].Algorithm, d.Policies[0].Rules[0].Burst = "SlidingWindowLog", 0
			d.Policies[0].Rules[0].ResponseCost = &ResponseCost{Header: "X-Usage"}
		}, "responseCost applies only to FixedWindow and TokenBucket"},
		"responseCost with countWhen": {func(d *Document) {
			d.Policies[0].Rules[0].ResponseCost = &ResponseCost{Header: "X-Usage"}
			d.Policies[0].Rules[0].CountWhen = []StatusRange{{Lo: 200, Hi: 299}}
		}, "responseCost and countWhen"},
		"responseCost with a lease": {func(d *Document) {
			d.Policies[0].Rules[0].ResponseCost = &ResponseCost{Header: "X-Usage"}
			d.Policies[0].Rules[0].Lease = &Lease{MaxAgeMs: 100}
		}, "responseCost and lease"},
		"responseCost on a descriptor rule": {func(d *Document) {
			p := &d.Policies[0]
			p.Domain = "edge"
			p.Rules[0].Match = &Match{Descriptors: []DescriptorEntry{{Key: "remote_address"}}}
			p.Rules[0].Key = []KeyPart{{Source: SourceDescriptor, Name: "remote_address"}}
			p.Rules[0].ResponseCost = &ResponseCost{JSONField: "usage.total_tokens"}
		}, "matches descriptors and has responseCost"},
		"pods unsorted":   {func(d *Document) { d.Policies[0].Replicas, d.Policies[0].Pods = 2, []string{"b", "a"} }, "not sorted"},
		"pods twice":      {func(d *Document) { d.Policies[0].Replicas, d.Policies[0].Pods = 2, []string{"a", "a"} }, "not sorted"},
		"pods miscounted": {func(d *Document) { d.Policies[0].Replicas, d.Policies[0].Pods = 3, []string{"a", "b"} }, "replicas 3"},
		"bad selector": {func(d *Document) {
			d.Policies[0].Selector.MatchExpressions = []LabelSelectorRequirement{{Key: "app", Operator: "Near"}}
		}, "selector"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			d := validDoc()
			tc.mutate(d)
			data, err := Marshal(d)
			if err != nil {
				t.Fatal(err)
			}
			_, err = Parse(data)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse error %v, want one mentioning %q", err, tc.want)
			}
		})
	}
	for _, garbage := range []string{"", "{", "null x", `{"version":1,"policies":"no"}`} {
		if _, err := Parse([]byte(garbage)); err == nil {
			t.Errorf("Parse(%q) succeeded", garbage)
		}
	}
}

// TestTenantsValidation: a table whose entry a reader could not use fails Parse, naming the
// entry; a valid one parses.
func TestTenantsValidation(t *testing.T) {
	table := func(limits ...TenantLimit) func(*Rule) {
		return func(r *Rule) { r.Tenants = &Tenants{Limits: limits} }
	}
	tests := map[string]struct {
		mutate func(*Rule)
		want   string
	}{
		"valid":               {table(TenantLimit{Value: "a", Limit: 5, Burst: 2}, TenantLimit{Value: "b", Limit: 0}), ""},
		"part out of range":   {func(r *Rule) { r.Tenants = &Tenants{Part: 1} }, "tenants.part 1"},
		"unsorted":            {table(TenantLimit{Value: "b", Limit: 5, Burst: 5}, TenantLimit{Value: "a", Limit: 5, Burst: 5}), "not sorted"},
		"repeated":            {table(TenantLimit{Value: "a", Limit: 5, Burst: 5}, TenantLimit{Value: "a", Limit: 6, Burst: 6}), "not sorted and distinct"},
		"empty value":         {table(TenantLimit{Value: "", Limit: 5, Burst: 5}), "empty value"},
		"a bucket sans burst": {table(TenantLimit{Value: "a", Limit: 5}), "burst 0 is below 1"},
		"blocked with burst":  {table(TenantLimit{Value: "a", Limit: 0, Burst: 3}), "burst does not apply"},
		"above the bound":     {table(TenantLimit{Value: "a", Limit: 100_000_001, Burst: 1}), "limit 100000001"},
		"below the cost": {func(r *Rule) {
			r.Cost = 3
			table(TenantLimit{Value: "a", Limit: 5, Burst: 2})(r)
		}, "cost 3 is above the tenant's capacity 2"},
		"burst on a window": {func(r *Rule) {
			r.Algorithm, r.Burst = "FixedWindow", 0
			table(TenantLimit{Value: "a", Limit: 5, Burst: 2})(r)
		}, "burst applies only"},
		"log above its bound": {func(r *Rule) {
			r.Algorithm, r.Burst = "SlidingWindowLog", 0
			table(TenantLimit{Value: "a", Limit: 10_001})(r)
		}, "SlidingWindowLog"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			d := validDoc()
			tc.mutate(&d.Policies[0].Rules[0])
			b, err := Marshal(d)
			if err != nil {
				t.Fatal(err)
			}
			_, err = Parse(b)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("valid table rejected: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}
