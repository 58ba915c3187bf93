package policy

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
