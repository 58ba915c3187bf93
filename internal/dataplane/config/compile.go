// Package config loads the sidecar's configuration: policies.json and this pod's labels, the
// policies whose selectors match the labels, compiled into what the request path uses
// (matchers, key builders, limits and this pod's local share of them, metric handles). It
// watches both files and swaps a new configuration in atomically; a file that does not load
// never replaces a good configuration.
package config

import (
	"bufio"
	"bytes"
	"cmp"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/internal/dataplane/keys"
	"github.com/sluice-dev/sluice/internal/dataplane/metrics"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/limiter/lease"
	"github.com/sluice-dev/sluice/internal/policy"
)

// Config is one compiled configuration. It is immutable once published and safe for
// concurrent use.
type Config struct {
	// Generation counts the configurations this process has published, starting at 1.
	Generation uint64
	// Present is false when policies.json does not exist: traffic passes through unlimited.
	Present bool
	// Namespace is the document's namespace.
	Namespace string
	// Policies are the selected policies, in the document's order (by name).
	Policies []*Policy
	// Labels are the pod labels the policies were selected with.
	Labels map[string]string
	// Domains are, for the RLS server (Loader.Domains), the descriptor rules of every policy
	// with a domain, by domain, in the document's order; Policies is then empty.
	Domains map[string][]*Rule
	// hash identifies the inputs, so an unchanged re-read publishes nothing.
	hash string
}

// Policy is a compiled policy.Policy.
type Policy struct {
	Name string
	// FailureMode is what the policy does when Redis cannot decide: FailureOpen, FailureClosed
	// or, for any other value, FailureLocal.
	FailureMode policy.FailureMode
	// StatusCode answers a limited request.
	StatusCode int
	// RetryAfterMs adds retry-after-ms, the exact wait, beside Retry-After.
	RetryAfterMs bool
	// UnixReset makes X-RateLimit-Reset a Unix time rather than seconds from now.
	UnixReset bool
	// Body is a limited request's body format (BodyJSON when the policy sets none); for
	// BodyTemplate, Template and ContentType.
	Body        policy.BodyFormat
	Template    *policy.Template
	ContentType string
	Rules       []*Rule
	Fallback    *metrics.Fallback
	// Adaptive are the policy's adaptive rules (not among Rules: a request takes a place in
	// each that matches it before Rules are decided).
	Adaptive []*Adaptive
}

// Rule is a compiled policy.Rule.
type Rule struct {
	Policy *Policy
	Name   string
	Match  keys.Match
	Key    keys.Key
	// Limit is the rule's limit, shared by every replica through Redis.
	Limit limiter.Limit
	// Local is this pod's share of Limit, used without Redis (see LocalShare). When
	// ZeroShare is set the pod holds no unit of the rule: Local is then a one-unit limit of the
	// same window that LocalCost always exceeds, so the local store denies every request.
	Local limiter.Limit
	// ZeroShare is true when this pod's share of the rule is 0 units: the fleet's other pods
	// hold the whole limit while Redis cannot decide, and this pod denies the rule locally.
	ZeroShare bool
	// Blocked is true for a rule of limit 0, which denies every request it matches: Limit
	// and Local are a one-unit stand-in that Cost (and decide.Request.Add) always exceeds, so
	// either store denies it without taking anything, and ZeroShare is set.
	Blocked bool
	// Cost is the default cost; CostHeader, when set, may carry another (1..Capacity).
	Cost       int64
	CostHeader string
	// Shadow rules count and report but never deny or delay.
	Shadow bool
	// Style is the rule's header style: its own, else its policy's.
	Style policy.HeaderStyle
	// Tokens is true for a rule whose cost comes from the response (ResponseCost): the
	// OpenAI style reports it as -tokens, the others as -requests.
	Tokens bool
	// CountWhen, when not empty, makes the rule check at admission and charge after the
	// response only when its status is in one of the ranges.
	CountWhen []policy.StatusRange
	// ResponseCost, when set, takes the request's cost from its response: Cost (the
	// minimumCost) is charged at admission, the rest of what the response reports when it
	// ends.
	ResponseCost *ResponseCost
	// Queue is true for LeakyBucket Queue rules, which delay requests.
	Queue bool
	// Descriptors are the entries a descriptor rule matches (see policy.Match); nil for an
	// HTTP rule.
	Descriptors []policy.DescriptorEntry
	// Lease is the rule's lease parameters; nil decides every request in the store.
	Lease *lease.Params
	// DraftPolicy is the RateLimit-Policy field value, `"name";q=capacity;w=seconds`.
	DraftPolicy string
	// Draft7Policy is the draft 07 RateLimit-Policy field value, `capacity;w=seconds`.
	Draft7Policy string
	// LimitValue is the X-RateLimit-Limit value, the capacity in decimal.
	LimitValue string
	// Quoted is the rule name as a structured-field string, for the RateLimit field.
	Quoted  string
	Metrics *metrics.Rule

	// src is the rendered rule the limits were set from (setLimit), shares what this pod's
	// share is computed from: what a variant is made of.
	src    policy.Rule
	shares shares
	// tenants, when set, holds the rule's variant per tenant (tenants.go); overrides the
	// variants Envoy's limit overrides asked for (descriptor rules only).
	tenants   *tenants
	overrides *overrides
}

