// Package render compiles RateLimitPolicy objects into the rendered format of package policy
// (policies.json): defaults applied, durations in milliseconds, names canonical, and every
// policy of a namespace checked against the others. The controller and `sluicectl render` call
// it; the readers of the format (the sidecar, the RLS server) never do, so they do not link the
// API types.
package render

import (
	"fmt"
	"net/textproto"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/policy"
)

// Compile turns a policy into its rendered form, applying the API's defaults to fields left
// empty (the API server applies them too; Compile must not depend on it) and checking what the
// schema cannot: that every rule is inside the limiter's exact-arithmetic bounds. Replicas is
// left zero for Build to fill in.
func Compile(p *v1alpha1.RateLimitPolicy) (policy.Policy, error) {
	out := policy.Policy{
		Name:        p.Name,
		Selector:    *p.Spec.PodSelector.DeepCopy(),
		FailureMode: policy.FailureMode(orDefault(p.Spec.FailureMode, v1alpha1.FailureLocal)),
		Response:    policy.Response{StatusCode: 429, Headers: policy.HeaderStyle(v1alpha1.HeadersBoth)},
	}
	if _, err := metav1.LabelSelectorAsSelector(&out.Selector); err != nil {
		return policy.Policy{}, fmt.Errorf("spec.podSelector: %w", err)
	}
	for _, c := range p.Spec.TrustedProxies {
		out.TrustedProxies = append(out.TrustedProxies, string(c))
	}
	slices.Sort(out.TrustedProxies)
	if r := p.Spec.Response; r != nil {
		if r.StatusCode != 0 {
			out.Response.StatusCode = int(r.StatusCode)
		}
		out.Response.Headers = policy.HeaderStyle(orDefault(r.Headers, v1alpha1.HeadersBoth))
	}
	for i, r := range p.Spec.Rules {
		rule, err := compileRule(r)
		if err != nil {
			return policy.Policy{}, fmt.Errorf("spec.rules[%d] (%s): %w", i, r.Name, err)
		}
		out.Rules = append(out.Rules, rule)
	}
	slices.SortFunc(out.Rules, func(a, b policy.Rule) int { return strings.Compare(a.Name, b.Name) })
	if err := out.Validate(); err != nil {
		return policy.Policy{}, err
	}
	return out, nil
}

func compileRule(r v1alpha1.Rule) (policy.Rule, error) {
	window, err := parseMillis(string(r.Window))
	if err != nil {
		return policy.Rule{}, fmt.Errorf("window: %w", err)
	}
	out := policy.Rule{
		Name:      r.Name,
		Algorithm: string(r.Algorithm),
		Limit:     r.Limit,
		WindowMs:  window,
		Cost:      1,
		Mode:      policy.RuleMode(orDefault(r.Mode, v1alpha1.Enforce)),
	}
	if r.Algorithm == v1alpha1.TokenBucket || r.Algorithm == v1alpha1.LeakyBucket {
		out.Burst = r.Limit
		if r.Burst != nil {
			out.Burst = *r.Burst
		}
	}
	if r.Algorithm == v1alpha1.LeakyBucket {
		out.LeakyMode = string(v1alpha1.Meter)
		if lb := r.LeakyBucket; lb != nil {
			out.LeakyMode = string(orDefault(lb.Mode, v1alpha1.Meter))
			if lb.MaxDelay != nil {
				if out.MaxDelayMs, err = parseMillis(string(*lb.MaxDelay)); err != nil {
					return policy.Rule{}, fmt.Errorf("leakyBucket.maxDelay: %w", err)
				}
			}
		}
	}
	if r.Cost != nil {
		out.Cost = *r.Cost
	}
	if r.CostHeader != "" {
		out.CostHeader = canonicalHeader(string(r.CostHeader))
	}
	if m := r.Match; m != nil && (m.PathPrefix != "" || len(m.Methods) > 0 || len(m.Headers) > 0) {
		out.Match = &policy.Match{PathPrefix: m.PathPrefix}
		for _, method := range m.Methods {
			out.Match.Methods = append(out.Match.Methods, string(method))
		}
		slices.Sort(out.Match.Methods)
		for _, h := range m.Headers {
			out.Match.Headers = append(out.Match.Headers, policy.HeaderMatch{Name: canonicalHeader(string(h.Name)), Value: h.Value})
		}
		slices.SortFunc(out.Match.Headers, func(a, b policy.HeaderMatch) int { return strings.Compare(a.Name, b.Name) })
	}
	for i, k := range r.Key {
		part, err := compileKeyPart(k)
		if err != nil {
			return policy.Rule{}, fmt.Errorf("key[%d]: %w", i, err)
		}
		out.Key = append(out.Key, part)
	}
	return out, nil
}

