// Package render compiles RateLimitPolicy objects into the rendered format of package policy
// (policies.json): defaults applied, durations in milliseconds, names canonical, and every
// policy of a namespace checked against the others. The controller and `sluicectl render` call
// it; the readers of the format (the sidecar, the RLS server) never do, so they do not link the
// API types.
package render

import (
	"crypto/sha256"
	"fmt"
	"maps"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/policy"
)

// Compile turns a policy into its rendered form, applying the API's defaults to fields left
// empty (the API server applies them too; Compile must not depend on it) and checking what the
// schema cannot: that every rule is inside the limiter's exact-arithmetic bounds. Replicas is
// left zero for Build to fill in.
//
// A policy with spec.targetRefs compiles without pods (its Domain's rules only): only the
// controller knows what its targets resolve to, and passes that to Build (Targets).
func Compile(p *v1alpha1.RateLimitPolicy) (policy.Policy, error) {
	if err := offlineTargets(p); err != nil {
		return policy.Policy{}, err
	}
	out, _, err := compile(p, nil, nil, nil)
	return out, err
}

// CompileTables is Compile with the rules' tables of tenant limits read through tables (nil:
// none, every such rule renders without its table), and what became of each table.
func CompileTables(p *v1alpha1.RateLimitPolicy, tables TenantTables) (policy.Policy, []TenantStatus, error) {
	if err := offlineTargets(p); err != nil {
		return policy.Policy{}, nil, err
	}
	out, st, err := compile(p, nil, nil, tables)
	return out, st.tenants, err
}

// offlineTargets is why p cannot be rendered without the controller's view of its targets.
func offlineTargets(p *v1alpha1.RateLimitPolicy) error {
	if len(p.Spec.TargetRefs) > 0 && p.Spec.Domain == "" {
		return fmt.Errorf("spec.targetRefs: the controller resolves targets against the cluster; rendered offline, this policy has no pods")
	}
	return nil
}

// Target is what a policy's spec.targetRefs resolved to: the selector of its targets' pods
// and, for HTTPRoutes, the route matches every HTTP rule also needs (none for Services).
type Target struct {
	Selector *metav1.LabelSelector
	Routes   []policy.RouteMatch
}

// Targets resolves policies' spec.targetRefs. A Pods given to Build that implements it renders
// the policies with targetRefs; without it (offline) they compile as Compile does.
type Targets interface {
	// Target returns what p's targetRefs resolve to, or why they resolve to no pods.
	Target(p *v1alpha1.RateLimitPolicy) (Target, error)
}

// compileStatus is what became of what a policy reads beyond itself.
type compileStatus struct {
	// keysErr is why the key set Secret gave no key set: the policy compiled with the keys
	// the KeySets said to keep.
	keysErr error
	// tenants is what became of each rule's table of tenant limits, in the spec's order.
	tenants []TenantStatus
}

// podSelector is the selector of the pods that enforce p: its targets' (t, when resolved)
// or its podSelector; nil when it has neither.
func podSelector(p *v1alpha1.RateLimitPolicy, t *Target) *metav1.LabelSelector {
	if t != nil {
		return t.Selector
	}
	return p.Spec.PodSelector
}

// documentSelector is sel in the rendered document (a copy; nil stays nil).
func documentSelector(sel *metav1.LabelSelector) *policy.LabelSelector {
	if sel == nil {
		return nil
	}
	out := &policy.LabelSelector{MatchLabels: maps.Clone(sel.MatchLabels)}
	for _, r := range sel.MatchExpressions {
		out.MatchExpressions = append(out.MatchExpressions, policy.LabelSelectorRequirement{
			Key: r.Key, Operator: string(r.Operator), Values: slices.Clone(r.Values)})
	}
	return out
}