// ResponseCost is a compiled policy.ResponseCost: where a response reports its cost.
type ResponseCost struct {
	// Header is the canonical name of the response header carrying the cost; empty for a
	// JSON field.
	Header string
	// Path is the JSON field's keys, outermost first; nil for a header.
	Path []string
}

// CostOf returns the cost of r under the rule: CostHeader's value when it is a positive
// integer within capacity, the rule's Cost otherwise.
func (r *Rule) CostOf(header map[string][]string) int64 {
	return r.CostFrom(keys.HTTPHeader(header))
}

// CostFrom is CostOf for any request view's header.
func (r *Rule) CostFrom(header keys.Header) int64 {
	if r.CostHeader != "" {
		if v, ok := header.Get(r.CostHeader); ok {
			if n, ok := keys.ParseCost(v, r.Limit.Capacity()); ok {
				return n
			}
		}
	}
	return r.Cost
}

// LocalCost is cost clamped to the local share's capacity: a request the shared limit could
// admit is never refused outright (ReasonCostExceedsCapacity) because the share is smaller.
// A request the shared limit can never admit (cost above its capacity), and any request of a
// rule this pod holds no share of (ZeroShare), costs more than Local's capacity, which the
// local store denies (ReasonCostExceedsCapacity, no retry) without taking anything.
func (r *Rule) LocalCost(cost int64) int64 {
	if r.ZeroShare || cost > r.Limit.Capacity() {
		return r.Local.Capacity() + 1
	}
	return min(cost, r.Local.Capacity())
}

// Compile is CompileFor a pod whose name is not known: it holds the share of an unnamed pod,
// or none of a policy that lists its pods.
func Compile(doc *policy.Document, labels map[string]string, m *metrics.Metrics) (*Config, error) {
	return CompileFor(doc, labels, "", m)
}

// CompileFor selects the policies of doc that match labels and compiles them for the pod
// named podName (its rank in each policy's Pods gives its local shares; empty when the pod's
// name is not known). m provides the metric handles.
func CompileFor(doc *policy.Document, labels map[string]string, podName string, m *metrics.Metrics) (*Config, error) {
	return compileFor(doc, labels, podName, m, &Verifiers{}, &Adaptives{})
}

// compileFor is CompileFor taking the token verifiers of policies with jwt from vs.
func compileFor(doc *policy.Document, labels map[string]string, podName string, m *metrics.Metrics, vs *Verifiers, as *Adaptives) (*Config, error) {
	c := &Config{Present: true, Namespace: doc.Namespace, Labels: labels}
	for _, p := range doc.Policies {
		if !p.Selects(labels) {
			continue
		}
		cp, err := compilePolicyRules(p, podName, m, false, vs, as)
		if err != nil {
			return nil, fmt.Errorf("policy %s: %w", p.Name, err)
		}
		c.Policies = append(c.Policies, cp)
	}
	return c, nil
}

