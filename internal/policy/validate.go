package policy

import (
	"errors"
	"fmt"
	"mime"
	"net/netip"
	"slices"
	"strings"

	"github.com/sluice-dev/sluice/internal/limiter"
)

// Validate checks what a reader relies on: known values, limits inside the exact-arithmetic
// bounds, parseable selectors and networks. It is the sidecar's guard against a bad file.
func (d *Document) Validate() error {
	if d.Version != Version {
		return fmt.Errorf("version %d is not the supported version %d", d.Version, Version)
	}
	var errs []error
	for i, p := range d.Policies {
		if err := p.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("policies[%d] (%s): %w", i, p.Name, err))
		}
	}
	return errors.Join(errs...)
}

// Validate checks one policy as Document.Validate does; render calls it on what it compiled.
func (p Policy) Validate() error {
	if p.Selector == nil && p.Domain == "" {
		return errors.New("neither a selector nor a domain: nothing would enforce the policy")
	}
	if p.Selector != nil {
		if err := p.Selector.validate(); err != nil {
			return fmt.Errorf("selector: %w", err)
		}
	}
	switch p.FailureMode {
	case FailureLocal, FailureOpen, FailureClosed:
	default:
		return fmt.Errorf("failureMode %q is not Local, Open or Closed", p.FailureMode)
	}
	for _, c := range p.TrustedProxies {
		if _, err := netip.ParsePrefix(c); err != nil {
			return fmt.Errorf("trustedProxies: %w", err)
		}
	}
	if p.Response.StatusCode < 400 || p.Response.StatusCode > 599 {
		return fmt.Errorf("response.statusCode %d is outside 400..599", p.Response.StatusCode)
	}
	if err := p.Response.validate(); err != nil {
		return err
	}
	if p.Pods != nil {
		if int(p.Replicas) != len(p.Pods) {
			return fmt.Errorf("replicas %d is not the number of pods listed, %d", p.Replicas, len(p.Pods))
		}
		for i := 1; i < len(p.Pods); i++ {
			if p.Pods[i-1] >= p.Pods[i] {
				return fmt.Errorf("pods are not sorted and distinct at %q, %q", p.Pods[i-1], p.Pods[i])
			}
		}
	}
	if p.Replicas < 0 {
		return fmt.Errorf("replicas %d is negative", p.Replicas)
	}
	if len(p.Rules) == 0 {
		return errors.New("no rules")
	}
	if err := p.validateJWT(); err != nil {
		return err
	}
	for _, r := range p.Rules {
		if err := errors.Join(r.validate(), r.Match.validate(), r.validateHeaders()); err != nil {
			return fmt.Errorf("rule %s: %w", r.Name, err)
		}
		if r.Descriptor() && p.Domain == "" {
			return fmt.Errorf("rule %s matches descriptors but the policy has no domain", r.Name)
		}
		if r.Descriptor() && r.LeakyMode == string(limiter.Queue) {
			return fmt.Errorf("rule %s matches descriptors and queues, which Envoy's rate limit service cannot", r.Name)
		}
		if r.Descriptor() && len(r.CountWhen) > 0 {
			return fmt.Errorf("rule %s matches descriptors and has countWhen, which Envoy's rate limit service cannot: it never sees the response", r.Name)
		}
		if r.Descriptor() && r.Algorithm == string(limiter.Concurrency) {
			return fmt.Errorf("rule %s matches descriptors and is a Concurrency rule, which Envoy's rate limit service cannot release: it never sees a request end", r.Name)
		}
		if r.Descriptor() && r.ResponseCost != nil {
			return fmt.Errorf("rule %s matches descriptors and has responseCost, which Envoy's rate limit service cannot: it never sees the response", r.Name)
		}
	}
	return nil
}

// validateResponseCost checks r's responseCost, if any, and what it does not combine with.
func (r Rule) validateResponseCost() error {
	rc := r.ResponseCost
	if rc == nil {
		return nil
	}
	if err := rc.validate(); err != nil {
		return err
	}
	switch {
	case !r.LimiterLimit().LateChargeable():
		return fmt.Errorf("responseCost applies only to FixedWindow and TokenBucket, not %s", r.Algorithm)
	case r.CostHeader != "":
		return errors.New("responseCost and costHeader are both set")
	case len(r.CountWhen) > 0:
		return errors.New("responseCost and countWhen are both set")
	case r.Lease != nil:
		return errors.New("responseCost and lease are both set: leased units are spent in advance")
	}
	return nil
}

// validateBlocked checks that a rule of limit 0 sets nothing that would not apply.
func (r Rule) validateBlocked() error {
	if r.Blocked() && (r.Algorithm == string(limiter.Concurrency) || r.Burst != 0 || r.LeakyMode == string(limiter.Queue) || r.Cost != 1 || r.CostHeader != "" || r.Lease != nil || len(r.CountWhen) > 0 || r.ResponseCost != nil) {
		return errors.New("limit 0 denies every request: Concurrency, burst, queueing, a cost other than 1, costHeader, lease, countWhen and responseCost do not apply")
	}
	return nil
}