// compile compiles p, its targets resolved to t (nil: podSelector), its key set Secret read
// from ks and its rules' tables of tenant limits from tables (nil: offline, none can be read).
func compile(p *v1alpha1.RateLimitPolicy, t *Target, ks KeySets, tables TenantTables) (out policy.Policy, st compileStatus, err error) {
	sel := podSelector(p, t)
	if _, err := metav1.LabelSelectorAsSelector(sel); err != nil {
		return policy.Policy{}, compileStatus{}, fmt.Errorf("spec.podSelector: %w", err)
	}
	out = policy.Policy{
		Name:        p.Name,
		Domain:      p.Spec.Domain,
		Selector:    documentSelector(sel),
		FailureMode: policy.FailureMode(orDefault(p.Spec.FailureMode, v1alpha1.FailureLocal)),
		Response:    policy.Response{StatusCode: 429, Headers: policy.HeaderStyle(v1alpha1.HeadersBoth)},
	}
	if out.JWT, st.keysErr, err = compileJWT(p, ks); err != nil {
		return policy.Policy{}, compileStatus{}, err
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
		out.Response.RetryAfterMs = r.RetryAfterMs
		if r.LegacyReset == v1alpha1.ResetUnixTime {
			out.Response.LegacyReset = policy.ResetUnixTime
		}
		if b := r.Body; b != nil && orDefault(b.Format, v1alpha1.BodyJSON) != v1alpha1.BodyJSON {
			out.Response.Body = &policy.Body{Format: policy.BodyFormat(b.Format), ContentType: b.ContentType, Template: b.Template}
		}
	}
	for i, r := range p.Spec.Rules {
		rule, err := compileRule(r)
		if err != nil {
			return policy.Policy{}, compileStatus{}, fmt.Errorf("spec.rules[%d] (%s): %w", i, r.Name, err)
		}
		if t != nil && len(t.Routes) > 0 && !rule.Descriptor() {
			if rule.Match == nil {
				rule.Match = &policy.Match{}
			}
			rule.Match.Routes = t.Routes
		}
		out.Rules = append(out.Rules, rule)
	}
	slices.SortFunc(out.Rules, func(a, b policy.Rule) int { return strings.Compare(a.Name, b.Name) })
	if err := out.Validate(); err != nil {
		return policy.Policy{}, compileStatus{}, err
	}
	// The tables after the rules are valid: an entry is checked against its rule.
	st.tenants = withTenants(p, &out, tables)
	return out, st, nil
}

// windowOf is r's windowMs: its window, or a Concurrency rule's holdings' expiry.
func windowOf(r v1alpha1.Rule) (int64, error) {
	if r.Algorithm != v1alpha1.Concurrency {
		w, err := parseMillis(string(r.Window))
		if err != nil {
			return 0, fmt.Errorf("window: %w", err)
		}
		return w, nil
	}
	if r.Window != "" {
		return 0, fmt.Errorf("window does not apply to Concurrency")
	}
	return policy.SlotExpiry.Milliseconds(), nil
}