// CompileDomains compiles, for the RLS server replica podName, the descriptor rules of every
// policy of doc that has a domain (Config.Domains); HTTP rules and pod selectors are ignored.
func CompileDomains(doc *policy.Document, podName string, m *metrics.Metrics) (*Config, error) {
	c := &Config{Present: true, Namespace: doc.Namespace, Domains: map[string][]*Rule{}}
	for _, p := range doc.Policies {
		if p.Domain == "" {
			continue
		}
		cp, err := compilePolicyRules(p, podName, m, true, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("policy %s: %w", p.Name, err)
		}
		c.Domains[p.Domain] = append(c.Domains[p.Domain], cp.Rules...)
	}
	return c, nil
}

// compilePolicyRules compiles p with its descriptor rules (descriptors) or its HTTP rules, the
// latter with its token verifier from vs when it has jwt and its adaptive rules' limits from as.
func compilePolicyRules(p policy.Policy, podName string, m *metrics.Metrics, descriptors bool, vs *Verifiers, as *Adaptives) (*Policy, error) {
	trusted, err := keys.ParseTrusted(p.TrustedProxies)
	if err != nil {
		return nil, fmt.Errorf("trustedProxies: %w", err)
	}
	var jwt *keys.JWT
	if p.JWT != nil && !descriptors {
		if jwt, err = vs.get(p.Name, p.JWT, m); err != nil {
			return nil, err
		}
	}
	cp := &Policy{
		Name:         p.Name,
		StatusCode:   p.Response.StatusCode,
		RetryAfterMs: p.Response.RetryAfterMs,
		UnixReset:    p.Response.LegacyReset == policy.ResetUnixTime,
		Body:         policy.BodyJSON,
		Fallback:     m.ForPolicy(p.Name),
	}
	if b := p.Response.Body; b != nil && b.Format != "" {
		cp.Body = b.Format
		if b.Format == policy.BodyTemplate {
			if cp.Template, err = policy.ParseTemplate(b.Template); err != nil {
				return nil, fmt.Errorf("response.body.template: %w", err)
			}
			cp.ContentType = cmp.Or(b.ContentType, "text/plain; charset=utf-8")
		}
	}
	switch p.FailureMode {
	case policy.FailureOpen, policy.FailureClosed:
		cp.FailureMode = p.FailureMode
	default:
		cp.FailureMode = policy.FailureLocal
	}
	if cp.StatusCode == 0 {
		cp.StatusCode = 429
	}
	for _, r := range p.Rules {
		if r.Descriptor() != descriptors {
			continue // a sidecar decides HTTP rules, the RLS server descriptor rules
		}
		if r.Adaptive != nil {
			cp.Adaptive = append(cp.Adaptive, &Adaptive{
				AdaptiveLimit: as.get(p.Name, r, m),
				Name:          r.Name,
				Match:         keys.CompileMatch(r.Match).WithJWT(jwt),
				Shadow:        r.Mode == policy.Shadow,
			})
			continue
		}
		rule, err := compileRule(cp, p, r, podName, trusted, jwt, m)
		if err != nil {
			return nil, fmt.Errorf("rule %s: %w", r.Name, err)
		}
		cp.Rules = append(cp.Rules, rule)
	}
	return cp, nil
}