// validateConcurrency checks what a Concurrency rule does not take.
func (r Rule) validateConcurrency() error {
	if r.Algorithm == string(limiter.Concurrency) && (r.Cost != 1 || r.CostHeader != "") {
		return errors.New("a Concurrency rule's request holds one slot: cost must be 1, without costHeader")
	}
	return nil
}

func (r Rule) validate() error {
	if c := r.Calendar; c != nil {
		if r.WindowMs != 0 {
			return errors.New("calendar and windowMs are both set")
		}
		if _, err := limiter.LoadZone(c.TimeZone); err != nil {
			return fmt.Errorf("calendar: %w", err)
		}
	}
	if err := r.LimiterLimit().Validate(); err != nil {
		return err
	}
	if err := r.validateBlocked(); err != nil {
		return err
	}
	if r.Cost < 1 || r.Cost > r.LimiterLimit().Capacity() {
		return fmt.Errorf("cost %d is outside 1..%d", r.Cost, r.LimiterLimit().Capacity())
	}
	for _, sr := range r.CountWhen {
		if sr.Lo < 100 || sr.Hi > 599 || sr.Lo > sr.Hi {
			return fmt.Errorf("countWhen range %d-%d is not within 100..599", sr.Lo, sr.Hi)
		}
	}
	if len(r.CountWhen) > 0 && !r.LimiterLimit().LateChargeable() {
		return fmt.Errorf("countWhen applies only to FixedWindow and TokenBucket, not %s", r.Algorithm)
	}
	if err := errors.Join(r.validateResponseCost(), r.validateConcurrency()); err != nil {
		return err
	}
	if r.Mode != Enforce && r.Mode != Shadow {
		return fmt.Errorf("mode %q is not Enforce or Shadow", r.Mode)
	}
	if l := r.Lease; l != nil {
		if err := r.LimiterLimit().Leasable(); err != nil {
			return fmt.Errorf("lease: %w", err)
		}
		if l.MaxAge() < limiter.MinLeaseAge || l.MaxAge() > limiter.MaxLeaseAge {
			return fmt.Errorf("lease.maxAgeMs %d is outside %d..%d", l.MaxAgeMs, limiter.MinLeaseAge.Milliseconds(), limiter.MaxLeaseAge.Milliseconds())
		}
		if l.MaxUnits < 0 || l.MaxUnits > r.LimiterLimit().Capacity() {
			return fmt.Errorf("lease.maxUnits %d is outside 0..%d (0: derived from the rate)", l.MaxUnits, r.LimiterLimit().Capacity())
		}
	}
	if r.Adaptive != nil {
		return r.validateAdaptive()
	}
	if err := r.validateKey(); err != nil {
		return err
	}
	return r.validateTenants()
}

// ValidateTenants checks r's tenant table as Validate does: what the controller checks before
// keeping a rule's last good table for the rule as it is now.
func (r Rule) ValidateTenants() error { return r.validateTenants() }

// validateTenants checks r's tenant table: a key part it has, entries sorted and distinct,
// and each tenant's limit valid for the rule (as the rule would be with it, WithLimit), with a
// cost that fits it.
func (r Rule) validateTenants() error {
	t := r.Tenants
	if t == nil {
		return nil
	}
	if t.Part < 0 || t.Part >= len(r.Key) {
		return fmt.Errorf("tenants.part %d is not one of the key's %d parts", t.Part, len(r.Key))
	}
	bucket := r.Algorithm == string(limiter.TokenBucket) || r.Algorithm == string(limiter.LeakyBucket)
	for i, e := range t.Limits {
		if e.Value == "" {
			return fmt.Errorf("tenants.limits[%d]: empty value", i)
		}
		if i > 0 && t.Limits[i-1].Value >= e.Value {
			return fmt.Errorf("tenants.limits are not sorted and distinct at %q, %q", t.Limits[i-1].Value, e.Value)
		}
		if err := r.validateTenant(e, bucket); err != nil {
			return fmt.Errorf("tenants.limits[%d] (%q): %w", i, e.Value, err)
		}
	}
	return nil
}

// ValidateTenant checks one tenant's limit for r as validate checks the rule's own, with the
// cost r charges: what the controller checks of each entry of a table before rendering it.
func (r Rule) ValidateTenant(e TenantLimit) error {
	return r.validateTenant(e, r.Algorithm == string(limiter.TokenBucket) || r.Algorithm == string(limiter.LeakyBucket))
}

func (r Rule) validateTenant(e TenantLimit, bucket bool) error {
	switch {
	case e.Limit == 0 && r.Algorithm == string(limiter.Concurrency):
		return errors.New("limit 0 does not apply to Concurrency: at least 1")
	case e.Limit == 0 && e.Burst != 0:
		return errors.New("limit 0 denies every request: burst does not apply")
	case e.Limit == 0:
		return nil
	case bucket && e.Burst < 1:
		return fmt.Errorf("burst %d is below 1", e.Burst)
	case !bucket && e.Burst != 0:
		return fmt.Errorf("burst applies only to TokenBucket and LeakyBucket, not %s", r.Algorithm)
	}
	w := r
	w.Limit, w.Burst = e.Limit, e.Burst
	lim := w.LimiterLimit()
	if err := lim.Validate(); err != nil {
		return err
	}
	if r.Cost > lim.Capacity() {
		return fmt.Errorf("the rule's cost %d is above the tenant's capacity %d: its requests could never pass", r.Cost, lim.Capacity())
	}
	return nil
}

