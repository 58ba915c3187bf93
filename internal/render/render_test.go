package render

import (
	"k8s.io/apimachinery/pkg/util/intstr"

	"cmp"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/policy"
)

func TestCompileAppliesDefaultsAndNormalises(t *testing.T) {
	p := &v1alpha1.RateLimitPolicy{}
	p.Name = "p"
	p.Spec.PodSelector = &metav1.LabelSelector{}
	p.Spec.Rules = []v1alpha1.Rule{
		{Name: "z", Key: []v1alpha1.KeyPart{{Header: &v1alpha1.HeaderKey{Name: "x-api-key"}}}, Algorithm: v1alpha1.LeakyBucket, Limit: 5, Window: "1m30s",
			Match: &v1alpha1.RuleMatch{Methods: []v1alpha1.HTTPMethod{"POST", "GET"}, Headers: []v1alpha1.HeaderMatch{{Name: "x-tier", Value: "free"}}}},
		{Name: "a", Key: []v1alpha1.KeyPart{{ClientIP: &v1alpha1.ClientIPKey{}}}, Algorithm: v1alpha1.FixedWindow, Limit: 7, Window: "500ms", CostHeader: "x-cost"},
	}
	got, err := Compile(p)
	if err != nil {
		t.Fatal(err)
	}
	if got.FailureMode != "Local" || got.Response != (policy.Response{StatusCode: 429, Headers: policy.HeadersBoth}) {
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
	p.Spec.Rules[1].Lease = &v1alpha1.LeaseSpec{MaxAge: "1s500ms", MaxUnits: ptr.To[int64](3)}
	if got, err := Compile(p); err != nil || *got.Rules[0].Lease != (policy.Lease{MaxAgeMs: 1500, MaxUnits: 3}) || got.Rules[1].Lease != nil {
		t.Errorf("lease: %v %+v", err, got.Rules)
	}
	p.Spec.Rules[1].Lease = &v1alpha1.LeaseSpec{MaxAge: "100us"}
	if _, err := Compile(p); err == nil || !strings.Contains(err.Error(), "lease.maxAge") {
		t.Errorf("a sub-millisecond lease compiled: %v", err)
	}
	p.Spec.Rules[1].Lease = nil
	p.Spec.Rules[0].Window = "1500us"
	if _, err := Compile(p); err == nil || !strings.Contains(err.Error(), "spec.rules[0] (z): window") {
		t.Errorf("a sub-millisecond window compiled: %v", err)
	}
}

func TestBuildFixedReplicas(t *testing.T) {
	mk := func(name string, sel map[string]string) v1alpha1.RateLimitPolicy {
		p := v1alpha1.RateLimitPolicy{}
		p.Name = name
		p.Spec.PodSelector = &metav1.LabelSelector{MatchLabels: sel}
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

// TestAPIEnumsAreTheFormatsVocabulary: every value the CRD schema admits for failureMode,
// response.headers and a rule's mode compiles into the same value of the format's vocabulary,
// which readers accept, and the format has no value the API cannot express.
func TestAPIEnumsAreTheFormatsVocabulary(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "config", "crd", "bases", "sluice.dev_ratelimitpolicies.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(data, &crd); err != nil {
		t.Fatal(err)
	}
	spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	enum := func(s apiextensionsv1.JSONSchemaProps) []string {
		var out []string
		for _, v := range s.Enum {
			var str string
			if err := json.Unmarshal(v.Raw, &str); err != nil {
				t.Fatal(err)
			}
			out = append(out, str)
		}
		slices.Sort(out)
		return out
	}
	sorted := func(vs ...string) []string { slices.Sort(vs); return vs }
	styles := sorted(string(policy.HeadersDraft), string(policy.HeadersLegacy), string(policy.HeadersBoth), string(policy.HeadersNone),
		string(policy.HeadersDraft7), string(policy.HeadersOpenAI))
	base := func() *v1alpha1.RateLimitPolicy {
		p := &v1alpha1.RateLimitPolicy{}
		p.Name = "p"
		p.Spec.PodSelector = &metav1.LabelSelector{}
		p.Spec.Rules = []v1alpha1.Rule{{Name: "r", Key: []v1alpha1.KeyPart{{Path: &v1alpha1.PathKey{}}}, Algorithm: v1alpha1.FixedWindow, Limit: 1, Window: "1s"}}
		return p
	}
	for _, tc := range []struct {
		field  string
		schema apiextensionsv1.JSONSchemaProps
		format []string
		set    func(*v1alpha1.RateLimitPolicy, string)
		got    func(policy.Policy) string
	}{
		{"failureMode", spec.Properties["failureMode"],
			sorted(string(policy.FailureLocal), string(policy.FailureOpen), string(policy.FailureClosed)),
			func(p *v1alpha1.RateLimitPolicy, v string) { p.Spec.FailureMode = v1alpha1.FailureMode(v) },
			func(p policy.Policy) string { return string(p.FailureMode) }},
		{"response.headers", spec.Properties["response"].Properties["headers"],
			styles,
			func(p *v1alpha1.RateLimitPolicy, v string) {
				p.Spec.Response = &v1alpha1.ResponseSpec{Headers: v1alpha1.HeaderStyle(v)}
			},
			func(p policy.Policy) string { return string(p.Response.Headers) }},
		{"rules[].headers", spec.Properties["rules"].Items.Schema.Properties["headers"],
			styles,
			func(p *v1alpha1.RateLimitPolicy, v string) { p.Spec.Rules[0].Headers = v1alpha1.HeaderStyle(v) },
			func(p policy.Policy) string { return string(p.Rules[0].Headers) }},
		{"response.legacyReset", spec.Properties["response"].Properties["legacyReset"],
			sorted(string(policy.ResetSeconds), string(policy.ResetUnixTime)),
			func(p *v1alpha1.RateLimitPolicy, v string) {
				p.Spec.Response = &v1alpha1.ResponseSpec{LegacyReset: v1alpha1.ResetFormat(v)}
			},
			func(p policy.Policy) string {
				return cmp.Or(string(p.Response.LegacyReset), string(policy.ResetSeconds))
			}},
		{"response.body.format", spec.Properties["response"].Properties["body"].Properties["format"],
			sorted(string(policy.BodyJSON), string(policy.BodyOpenAI), string(policy.BodyText), string(policy.BodyTemplate)),
			func(p *v1alpha1.RateLimitPolicy, v string) {
				p.Spec.Response = &v1alpha1.ResponseSpec{Body: &v1alpha1.BodySpec{Format: v1alpha1.BodyFormat(v)}}
				if v == string(v1alpha1.BodyTemplate) {
					p.Spec.Response.Body.Template = "{{.Message}}"
				}
			},
			func(p policy.Policy) string {
				if p.Response.Body == nil {
					return string(policy.BodyJSON)
				}
				return string(p.Response.Body.Format)
			}},
		{"rules[].mode", spec.Properties["rules"].Items.Schema.Properties["mode"],
			sorted(string(policy.Enforce), string(policy.Shadow)),
			func(p *v1alpha1.RateLimitPolicy, v string) { p.Spec.Rules[0].Mode = v1alpha1.RuleMode(v) },
			func(p policy.Policy) string { return string(p.Rules[0].Mode) }},
	} {
		t.Run(tc.field, func(t *testing.T) {
			api := enum(tc.schema)
			if !slices.Equal(api, tc.format) {
				t.Fatalf("the API admits %v, the format knows %v", api, tc.format)
			}
			for _, v := range api {
				p := base()
				tc.set(p, v)
				got, err := Compile(p) // Compile validates what it returns as readers do
				if err != nil || tc.got(got) != v {
					t.Errorf("%s %s compiled to %q, %v", tc.field, v, tc.got(got), err)
				}
			}
		})
	}
}

// TestCompileDomain: a domain policy's descriptor rules keep their entries in order (a path of
// the descriptor tree), key on descriptor entries, and a policy without podSelector selects no
// pod and shares rule names with a pod policy without a conflict.
func TestCompileDomain(t *testing.T) {
	p := v1alpha1.RateLimitPolicy{}
	p.Name = "edge"
	p.Spec.Domain = "edge"
	p.Spec.Rules = []v1alpha1.Rule{{Name: "r", Algorithm: v1alpha1.FixedWindow, Limit: 3, Window: "1m",
		Match: &v1alpha1.RuleMatch{Descriptors: []v1alpha1.DescriptorMatch{{Key: "generic_key", Value: "checkout"}, {Key: "remote_address"}}},
		Key:   []v1alpha1.KeyPart{{Descriptor: &v1alpha1.DescriptorKeyPart{Key: "remote_address"}}}}}
	got, err := Compile(&p)
	if err != nil {
		t.Fatal(err)
	}
	r := got.Rules[0]
	if got.Domain != "edge" || got.Selector != nil || !r.Descriptor() ||
		!reflect.DeepEqual(r.Match.Descriptors, []policy.DescriptorEntry{{Key: "generic_key", Value: "checkout"}, {Key: "remote_address"}}) ||
		!slices.Equal(r.Key, []policy.KeyPart{{Source: policy.SourceDescriptor, Name: "remote_address"}}) {
		t.Fatalf("compiled %+v, rule %+v %+v", got, r, r.Match)
	}
	pods := p.DeepCopy()
	pods.Name, pods.Spec.Domain = "pods", ""
	pods.Spec.PodSelector = &metav1.LabelSelector{}
	pods.Spec.Rules[0].Match, pods.Spec.Rules[0].Key = nil, []v1alpha1.KeyPart{{Path: &v1alpha1.PathKey{}}}
	doc, verdicts := Build("ns", []v1alpha1.RateLimitPolicy{p, *pods}, NamedPods{"a"})
	if len(doc.Policies) != 2 || verdicts["edge"].Err != nil || verdicts["pods"].Err != nil {
		t.Fatalf("verdicts %+v", verdicts)
	}
	if e := doc.Policies[0]; e.Name != "edge" || e.Replicas != 0 || e.Pods == nil || len(e.Pods) != 0 || e.Selects(map[string]string{}) {
		t.Fatalf("a domain-only policy holds pods or selects one: %+v", e)
	}

	p.Spec.Rules[0].Key = []v1alpha1.KeyPart{{Descriptor: &v1alpha1.DescriptorKeyPart{Key: "user"}}}
	if _, err := Compile(&p); err == nil || !strings.Contains(err.Error(), `descriptor "user"`) {
		t.Fatalf("a key on an entry the rule does not match compiled: %v", err)
	}
	p.Spec.Domain = ""
	p.Spec.Rules[0].Key = []v1alpha1.KeyPart{{Descriptor: &v1alpha1.DescriptorKeyPart{Key: "remote_address"}}}
	if _, err := Compile(&p); err == nil || !strings.Contains(err.Error(), "neither a selector nor a domain") {
		t.Fatalf("a policy nothing enforces compiled: %v", err)
	}
}

// bigPolicies are n policies of 64 rules, each rule's match carrying junk random hex bytes
// that gzip cannot shrink below half: about 130 KiB compressed per policy with junk 4000.
func bigPolicies(n, junk int) []v1alpha1.RateLimitPolicy {
	rnd := rand.New(rand.NewPCG(1, 2))
	hexs := func(k int) string {
		const digits = "0123456789abcdef"
		b := make([]byte, k)
		for i := range b {
			b[i] = digits[rnd.IntN(16)]
		}
		return string(b)
	}
	var out []v1alpha1.RateLimitPolicy
	for i := range n {
		p := v1alpha1.RateLimitPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("big-%02d", i),
			CreationTimestamp: metav1.Unix(int64(1770000000+i), 0)}}
		p.Spec.PodSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
		for j := range 64 {
			r := v1alpha1.Rule{Name: fmt.Sprintf("%s-r%02d", p.Name, j), Key: []v1alpha1.KeyPart{{ClientIP: &v1alpha1.ClientIPKey{}}},
				Algorithm: v1alpha1.TokenBucket, Limit: int64(10 + j), Window: "1m",
				Match: &v1alpha1.RuleMatch{PathPrefix: "/api/" + hexs(junk/4)}}
			for h := range 3 {
				r.Match.Headers = append(r.Match.Headers, v1alpha1.HeaderMatch{Name: v1alpha1.HeaderName(fmt.Sprintf("x-h%d", h)), Value: hexs(junk / 4)})
			}
			p.Spec.Rules = append(p.Spec.Rules, r)
		}
		out = append(out, p)
	}
	return out
}