// compileRule compiles r of policy p (compiled into cp) for the pod podName.
func compileRule(cp *Policy, p policy.Policy, r policy.Rule, podName string, trusted keys.Trusted, jwt *keys.JWT, m *metrics.Metrics) (*Rule, error) {
	rule := &Rule{
		Policy:      cp,
		Name:        r.Name,
		Match:       keys.CompileMatch(r.Match).WithJWT(jwt),
		Key:         keys.CompileKey(p.Name, r.Name, r.Key, trusted).WithJWT(jwt),
		CostHeader:  r.CostHeader,
		Shadow:      r.Mode == policy.Shadow,
		Style:       cmp.Or(r.Headers, p.Response.Headers, policy.HeadersBoth),
		Tokens:      r.ResponseCost != nil,
		CountWhen:   r.CountWhen,
		Descriptors: descriptorsOf(r),
		Quoted:      strconv.Quote(r.Name), // rule names are DNS labels: a valid sf-string as is
		Metrics:     m.ForRule(p.Name, r.Name),
		shares:      shares{pods: p.Pods, replicas: p.Replicas, pod: podName},
	}
	if err := rule.setLimit(r); err != nil {
		return nil, err
	}
	if r.Algorithm == string(limiter.Concurrency) {
		rule.Metrics.SlotsHeld = m.SlotsHeld(p.Name, r.Name)
	}
	if rc := r.ResponseCost; rc != nil {
		rule.ResponseCost = &ResponseCost{Header: rc.Header, Path: rc.Path()}
		rule.Metrics.ResponseCostMissing = m.ResponseCostMissing(p.Name, r.Name)
	}
	if r.Descriptor() {
		rule.overrides = &overrides{applied: m.LimitOverride(p.Name, r.Name, true), ignored: m.LimitOverride(p.Name, r.Name, false)}
	}
	if r.Tenants != nil {
		var err error
		if rule.tenants, err = rule.compileTenants(*r.Tenants); err != nil {
			return nil, err
		}
	}
	return rule, nil
}

// setLimit sets the fields of rule that follow from r's limit: the limits, this pod's share,
// the cost, the lease, the header values. A variant of the rule (a tenant's, an override's)
// sets them again on a copy.
func (rule *Rule) setLimit(r policy.Rule) error {
	lim := r.LimiterLimit()
	if err := lim.Validate(); err != nil {
		return err
	}
	window := max(CeilSeconds(lim.Window), 1) // the draft's w is a positive integer
	local, zero := LocalShare(lim, rule.shares.policy(), rule.shares.pod)
	capacity := lim.Capacity()
	if r.Blocked() {
		local, zero, capacity = lim, true, 0
	}
	rule.src = r
	rule.Limit, rule.Local, rule.ZeroShare, rule.Blocked = lim, local, zero, r.Blocked()
	rule.Cost = max(r.Cost, 1)
	rule.Queue = lim.Algorithm == limiter.LeakyBucket && lim.Mode == limiter.Queue
	rule.Lease = nil
	if r.Lease != nil {
		rule.Lease = &lease.Params{MaxAge: r.Lease.MaxAge(), MaxUnits: r.Lease.MaxUnits}
	}
	rule.LimitValue = strconv.FormatInt(capacity, 10)
	rule.DraftPolicy = rule.Quoted + ";q=" + rule.LimitValue + ";w=" + strconv.FormatInt(window, 10)
	rule.Draft7Policy = rule.LimitValue + ";w=" + strconv.FormatInt(window, 10)
	if lim.Algorithm == limiter.Concurrency {
		// The draft's unit for requests in flight; no window, and no reset: a slot frees
		// when a request ends, which nothing knows in advance.
		rule.DraftPolicy = rule.Quoted + ";q=" + rule.LimitValue + `;qu="concurrent-requests"`
		rule.Draft7Policy = rule.LimitValue
	}
	return nil
}

func descriptorsOf(r policy.Rule) []policy.DescriptorEntry {
	if !r.Descriptor() {
		return nil
	}
	return r.Match.Descriptors
}

// MatchesDescriptor reports whether a descriptor rule matches a descriptor: the same number
// of entries, entry i with the rule's key i and a value its entry i matches
// (policy.DescriptorEntry.Matches: the rule's value, a wildcard's prefix, or none of its
// notIn). value(i) and key(i) read the descriptor's entry i; n is its number of entries.
func (r *Rule) MatchesDescriptor(n int, key, value func(i int) string) bool {
	if n != len(r.Descriptors) || n == 0 {
		return false
	}
	for i, e := range r.Descriptors {
		if key(i) != e.Key || !e.Matches(value(i)) {
			return false
		}
	}
	return true
}

