package render

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
			sorted(string(policy.HeadersDraft), string(policy.HeadersLegacy), string(policy.HeadersBoth), string(policy.HeadersNone)),
			func(p *v1alpha1.RateLimitPolicy, v string) {
				p.Spec.Response = &v1alpha1.ResponseSpec{Headers: v1alpha1.HeaderStyle(v)}
			},
			func(p policy.Policy) string { return string(p.Response.Headers) }},
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
		!slices.Equal(r.Match.Descriptors, []policy.DescriptorEntry{{Key: "generic_key", Value: "checkout"}, {Key: "remote_address"}}) ||
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