// BenchmarkBuildFit is a reconcile's rendering of a namespace 10 policies of which do not fit:
// "miss" renders after a change (a policy deleted), "hit" after an event that changed nothing.
func BenchmarkBuildFit(b *testing.B) {
	policies := bigPolicies(10, 4000)
	b.Run("miss", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			var f Fitter
			if _, _, v, err := f.BuildFit("ns", policies[i%2:], FixedReplicas(3), 0); err != nil || !v[policies[9].Name].TooLarge {
				b.Fatal(err, v[policies[9].Name])
			}
		}
	})
	b.Run("hit", func(b *testing.B) {
		var f Fitter
		if _, _, _, err := f.BuildFit("ns", policies, FixedReplicas(3), 0); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if _, _, _, err := f.BuildFit("ns", policies, FixedReplicas(3), 0); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestFitterRemembers checks that the Fitter's memory returns what a fresh BuildFit returns,
// and forgets on every input that matters: a deleted policy brings the next one in, a changed
// generation or pod set renders again.
func TestFitterRemembers(t *testing.T) {
	policies := bigPolicies(6, 4000) // each over CompressThreshold plain, as a bound below it makes no sense
	// Room for three and a half policies of the compressed form.
	_, all, _, err := BuildFit("ns", policies, FixedReplicas(2), 0)
	if err != nil || all.BinaryData == nil {
		t.Fatal(err, "or not compressed")
	}
	maxBytes := all.Size() / 6 * 7 / 2
	var f Fitter
	check := func(name string, policies []v1alpha1.RateLimitPolicy, pods Pods, wantIn []string) map[string]Verdict {
		t.Helper()
		doc, payload, verdicts, err := f.BuildFit("ns", policies, pods, maxBytes)
		if err != nil {
			t.Fatal(err)
		}
		fdoc, fpayload, fverdicts, err := BuildFit("ns", policies, pods, maxBytes)
		if err != nil {
			t.Fatal(err)
		}
		if payload.Hash != fpayload.Hash || len(verdicts) != len(fverdicts) {
			t.Fatalf("%s: remembered payload %.12s (%d verdicts), fresh %.12s (%d)", name, payload.Hash, len(verdicts), fpayload.Hash, len(fverdicts))
		}
		for n, v := range fverdicts {
			if (verdicts[n].Err == nil) != (v.Err == nil) || verdicts[n].TooLarge != v.TooLarge || verdicts[n].MatchedPods != v.MatchedPods {
				t.Fatalf("%s: %s remembered %+v, fresh %+v", name, n, verdicts[n], v)
			}
		}
		var got []string
		for _, p := range doc.Policies {
			got = append(got, p.Name)
		}
		if !slices.Equal(got, wantIn) || len(fdoc.Policies) != len(wantIn) {
			t.Fatalf("%s: rendered %v, want %v", name, got, wantIn)
		}
		return verdicts
	}
	t.Logf("six policies: %d bytes, bound %d", all.Size(), maxBytes)
	v := check("first", policies, FixedReplicas(2), []string{"big-00", "big-01", "big-02"})
	if !v["big-03"].TooLarge || v["big-03"].MatchedPods != 2 {
		t.Fatalf("big-03: %+v", v["big-03"])
	}
	check("same again", policies, FixedReplicas(2), []string{"big-00", "big-01", "big-02"})
	check("oldest deleted", policies[1:], FixedReplicas(2), []string{"big-01", "big-02", "big-03"})
	v = check("pods changed", policies[1:], FixedReplicas(5), []string{"big-01", "big-02", "big-03"})
	if v["big-01"].MatchedPods != 5 {
		t.Fatalf("big-01 after the pods changed: %+v", v["big-01"])
	}
	edited := slices.Clone(policies[1:])
	edited[0] = *edited[0].DeepCopy()
	edited[0].Spec.Rules = edited[0].Spec.Rules[:1]
	edited[0].Generation++
	check("oldest shrunk", edited, FixedReplicas(5), []string{"big-01", "big-02", "big-03", "big-04"})
}

// TestCompileCalendar renders a calendar rule, its zone defaulted to UTC, and refuses a zone
// the time-zone database does not know, naming the field.
func TestCompileCalendar(t *testing.T) {
	p := &v1alpha1.RateLimitPolicy{}
	p.Name = "p"
	p.Spec.PodSelector = &metav1.LabelSelector{}
	p.Spec.Rules = []v1alpha1.Rule{{Name: "m", Key: []v1alpha1.KeyPart{{ClientIP: &v1alpha1.ClientIPKey{}}}, Algorithm: v1alpha1.FixedWindow,
		Limit: 100000, Calendar: &v1alpha1.CalendarSpec{Period: v1alpha1.Month}}}
	got, err := Compile(p)
	if err != nil {
		t.Fatal(err)
	}
	r := got.Rules[0]
	if r.WindowMs != 0 || r.Calendar == nil || *r.Calendar != (policy.Calendar{Period: "Month", TimeZone: "UTC"}) {
		t.Errorf("rule: %+v", r)
	}
	if lim := r.LimiterLimit(); lim.Period != "Month" || lim.Zone.String() != "UTC" || lim.Validate() != nil {
		t.Errorf("limit %+v: %v", lim, lim.Validate())
	}
	if s := Summary(p); s != "FixedWindow 100000/month UTC" {
		t.Errorf("summary %q", s)
	}
	p.Spec.Rules[0].Calendar.TimeZone = "Mars/Olympus_Mons"
	if _, err := Compile(p); err == nil || !strings.Contains(err.Error(), `spec.rules[0] (m): calendar.timeZone: time zone "Mars/Olympus_Mons"`) {
		t.Errorf("an unknown zone compiled: %v", err)
	}
	p.Spec.Rules[0].Calendar.TimeZone = "UTC"
	p.Spec.Rules[0].Window = "1h"
	if _, err := Compile(p); err == nil || !strings.Contains(err.Error(), "exactly one of window and calendar") {
		t.Errorf("window and calendar compiled: %v", err)
	}
}

// TestCompileCountWhen renders countWhen's codes and ranges and refuses malformed ones,
// which the schema cannot check within the API server's CEL budget.
func TestCompileCountWhen(t *testing.T) {
	p := &v1alpha1.RateLimitPolicy{}
	p.Name = "p"
	p.Spec.PodSelector = &metav1.LabelSelector{}
	p.Spec.Rules = []v1alpha1.Rule{{Name: "f", Key: []v1alpha1.KeyPart{{ClientIP: &v1alpha1.ClientIPKey{}}}, Algorithm: v1alpha1.FixedWindow,
		Limit: 10, Window: "1h", CountWhen: &v1alpha1.CountWhen{StatusCodes: []intstr.IntOrString{intstr.FromInt32(401), intstr.FromString("500-599")}}}}
	got, err := Compile(p)
	if err != nil {
		t.Fatal(err)
	}
	if cw := got.Rules[0].CountWhen; len(cw) != 2 || cw[0] != (policy.StatusRange{Lo: 401, Hi: 401}) || cw[1] != (policy.StatusRange{Lo: 500, Hi: 599}) {
		t.Errorf("countWhen %+v", cw)
	}
	for _, bad := range []intstr.IntOrString{intstr.FromInt32(99), intstr.FromInt32(600), intstr.FromString("499-400"), intstr.FromString("4xx"), intstr.FromString("400-")} {
		p.Spec.Rules[0].CountWhen.StatusCodes = []intstr.IntOrString{bad}
		if _, err := Compile(p); err == nil || !strings.Contains(err.Error(), "countWhen.statusCodes[0]") {
			t.Errorf("%s compiled: %v", bad.String(), err)
		}
	}
	p.Spec.Rules[0].CountWhen.StatusCodes = []intstr.IntOrString{intstr.FromInt32(401)}
	p.Spec.Rules[0].Algorithm = v1alpha1.SlidingWindowCounter
	if _, err := Compile(p); err == nil || !strings.Contains(err.Error(), "countWhen applies only to FixedWindow and TokenBucket") {
		t.Errorf("countWhen on SlidingWindowCounter compiled: %v", err)
	}
}

// TestCompileResponseCost renders responseCost's source, canonical header names, and its
// minimumCost as the rule's up-front cost (1 by default).
func TestCompileResponseCost(t *testing.T) {
	p := &v1alpha1.RateLimitPolicy{}
	p.Name = "p"
	p.Spec.PodSelector = &metav1.LabelSelector{}
	p.Spec.Rules = []v1alpha1.Rule{{Name: "tokens", Key: []v1alpha1.KeyPart{{ClientIP: &v1alpha1.ClientIPKey{}}}, Algorithm: v1alpha1.TokenBucket,
		Limit: 1000, Window: "1h", ResponseCost: &v1alpha1.ResponseCost{Header: "x-usage-tokens"}}}
	got, err := Compile(p)
	if err != nil {
		t.Fatal(err)
	}
	if r := got.Rules[0]; r.ResponseCost == nil || *r.ResponseCost != (policy.ResponseCost{Header: "X-Usage-Tokens"}) || r.Cost != 1 {
		t.Errorf("compiled %+v, responseCost %+v", r, r.ResponseCost)
	}
	p.Spec.Rules[0].ResponseCost = &v1alpha1.ResponseCost{JSONField: "usage.total_tokens", MinimumCost: ptr.To[int64](50)}
	if got, err = Compile(p); err != nil {
		t.Fatal(err)
	}
	if r := got.Rules[0]; r.ResponseCost == nil || *r.ResponseCost != (policy.ResponseCost{JSONField: "usage.total_tokens"}) || r.Cost != 50 {
		t.Errorf("compiled %+v, responseCost %+v", r, r.ResponseCost)
	}
	p.Spec.Rules[0].Algorithm = v1alpha1.SlidingWindowCounter
	if _, err := Compile(p); err == nil || !strings.Contains(err.Error(), "responseCost applies only to FixedWindow and TokenBucket") {
		t.Errorf("responseCost on SlidingWindowCounter compiled: %v", err)
	}
}

func TestRouteMatches(t *testing.T) {
	prefix, exact, regex := gatewayv1.PathMatchPathPrefix, gatewayv1.PathMatchExact, gatewayv1.PathMatchRegularExpression
	get := gatewayv1.HTTPMethodGet
	tests := map[string]struct {
		rule    gatewayv1.HTTPRouteRule
		want    []policy.RouteMatch
		wantErr string
	}{
		"no matches: every request": {rule: gatewayv1.HTTPRouteRule{}, want: []policy.RouteMatch{{}}},
		"prefix / is every path": {rule: gatewayv1.HTTPRouteRule{Matches: []gatewayv1.HTTPRouteMatch{{Path: &gatewayv1.HTTPPathMatch{Type: &prefix, Value: ptr.To("/")}}}},
			want: []policy.RouteMatch{{}}},
		"prefix, exact with method and header": {rule: gatewayv1.HTTPRouteRule{Matches: []gatewayv1.HTTPRouteMatch{
			{Path: &gatewayv1.HTTPPathMatch{Type: &prefix, Value: ptr.To("/api")}},
			{Path: &gatewayv1.HTTPPathMatch{Type: &exact, Value: ptr.To("/login")}, Method: &get,
				Headers: []gatewayv1.HTTPHeaderMatch{{Name: "x-tier", Value: "free"}}},
		}}, want: []policy.RouteMatch{{PathPrefix: "/api"}, {PathExact: "/login", Method: "GET", Headers: []policy.HeaderMatch{{Name: "X-Tier", Value: "free"}}}}},
		"regular expression": {rule: gatewayv1.HTTPRouteRule{Matches: []gatewayv1.HTTPRouteMatch{{Path: &gatewayv1.HTTPPathMatch{Type: &regex, Value: ptr.To("/a.*")}}}},
			wantErr: "path match type RegularExpression is not supported"},
		"query parameters": {rule: gatewayv1.HTTPRouteRule{Matches: []gatewayv1.HTTPRouteMatch{{QueryParams: []gatewayv1.HTTPQueryParamMatch{{Name: "q", Value: "1"}}}}},
			wantErr: "query parameter matches are not supported"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := RouteMatches(tc.rule)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestCompileAdaptiveRule renders an adaptive rule with its defaults resolved, so the sidecars
// read every parameter from the file: minLimit is 4, or the rule's limit when that is less.
func TestCompileAdaptiveRule(t *testing.T) {
	p := &v1alpha1.RateLimitPolicy{}
	p.Name = "p"
	p.Spec.PodSelector = &metav1.LabelSelector{}
	for _, tc := range []struct {
		limit int64
		spec  v1alpha1.AdaptiveSpec
		want  policy.Adaptive
	}{
		{1000, v1alpha1.AdaptiveSpec{}, policy.Adaptive{MinLimit: 4, TolerancePct: 125}},
		{2, v1alpha1.AdaptiveSpec{}, policy.Adaptive{MinLimit: 2, TolerancePct: 125}},
		{8, v1alpha1.AdaptiveSpec{MinLimit: ptr.To[int64](1), TolerancePercent: ptr.To[int64](200)}, policy.Adaptive{MinLimit: 1, TolerancePct: 200}},
	} {
		p.Spec.Rules = []v1alpha1.Rule{{Name: "app", Key: []v1alpha1.KeyPart{}, Algorithm: v1alpha1.Concurrency, Limit: tc.limit, Adaptive: &tc.spec}}
		got, err := Compile(p)
		if err != nil {
			t.Fatal(err)
		}
		if r := got.Rules[0]; r.Adaptive == nil || *r.Adaptive != tc.want || r.Limit != tc.limit {
			t.Errorf("limit %d, %+v rendered limit %d, %+v; want %+v", tc.limit, tc.spec, r.Limit, r.Adaptive, tc.want)
		}
	}
}