// LocalShare is the share of lim the pod podName holds under p while Redis cannot decide
// (see RawShare), or, when the pod holds no unit of it, a valid one-unit stand-in that
// Rule.LocalCost makes deny, with zero true.
func LocalShare(lim limiter.Limit, p policy.Policy, podName string) (share limiter.Limit, zero bool) {
	share = RawShare(lim, p, podName)
	if share.Limit > 0 && (share.Burst > 0 || !bucket(lim)) {
		return share, false
	}
	share = lim
	share.Limit = 1
	if lim.Burst > 0 {
		share.Burst = 1
	}
	return share, true
}

// RawShare is the share of lim the pod podName holds under p, split by policy.Policy.PodShare
// (by the pod's rank among p's Pods, so that the fleet's shares sum to the limit exactly; 0
// for a pod p does not list; floor(limit/replicas) when p lists no pods). Its Limit or Burst
// may be 0: the pod then holds no unit (LocalShare).
//
// The window algorithms split Limit, per the same window. The buckets split their capacity
// (Burst, default Limit), and their rate, Limit per Window, among the pods that hold part of
// the capacity (the first min(pods, capacity) ranks): a pod without capacity could not use a
// rate. The rate is split as k*Limit per k*Window, with k the least factor (1 when those pods
// are no more than Limit) that gives each of them at least one unit, as long as k*Window
// stays within limiter.MaxWindow. The fleet's rates then sum to Limit per Window exactly, and
// a pod ranked beyond Limit still refills its share of the burst: 1 per second, burst 5, over
// 2 pods is 1 per 2 s, burst 3 and 1 per 2 s, burst 2. Only a rate below one unit a day per
// pod leaves a pod no refill (and then no share: a bucket that never refills would stay empty
// after one outage).
func RawShare(lim limiter.Limit, p policy.Policy, podName string) limiter.Limit {
	share := lim
	if !bucket(lim) {
		share.Limit = p.PodShare(lim.Limit, podName)
		return share
	}
	capacity := lim.Capacity()
	m := min(int64(p.Sharers()), capacity) // the pods holding part of the capacity
	k := int64(1)
	if lim.Limit < m {
		k = min((m+lim.Limit-1)/lim.Limit, max(int64(limiter.MaxWindow/lim.Window), 1))
	}
	share.Burst = p.PodShare(capacity, podName)
	share.Limit = p.PodShareAmong(lim.Limit*k, int32(m), podName)
	share.Window = lim.Window * time.Duration(k)
	if share.Burst == 0 {
		share.Limit = 0
	}
	return share
}

// bucket reports whether lim is a TokenBucket or a LeakyBucket: a rate and a capacity.
func bucket(lim limiter.Limit) bool {
	return lim.Algorithm == limiter.TokenBucket || lim.Algorithm == limiter.LeakyBucket
}

// CeilSeconds is d in whole seconds, rounded up; 0 for d <= 0. Every second count the sidecar
// sends (headers, body, the draft policy's w) is made with it, clamped by the caller where the
// value must be at least 1.
func CeilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// ParseLabels parses a downward API labels file: one `key="value"` per line, the value a Go
// quoted string. Blank lines are skipped; anything else malformed is an error.
func ParseLabels(data []byte) (map[string]string, error) {
	labels := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || k == "" || strings.ContainsAny(k, " \t\"") {
			return nil, fmt.Errorf("labels line %d: want key=\"value\", got %q", n, line)
		}
		uv, err := strconv.Unquote(v)
		if err != nil || !strings.HasPrefix(v, `"`) {
			return nil, fmt.Errorf("labels line %d: value of %s is not a quoted string: %q", n, k, v)
		}
		labels[k] = uv
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("labels: %w", err)
	}
	return labels, nil
}

// ParseLabelList parses "k=v,k2=v2" (the --pod-labels flag).
func ParseLabelList(s string) (map[string]string, error) {
	labels := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, fmt.Errorf("pod label %q is not key=value", kv)
		}
		labels[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return labels, nil
}