// validateKey checks the rule's key parts.
func (r Rule) validateKey() error {
	if len(r.Key) == 0 && !r.Descriptor() {
		return errors.New("empty key (only a descriptor rule may have one counter for every match)")
	}
	for _, k := range r.Key {
		if (k.Source == SourceDescriptor) != r.Descriptor() {
			return fmt.Errorf("key part %s in a rule that does not match descriptors, or an HTTP key part in one that does", k.Source)
		}
		switch k.Source {
		case SourceClientIP, SourcePath, SourceMethod:
		case SourceHeader, SourceQuery, SourceJWTClaim:
			if k.Name == "" {
				return fmt.Errorf("key part %s without a name", k.Source)
			}
		case SourceDescriptor:
			if !slices.ContainsFunc(r.Match.Descriptors, func(e DescriptorEntry) bool { return e.Key == k.Name }) {
				return fmt.Errorf("key part descriptor %q is not one of the descriptor entries the rule matches", k.Name)
			}
		default:
			return fmt.Errorf("key part source %q is unknown", k.Source)
		}
	}
	return nil
}

// validate checks that each header condition of m (nil: every request) sets one of Value,
// Absent and NotIn.
func (m *Match) validate() error {
	if m == nil {
		return nil
	}
	for _, h := range m.Headers {
		if h.Absent && (h.Value != "" || len(h.NotIn) > 0) || len(h.NotIn) > 0 && h.Value != "" {
			return fmt.Errorf("header match %s sets more than one of value, absent, notIn", h.Name)
		}
	}
	for _, d := range m.Descriptors {
		if len(d.NotIn) > 0 && d.Value != "" && !strings.HasSuffix(d.Value, "*") {
			return fmt.Errorf("descriptor entry %s sets notIn beside an exact value", d.Key)
		}
	}
	switch m.JWT {
	case "", JWTVerified, JWTUnverified:
	default:
		return fmt.Errorf("match.jwt %q is not %s or %s", m.JWT, JWTVerified, JWTUnverified)
	}
	for i, r := range m.Routes {
		if r.PathExact != "" && r.PathPrefix != "" {
			return fmt.Errorf("route match %d sets both pathExact and pathPrefix", i)
		}
		for _, h := range r.Headers {
			if h.Absent || len(h.NotIn) > 0 {
				return fmt.Errorf("route match %d: header %s must match an exact value", i, h.Name)
			}
		}
	}
	return nil
}

const styles = "Draft, Legacy, Both, None, Draft7 or OpenAI"

func (r Response) validate() error {
	if !r.Headers.Valid() {
		return fmt.Errorf("response.headers %q is not %s", r.Headers, styles)
	}
	switch r.LegacyReset {
	case "", ResetSeconds, ResetUnixTime:
	default:
		return fmt.Errorf("response.legacyReset %q is not Seconds or UnixTime", r.LegacyReset)
	}
	if b := r.Body; b != nil {
		switch b.Format {
		case BodyJSON, BodyOpenAI, BodyText:
			if b.Template != "" || b.ContentType != "" {
				return fmt.Errorf("response.body: template and contentType apply only to format Template, not %s", b.Format)
			}
		case BodyTemplate:
			if err := CheckTemplate(b.Template); err != nil {
				return fmt.Errorf("response.body.template: %w", err)
			}
			if b.ContentType != "" {
				if _, _, err := mime.ParseMediaType(b.ContentType); err != nil {
					return fmt.Errorf("response.body.contentType %q: %w", b.ContentType, err)
				}
			}
		default:
			return fmt.Errorf("response.body.format %q is not JSON, OpenAI, Text or Template", b.Format)
		}
	}
	return nil
}

func (r Rule) validateHeaders() error {
	if r.Headers != "" && !r.Headers.Valid() {
		return fmt.Errorf("headers %q is not %s", r.Headers, styles)
	}
	return nil
}

// validateAdaptive checks an adaptive rule (r.Adaptive set): a Concurrency rule without key
// or tenants whose minLimit is within 1..limit, with tolerancePct in 100..1000.
func (r Rule) validateAdaptive() error {
	a := r.Adaptive
	switch {
	case r.Algorithm != string(limiter.Concurrency):
		return fmt.Errorf("adaptive applies only to algorithm Concurrency, not %s", r.Algorithm)
	case len(r.Key) > 0 || r.Tenants != nil:
		return errors.New("an adaptive rule is one limit per pod for every request it matches: no key parts, no tenants")
	case a.MinLimit < 1 || a.MinLimit > r.Limit || a.TolerancePct < 100 || a.TolerancePct > 1000:
		return fmt.Errorf("adaptive: want 1 <= minLimit %d <= limit %d and tolerancePct %d in 100..1000", a.MinLimit, r.Limit, a.TolerancePct)
	}
	return nil
}
