package policy

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-dev/sluice/api/v1alpha1"
)

func validDoc() *Document {
	return &Document{Version: Version, Namespace: "shop", Policies: []Policy{{
		Name:        "api",
		Selector:    metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
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
		"bad selector": {func(d *Document) {
			d.Policies[0].Selector.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "app", Operator: "Near"}}
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

func TestMarshalIsDeterministicAndRoundTrips(t *testing.T) {
	a, err := Marshal(validDoc())
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Marshal(validDoc())
	if string(a) != string(b) || Hash(a) != Hash(b) || !strings.HasSuffix(string(a), "}\n") {
		t.Fatalf("Marshal is not deterministic:\n%s\n%s", a, b)
	}
	d, err := Parse(a)
	if err != nil {
		t.Fatal(err)
	}
	if c, _ := Marshal(d); string(c) != string(a) {
		t.Fatalf("round trip changed the document:\n%s\n%s", a, c)
	}
	if got := d.Policies[0].Rules[0].LimiterLimit(); got.Window != time.Second || got.Capacity() != 10 {
		t.Fatalf("LimiterLimit = %+v", got)
	}
	if !d.Policies[0].Selects(map[string]string{"app": "web", "x": "y"}) || d.Policies[0].Selects(map[string]string{"app": "db"}) {
		t.Fatal("Selects disagrees with the selector")
	}
}

func TestCompileAppliesDefaultsAndNormalises(t *testing.T) {
	p := &v1alpha1.RateLimitPolicy{}
	p.Name = "p"
	p.Spec.Rules = []v1alpha1.Rule{
		{Name: "z", Key: []v1alpha1.KeyPart{{Header: &v1alpha1.HeaderKey{Name: "x-api-key"}}}, Algorithm: v1alpha1.LeakyBucket, Limit: 5, Window: "1m30s",
			Match: &v1alpha1.RuleMatch{Methods: []v1alpha1.HTTPMethod{"POST", "GET"}, Headers: []v1alpha1.HeaderMatch{{Name: "x-tier", Value: "free"}}}},
		{Name: "a", Key: []v1alpha1.KeyPart{{ClientIP: &v1alpha1.ClientIPKey{}}}, Algorithm: v1alpha1.FixedWindow, Limit: 7, Window: "500ms", CostHeader: "x-cost"},
	}
	got, err := Compile(p)
	if err != nil {
		t.Fatal(err)
	}
	if got.FailureMode != "Local" || got.Response != (Response{429, "Both"}) {
		t.Errorf("policy defaults: %+v", got)
	}
	if got.Rules[0].Name != "a" || got.Rules[1].Name != "z" {
		t.Errorf("rules not sorted by name: %v, %v", got.Rules[0].Name, got.Rules[1].Name)
	}
	a, z := got.Rules[0], got.Rules[1]
	if a.Burst != 0 || a.WindowMs != 500 || a.Cost != 1 || a.Mode != "Enforce" || a.CostHeader != "X-Cost" {
		t.Errorf("rule a: %+v", a)
	}
	if z.Burst != 5 || z.LeakyMode != "Meter" || z.WindowMs != 90_000 || z.Key[0].Name != "X-Api-Key" ||
		strings.Join(z.Match.Methods, ",") != "GET,POST" || z.Match.Headers[0].Name != "X-Tier" {
		t.Errorf("rule z: %+v %+v", z, z.Match)
	}
	p.Spec.Rules[0].Window = "1500us"
	if _, err := Compile(p); err == nil || !strings.Contains(err.Error(), "spec.rules[0] (z): window") {
		t.Errorf("a sub-millisecond window compiled: %v", err)
	}
}

func TestBuildFixedReplicas(t *testing.T) {
	mk := func(name string, sel map[string]string) v1alpha1.RateLimitPolicy {
		p := v1alpha1.RateLimitPolicy{}
		p.Name = name
		p.Spec.PodSelector = metav1.LabelSelector{MatchLabels: sel}
		p.Spec.Rules = []v1alpha1.Rule{{Name: "r", Key: []v1alpha1.KeyPart{{Method: &v1alpha1.MethodKey{}}}, Algorithm: v1alpha1.TokenBucket, Limit: 1, Window: "1s"}}
		return p
	}
	doc, verdicts := Build("ns", []v1alpha1.RateLimitPolicy{mk("b", map[string]string{"app": "x"}), mk("a", map[string]string{"app": "x"}), mk("c", map[string]string{"app": "y"})}, FixedReplicas(3))
	if len(doc.Policies) != 2 || doc.Policies[0].Name != "a" || doc.Policies[1].Name != "c" || doc.Policies[0].Replicas != 3 {
		t.Fatalf("document: %+v", doc.Policies)
	}
	if v := verdicts["b"]; !v.Conflict || !strings.Contains(v.Err.Error(), `policy "a"`) {
		t.Fatalf("b: %+v", v)
	}
}
