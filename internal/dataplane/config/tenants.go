package config

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/sluice-dev/sluice/internal/dataplane/metrics"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/policy"
)

// A rule's variants: the rule with another limit, for some of its requests. A tenant's entry
// in the rule's table (policy.Tenants) and an Envoy descriptor's limit override each make one:
// a copy of the rule whose limit, this pod's share of it, lease and header values follow from
// the new limit (setLimit), sharing everything else (match, key, metrics). A request decided
// by a variant is decided, keyed and counted as the rule's, at the variant's limit, so the
// same key under its two limits is one state, which the limiter adapts (see docs/policy.md).

// shares is what a pod's share of a limit is computed from (LocalShare): the policy's pods
// (or replicas) and the pod's name.
type shares struct {
	pods     []string
	replicas int32
	pod      string
}

func (s shares) policy() policy.Policy { return policy.Policy{Pods: s.pods, Replicas: s.replicas} }

// variant returns a copy of rule with the limits of r (rule.src with another limit or window).
func (rule *Rule) variant(r policy.Rule) (*Rule, error) {
	v := *rule
	v.tenants, v.overrides = nil, nil
	if err := v.setLimit(r); err != nil {
		return nil, err
	}
	return &v, nil
}

// tenants is a compiled policy.Tenants: the rule's variant for each tenant, by the tenant's
// key part as the rule's keys write it (keys.Key.EncodePart). Tenants of the same limit and
// burst share one variant, so a table of thousands of tenants on a few tiers costs a map entry
// each.
type tenants struct {
	part  int
	rules map[string]*Rule
}

// compileTenants compiles the rule's table t.
func (rule *Rule) compileTenants(t policy.Tenants) (*tenants, error) {
	type limits struct{ limit, burst int64 }
	out := &tenants{part: t.Part, rules: make(map[string]*Rule, len(t.Limits))}
	variants := map[limits]*Rule{}
	for _, e := range t.Limits {
		v := variants[limits{e.Limit, e.Burst}]
		if v == nil {
			var err error
			if v, err = rule.variant(rule.src.WithLimit(e.Limit, e.Burst)); err != nil {
				return nil, fmt.Errorf("tenant %q: %w", e.Value, err)
			}
			variants[limits{e.Limit, e.Burst}] = v
		}
		// Two values a key writes alike (an address in two spellings): the first, in the
		// table's order, applies.
		enc := rule.Key.EncodePart(t.Part, e.Value)
		if _, dup := out.rules[enc]; !dup {
			out.rules[enc] = v
		}
	}
	return out, nil
}

// Tenants is the number of tenants the rule has its own limit for (0 without a table).
func (rule *Rule) Tenants() int {
	if rule.tenants == nil {
		return 0
	}
	return len(rule.tenants.rules)
}

// ForKey returns the rule that decides a request whose key (written by rule.Key) is key: the
// variant of the key's tenant when the rule's table has one, else the rule itself. A request
// with the rule's Missing key gets the rule itself: that key is shared by every request
// lacking a part, whatever its tenant. It does not allocate.
func (rule *Rule) ForKey(key string) *Rule {
	if rule.tenants == nil {
		return rule
	}
	part, ok := rule.Key.PartOf(key, rule.tenants.part)
	if !ok {
		return rule
	}
	if v := rule.tenants.rules[part]; v != nil {
		return v
	}
	return rule
}

// maxOverrides bounds the variants a rule keeps for Envoy's limit overrides; others are made
// for each request that asks for them.
const maxOverrides = 64

// overrides holds a descriptor rule's variants for the limit overrides Envoy sent, and the
// counters of the overrides applied and ignored.
type overrides struct {
	m                sync.Map // override -> *Rule
	n                atomic.Int32
	applied, ignored *metrics.Counter
}

// Override is an Envoy descriptor's limit override: Limit per WindowMs, or per calendar
// month (in UTC) when Month is set.
type Override struct {
	Limit    int64
	WindowMs int64
	Month    bool
}

// WithOverride returns the variant of a descriptor rule that an Envoy descriptor's limit
// override o asks for: the rule's algorithm, key and mode at o.Limit per o's window, a
// bucket's burst o.Limit (an override is a whole limit), counted apart from the rule's own
// window when o's differs (its state is keyed by the window, as envoyproxy/ratelimit keys an
// override's counter by its unit). ok is false, with the rule itself, when o makes no valid
// rule: a window outside 1ms..24h, a month for another algorithm than FixedWindow, a limit
// beyond the algorithm's bounds; the rule's own limit then applies. Each outcome counts in
// sluice_limit_overrides_total.
func (rule *Rule) WithOverride(o Override) (*Rule, bool) {
	if rule.overrides == nil {
		return rule, false
	}
	if v, ok := rule.overrides.m.Load(o); ok {
		rule.overrides.applied.Inc()
		return v.(*Rule), true
	}
	v, err := rule.overrideVariant(o)
	if err != nil {
		rule.overrides.ignored.Inc()
		return rule, false
	}
	if rule.overrides.n.Load() < maxOverrides {
		if got, loaded := rule.overrides.m.LoadOrStore(o, v); loaded {
			v = got.(*Rule)
		} else {
			rule.overrides.n.Add(1)
		}
	}
	rule.overrides.applied.Inc()
	return v, true
}

func (rule *Rule) overrideVariant(o Override) (*Rule, error) {
	if o.Limit < 0 || o.Limit > limiter.MaxLimit {
		return nil, fmt.Errorf("limit %d is outside 0..%d", o.Limit, limiter.MaxLimit)
	}
	r := rule.src.WithLimit(o.Limit, o.Limit)
	switch {
	case o.Month && r.Algorithm != string(limiter.FixedWindow):
		return nil, fmt.Errorf("a month applies only to FixedWindow, not %s", r.Algorithm)
	case o.Month:
		r = r.WithWindow(0, &policy.Calendar{Period: string(limiter.Month), TimeZone: "UTC"})
	default:
		r = r.WithWindow(o.WindowMs, nil)
	}
	return rule.variant(r)
}