func compileRule(r v1alpha1.Rule) (policy.Rule, error) {
	var (
		window int64
		cal    *policy.Calendar
		err    error
	)
	if c := r.Calendar; c != nil {
		if r.Window != "" {
			return policy.Rule{}, fmt.Errorf("set exactly one of window and calendar")
		}
		cal = &policy.Calendar{Period: string(c.Period), TimeZone: orDefault(c.TimeZone, "UTC")}
		// The schema checks the zone's spelling; only the time-zone database knows it.
		if _, err := limiter.LoadZone(cal.TimeZone); err != nil {
			return policy.Rule{}, fmt.Errorf("calendar.timeZone: %w", err)
		}
	} else if window, err = windowOf(r); err != nil {
		return policy.Rule{}, err
	}
	out := policy.Rule{
		Calendar:  cal,
		Name:      r.Name,
		Algorithm: string(r.Algorithm),
		Limit:     r.Limit,
		WindowMs:  window,
		Cost:      1,
		Mode:      policy.RuleMode(orDefault(r.Mode, v1alpha1.Enforce)),
		Headers:   policy.HeaderStyle(r.Headers),
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
	if l := r.Lease; l != nil {
		out.Lease = &policy.Lease{}
		if out.Lease.MaxAgeMs, err = parseMillis(string(l.MaxAge)); err != nil {
			return policy.Rule{}, fmt.Errorf("lease.maxAge: %w", err)
		}
		if l.MaxUnits != nil {
			out.Lease.MaxUnits = *l.MaxUnits
		}
	}
	if r.CostHeader != "" {
		out.CostHeader = canonicalHeader(string(r.CostHeader))
	}
	out.Adaptive = compileAdaptive(r)
	if out.CountWhen, err = compileCountWhen(r.CountWhen); err != nil {
		return policy.Rule{}, err
	}
	if rc := r.ResponseCost; rc != nil {
		out.ResponseCost, out.Cost = compileResponseCost(rc)
	}
	if m := r.Match; m != nil && (m.PathPrefix != "" || len(m.Methods) > 0 || len(m.Headers) > 0 || len(m.Descriptors) > 0 || m.JWT != "") {
		out.Match = &policy.Match{PathPrefix: m.PathPrefix, JWT: string(m.JWT)}
		for _, method := range m.Methods {
			out.Match.Methods = append(out.Match.Methods, string(method))
		}
		slices.Sort(out.Match.Methods)
		for _, h := range m.Headers {
			out.Match.Headers = append(out.Match.Headers, policy.HeaderMatch{Name: canonicalHeader(string(h.Name)), Value: h.Value, Absent: h.Absent, NotIn: slices.Sorted(slices.Values(h.NotIn))})
		}
		slices.SortFunc(out.Match.Headers, func(a, b policy.HeaderMatch) int { return strings.Compare(a.Name, b.Name) })
		for _, d := range m.Descriptors { // in order: a descriptor's entries are a path
			out.Match.Descriptors = append(out.Match.Descriptors, policy.DescriptorEntry{Key: string(d.Key), Value: d.Value, NotIn: slices.Sorted(slices.Values(d.NotIn))})
		}
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

// compileAdaptive is r's adaptive with its defaults resolved; nil for none.
func compileAdaptive(r v1alpha1.Rule) *policy.Adaptive {
	a := r.Adaptive
	if a == nil {
		return nil
	}
	return &policy.Adaptive{
		MinLimit:     ptr.Deref(a.MinLimit, min(limiter.DefaultAdaptiveMinLimit, r.Limit)),
		TolerancePct: ptr.Deref(a.TolerancePercent, limiter.DefaultAdaptiveTolerancePct),
	}
}

// compileCountWhen returns cw's codes and ranges; nil for none.
func compileCountWhen(cw *v1alpha1.CountWhen) ([]policy.StatusRange, error) {
	if cw == nil {
		return nil, nil
	}
	var out []policy.StatusRange
	for i, sc := range cw.StatusCodes {
		sr, err := statusRange(sc)
		if err != nil {
			return nil, fmt.Errorf("countWhen.statusCodes[%d]: %w", i, err)
		}
		out = append(out, sr)
	}
	return out, nil
}

// compileResponseCost returns rc's source and its minimumCost, the rule's up-front cost (1 by
// default).
func compileResponseCost(rc *v1alpha1.ResponseCost) (*policy.ResponseCost, int64) {
	out := &policy.ResponseCost{JSONField: rc.JSONField}
	if rc.Header != "" {
		out.Header = canonicalHeader(string(rc.Header))
	}
	if rc.MinimumCost != nil {
		return out, *rc.MinimumCost
	}
	return out, 1
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
	if k.Descriptor != nil {
		parts = append(parts, policy.KeyPart{Source: policy.SourceDescriptor, Name: string(k.Descriptor.Key)})
	}
	if k.JWTClaim != nil {
		parts = append(parts, policy.KeyPart{Source: policy.SourceJWTClaim, Name: k.JWTClaim.Claim})
	}
	if len(parts) != 1 {
		return policy.KeyPart{}, fmt.Errorf("sets %d sources; exactly one of clientIP, header, path, method, query, descriptor, jwtClaim is allowed", len(parts))
	}
	return parts[0], nil
}

// statusRange is a countWhen entry: a code (401) or an inclusive range ("400-499").
func statusRange(v intstr.IntOrString) (policy.StatusRange, error) {
	var sr policy.StatusRange
	if v.Type == intstr.Int {
		sr = policy.StatusRange{Lo: int(v.IntVal), Hi: int(v.IntVal)}
	} else {
		lo, hi, isRange := strings.Cut(v.StrVal, "-")
		if !isRange {
			hi = lo
		}
		var err1, err2 error
		sr.Lo, err1 = strconv.Atoi(lo)
		sr.Hi, err2 = strconv.Atoi(hi)
		if err1 != nil || err2 != nil {
			return sr, fmt.Errorf("%q is not a status code or a range such as \"400-499\"", v.StrVal)
		}
	}
	if sr.Lo < 100 || sr.Hi > 599 || sr.Lo > sr.Hi {
		return sr, fmt.Errorf("%s is not a status code from 100 to 599 or a range of them", v.String())
	}
	return sr, nil
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
	// Ready returns the ready pods that sel matches: their names, sorted and distinct, or,
	// when the pods are not known by name (FixedReplicas), nil and their number.
	Ready(sel labels.Selector) (names []string, n int32)
	// Shared reports whether some pod is matched by both selectors.
	Shared(a, b labels.Selector) bool
}

// Verdict is what Build decided about one policy.
type Verdict struct {
	// Err is why the policy was not accepted; nil when it was rendered.
	Err error
	// Conflict is true when Err is a rule-name conflict with another policy.
	Conflict bool
	// Unresolved is true when Err says the policy's targetRefs resolve to no pods.
	Unresolved bool
	// TooLarge is true when Err says the policy was left out because the namespace's
	// rendered document does not fit in a ConfigMap (see Fit).
	TooLarge bool
	// MatchedPods is the number of ready pods the policy selects.
	MatchedPods int32
	// KeysErr, for a rendered policy whose key set comes from a Secret, is why the Secret gave
	// no usable key set: the policy was rendered with the keys the KeySets said to keep.
	KeysErr error
	// Tenants is what became of each rule's table of tenant limits, in the spec's order.
	Tenants []TenantStatus
}

// Build renders the policies of one namespace. Policies are considered oldest first (then by
// name): one that fails to compile, or that shares a rule name with an already accepted policy
// selecting the same pods (identical selectors, or a pod matched by both), is left out with a
// verdict saying why. The document lists accepted policies sorted by name.
func Build(namespace string, policies []v1alpha1.RateLimitPolicy, pods Pods) (*policy.Document, map[string]Verdict) {
	ordered := ByAge(policies)
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
		var (
			compiled policy.Policy
			st       compileStatus
			err      error
		)
		var t *Target
		if ts, ok := pods.(Targets); ok && len(p.Spec.TargetRefs) > 0 {
			resolved, err := ts.Target(p)
			if err != nil {
				verdicts[p.Name] = Verdict{Err: err, Unresolved: true}
				continue
			}
			t = &resolved
		} else if err := offlineTargets(p); err != nil {
			verdicts[p.Name] = Verdict{Err: err}
			continue
		}
		ks, _ := pods.(KeySets)
		tables, _ := pods.(TenantTables)
		compiled, st, err = compile(p, t, ks, tables)
		if err != nil {
			verdicts[p.Name] = Verdict{Err: err}
			continue
		}
		sel, _ := metav1.LabelSelectorAsSelector(podSelector(p, t)) // compile checked it.
		if compiled.Selector != nil {
			compiled.Pods, compiled.Replicas = pods.Ready(sel)
			if compiled.Pods != nil {
				compiled.Replicas = int32(len(compiled.Pods))
			}
		} else {
			compiled.Pods = []string{} // no pod enforces it: the RLS document sets its own
		}
		v := Verdict{MatchedPods: compiled.Replicas, KeysErr: st.keysErr, Tenants: st.tenants}
		for _, k := range kept {
			// A policy without a selector runs in no sidecar; its descriptor rules' counters
			// are the policy's own, so a shared rule name is no conflict.
			bothPods := compiled.Selector != nil && k.compiled.Selector != nil
			if name, ok := sharedRuleName(compiled, k.compiled); ok && bothPods && (sel.String() == k.selector.String() || pods.Shared(sel, k.selector)) {
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

// ByAge returns the policies oldest first, then by name: the order in which Build accepts them
// (which resolves rule-name conflicts) and Fit keeps them.
func ByAge(policies []v1alpha1.RateLimitPolicy) []v1alpha1.RateLimitPolicy {
	ordered := slices.Clone(policies)
	slices.SortFunc(ordered, func(a, b v1alpha1.RateLimitPolicy) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return ordered
}

// BuildFit is Build followed by Fit: the document and payload the controller writes, with the
// verdict of every policy Fit left out set to TooLarge. maxBytes is the payload's bound
// (policy.MaxConfigMapBytes when 0).
func BuildFit(namespace string, policies []v1alpha1.RateLimitPolicy, pods Pods, maxBytes int) (*policy.Document, *policy.Payload, map[string]Verdict, error) {
	return (&Fitter{}).BuildFit(namespace, policies, pods, maxBytes)
}

// Fitter is BuildFit with a memory: it remembers each namespace's last result, so that a
// reconcile whose inputs have not changed (a status update, an event of the ConfigMap it
// wrote) neither compiles, encodes, compresses nor searches again, and one whose document has
// not changed does not compress or search. The zero value is ready; safe for concurrent use.
type Fitter struct {
	mu   sync.Mutex
	last map[string]fitted
}

type fitted struct {
	input    string // fingerprint of the inputs, "" when pods give none
	key      string // hash of the document, the bound and the order
	doc      *policy.Document
	payload  *policy.Payload
	verdicts map[string]Verdict
	left     []string
	full     int
	accepted int
}

// Fingerprinter is a Pods that can summarise, in a string, everything Ready and Shared
// answer from: two equal fingerprints give equal answers.
type Fingerprinter interface {
	Fingerprint() string
}

// BuildFit is the package's BuildFit, reusing the namespace's last result when the inputs are
// the same (policies by name, UID, generation, age and deletion; pods by fingerprint, when
// they have one), and its last Fit when the document, the order and the bound are.
func (f *Fitter) BuildFit(namespace string, policies []v1alpha1.RateLimitPolicy, pods Pods, maxBytes int) (*policy.Document, *policy.Payload, map[string]Verdict, error) {
	if maxBytes <= 0 {
		maxBytes = policy.MaxConfigMapBytes
	}
	input := inputFingerprint(policies, pods, maxBytes)
	f.mu.Lock()
	r, ok := f.last[namespace]
	f.mu.Unlock()
	if ok && input != "" && r.input == input {
		return r.doc, r.payload, maps.Clone(r.verdicts), nil
	}
	doc, verdicts := Build(namespace, policies, pods)
	var byAge []string
	for _, p := range ByAge(policies) {
		if v, ok := verdicts[p.Name]; ok && v.Err == nil {
			byAge = append(byAge, p.Name)
		}
	}
	plain, err := policy.Marshal(doc)
	if err != nil {
		return nil, nil, nil, err
	}
	key := fmt.Sprintf("%s\x00%d\x00%s", policy.Hash(plain), maxBytes, strings.Join(byAge, ","))
	if !ok || r.key != key {
		kept, payload, left, full, err := Fit(doc, byAge, maxBytes)
		if err != nil {
			return nil, nil, nil, err
		}
		r = fitted{key: key, doc: kept, payload: payload, left: left, full: full, accepted: len(byAge)}
	}
	for _, name := range r.left {
		v := verdicts[name]
		v.TooLarge = true
		v.Err = fmt.Errorf("the namespace's %d accepted policies render to %s (encoded), %s over the %s a ConfigMap holds; "+
			"this policy is among the newest %d left out, the %d older ones are enforced; delete or shrink policies to bring it in",
			r.accepted, size(r.full), size(r.full-maxBytes), size(maxBytes), len(r.left), r.accepted-len(r.left))
		verdicts[name] = v
	}
	r.input, r.verdicts = input, verdicts
	f.mu.Lock()
	if f.last == nil {
		f.last = map[string]fitted{}
	}
	f.last[namespace] = r
	f.mu.Unlock()
	return r.doc, r.payload, maps.Clone(verdicts), nil
}

// inputFingerprint is what BuildFit's result depends on, or "" when pods cannot say.
func inputFingerprint(policies []v1alpha1.RateLimitPolicy, pods Pods, maxBytes int) string {
	fp, ok := pods.(Fingerprinter)
	if !ok {
		return ""
	}
	h := sha256.New()
	fmt.Fprintf(h, "%d\x00%s\x00", maxBytes, fp.Fingerprint())
	for i := range policies {
		p := &policies[i]
		fmt.Fprintf(h, "%s\x00%s\x00%d\x00%d\x00%t\x00", p.Name, p.UID, p.Generation, p.CreationTimestamp.UnixNano(), p.DeletionTimestamp.IsZero())
	}
	return string(h.Sum(nil))
}

// Forget drops a namespace's remembered result.
func (f *Fitter) Forget(namespace string) {
	f.mu.Lock()
	delete(f.last, namespace)
	f.mu.Unlock()
}

// Fit encodes doc (policy.Encode) and, when the payload exceeds maxBytes
// (policy.MaxConfigMapBytes when 0), keeps the longest prefix of byAge (the accepted policies'
// names, oldest first) whose payload fits: the document that is written, its payload, the
// names left out (newest last) and the size of the full document's payload.
func Fit(doc *policy.Document, byAge []string, maxBytes int) (*policy.Document, *policy.Payload, []string, int, error) {
	if maxBytes <= 0 {
		maxBytes = policy.MaxConfigMapBytes
	}
	full, err := policy.Encode(doc)
	if err != nil {
		return nil, nil, nil, 0, err
	}
	if full.Size() <= maxBytes {
		return doc, full, nil, full.Size(), nil
	}
	prefix := func(k int) (*policy.Document, *policy.Payload, error) {
		keep := map[string]bool{}
		for _, n := range byAge[:k] {
			keep[n] = true
		}
		d := &policy.Document{Version: doc.Version, Namespace: doc.Namespace, Policies: []policy.Policy{}}
		for _, p := range doc.Policies {
			if keep[p.Name] {
				d.Policies = append(d.Policies, p)
			}
		}
		pl, err := policy.Encode(d)
		return d, pl, err
	}
	// The payload grows with the prefix; find the longest that fits (k = 0 always does).
	lo, hi := 0, len(byAge)-1 // fits(lo); the full list does not
	for lo < hi {
		mid := (lo + hi + 1) / 2
		_, pl, err := prefix(mid)
		if err != nil {
			return nil, nil, nil, 0, err
		}
		if pl.Size() <= maxBytes {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	d, pl, err := prefix(lo)
	if err != nil {
		return nil, nil, nil, 0, err
	}
	return d, pl, slices.Clone(byAge[lo:]), full.Size(), nil
}

func size(n int) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
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
		per := string(r.Window)
		if c := r.Calendar; c != nil {
			per = strings.ToLower(string(c.Period)) + " " + orDefault(c.TimeZone, "UTC")
		}
		s := fmt.Sprintf("%s %d/%s", r.Algorithm, r.Limit, per)
		if r.Algorithm == v1alpha1.Concurrency {
			s = fmt.Sprintf("%s %d in flight", r.Algorithm, r.Limit)
		}
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

// FixedReplicas answers Build for offline rendering: every selector matches n ready pods that
// have no names, so each holds the unnamed share (policy.UnnamedShare), and no pod is known,
// so only identical selectors can conflict.
type FixedReplicas int32

// Ready returns no names and n.
func (n FixedReplicas) Ready(labels.Selector) ([]string, int32) { return nil, int32(n) }

// FixedTarget answers Build for offline rendering of policies whose targets are known: pods as
// FixedReplicas, and every policy with targetRefs resolving to Resolved.
type FixedTarget struct {
	FixedReplicas
	Resolved Target
}

// Target returns f.Resolved.
func (f FixedTarget) Target(*v1alpha1.RateLimitPolicy) (Target, error) { return f.Resolved, nil }

// Shared reports false: offline, no pod is known.
func (FixedReplicas) Shared(_, _ labels.Selector) bool { return false }

// Fingerprint is the number of pods: all FixedReplicas answers depend on.
func (n FixedReplicas) Fingerprint() string { return fmt.Sprintf("replicas:%d", n) }

// NamedPods answers Build for offline rendering for ready pods of these names, as the
// controller would if every one of them were selected by every policy: each policy lists them
// all (sorted), and any two policies share them, so a rule name two policies both define is a
// conflict unless there is no pod.
type NamedPods []string

// Ready returns the names, sorted and without repeats, and their number.
func (p NamedPods) Ready(labels.Selector) ([]string, int32) {
	names := slices.Compact(slices.Sorted(slices.Values(p)))
	if names == nil {
		names = []string{}
	}
	return names, int32(len(names))
}

// Shared reports whether there is a pod.
func (p NamedPods) Shared(_, _ labels.Selector) bool { return len(p) > 0 }

// Fingerprint is the names.
func (p NamedPods) Fingerprint() string { return "names:" + strings.Join(p, "\x00") }

// The label on every ConfigMap the controller writes; the manager caches only those.
const (
	ManagedByLabel = "app.kubernetes.io/managed-by"
	ManagedByValue = "sluice"
)

// ConfigMap is the ConfigMap the controller writes for a namespace's payload, without the
// owner references (one per live policy, which need the policies' UIDs).
func ConfigMap(namespace string, p *policy.Payload) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{
			Namespace: namespace, Name: policy.ConfigMapName,
			Labels:      map[string]string{ManagedByLabel: ManagedByValue},
			Annotations: map[string]string{policy.HashAnnotation: p.Hash},
		},
		Data:       p.Data,
		BinaryData: p.BinaryData,
	}
}