func compileKeyPart(k v1alpha1.KeyPart) (policy.KeyPart, error) {
	var parts []policy.KeyPart
	if k.ClientIP != nil {
		parts = append(parts, policy.KeyPart{Source: policy.SourceClientIP})
	}
	if k.Header != nil {
		parts = append(parts, policy.KeyPart{Source: policy.SourceHeader, Name: canonicalHeader(string(k.Header.Name))})
	}
	if k.Path != nil {
		parts = append(parts, policy.KeyPart{Source: policy.SourcePath})
	}
	if k.Method != nil {
		parts = append(parts, policy.KeyPart{Source: policy.SourceMethod})
	}
	if k.Query != nil {
		parts = append(parts, policy.KeyPart{Source: policy.SourceQuery, Name: k.Query.Name})
	}
	if len(parts) != 1 {
		return policy.KeyPart{}, fmt.Errorf("sets %d sources; exactly one of clientIP, header, path, method, query is allowed", len(parts))
	}
	return parts[0], nil
}

// parseMillis parses a Go duration that must be a whole number of milliseconds.
func parseMillis(s string) (int64, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, err
	}
	if d < 0 || d%time.Millisecond != 0 {
		return 0, fmt.Errorf("%q is not a whole, non-negative number of milliseconds", s)
	}
	return d.Milliseconds(), nil
}

func canonicalHeader(name string) string { return textproto.CanonicalMIMEHeaderKey(name) }

func orDefault[T ~string](v, def T) T {
	if v == "" {
		return def
	}
	return v
}

// Pods is what Build needs to know of a namespace's pods.
type Pods interface {
	// Ready returns the number of ready pods that sel matches.
	Ready(sel labels.Selector) int32
	// Shared reports whether some pod is matched by both selectors.
	Shared(a, b labels.Selector) bool
}

// Verdict is what Build decided about one policy.
type Verdict struct {
	// Err is why the policy was not accepted; nil when it was rendered.
	Err error
	// Conflict is true when Err is a rule-name conflict with another policy.
	Conflict bool
	// MatchedPods is the number of ready pods the policy selects.
	MatchedPods int32
}

// Build renders the policies of one namespace. Policies are considered oldest first (then by
// name): one that fails to compile, or that shares a rule name with an already accepted policy
// selecting the same pods (identical selectors, or a pod matched by both), is left out with a
// verdict saying why. The document lists accepted policies sorted by name.
func Build(namespace string, policies []v1alpha1.RateLimitPolicy, pods Pods) (*policy.Document, map[string]Verdict) {
	ordered := slices.Clone(policies)
	slices.SortFunc(ordered, func(a, b v1alpha1.RateLimitPolicy) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	doc := &policy.Document{Version: policy.Version, Namespace: namespace, Policies: []policy.Policy{}}
	verdicts := make(map[string]Verdict, len(ordered))
	type accepted struct {
		compiled policy.Policy
		selector labels.Selector
	}
	var kept []accepted
	for i := range ordered {
		p := &ordered[i]
		if !p.DeletionTimestamp.IsZero() {
			continue
		}
		compiled, err := Compile(p)
		if err != nil {
			verdicts[p.Name] = Verdict{Err: err}
			continue
		}
		sel, _ := metav1.LabelSelectorAsSelector(&compiled.Selector) // Compile checked it.
		compiled.Replicas = pods.Ready(sel)
		v := Verdict{MatchedPods: compiled.Replicas}
		for _, k := range kept {
			if name, ok := sharedRuleName(compiled, k.compiled); ok && (sel.String() == k.selector.String() || pods.Shared(sel, k.selector)) {
				v.Err = fmt.Errorf("rule %q is also defined by policy %q, which selects the same pods; rename one of the rules", name, k.compiled.Name)
				v.Conflict = true
				break
			}
		}
		verdicts[p.Name] = v
		if v.Err == nil {
			kept = append(kept, accepted{compiled, sel})
			doc.Policies = append(doc.Policies, compiled)
		}
	}
	slices.SortFunc(doc.Policies, func(a, b policy.Policy) int { return strings.Compare(a.Name, b.Name) })
	return doc, verdicts
}

func sharedRuleName(a, b policy.Policy) (string, bool) {
	for _, r := range a.Rules {
		for _, s := range b.Rules {
			if r.Name == s.Name {
				return r.Name, true
			}
		}
	}
	return "", false
}

// Summary describes a policy's rules in a line for `kubectl get`, e.g.
// "TokenBucket 100/1m, FixedWindow 10/1s".
func Summary(p *v1alpha1.RateLimitPolicy) string {
	parts := make([]string, 0, len(p.Spec.Rules))
	for _, r := range p.Spec.Rules {
		s := fmt.Sprintf("%s %d/%s", r.Algorithm, r.Limit, r.Window)
		if r.Mode == v1alpha1.Shadow {
			s += " (shadow)"
		}
		parts = append(parts, s)
	}
	s := strings.Join(parts, ", ")
	if len(s) > 120 {
		s = s[:117] + "..."
	}
	return s
}

// FixedReplicas answers Build for offline rendering: every selector matches n ready pods and
// no pod is known, so only identical selectors can conflict.
type FixedReplicas int32

// Ready returns n.
func (n FixedReplicas) Ready(labels.Selector) int32 { return int32(n) }

// Shared reports false: offline, no pod is known.
func (FixedReplicas) Shared(_, _ labels.Selector) bool { return false }
