package config

import (
	"sync"

	"github.com/sluice-dev/sluice/internal/dataplane/keys"
	"github.com/sluice-dev/sluice/internal/dataplane/metrics"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/policy"
)

// Adaptive is a compiled adaptive rule (policy.Rule.Adaptive): the pod's own limit on the
// requests the rule matches in flight to its application. Its limit and series are kept across
// reloads (Adaptives); Match and Shadow are this configuration's.
type Adaptive struct {
	*AdaptiveLimit
	Name  string
	Match keys.Match
	// Shadow rules count the requests they would shed and shed none.
	Shadow bool
}

// AdaptiveLimit is an adaptive rule's limit with its series: LimitGauge is
// sluice_adaptive_limit, Shed counts the requests shed (or, in Shadow, that would be).
type AdaptiveLimit struct {
	*limiter.Adaptive
	LimitGauge *metrics.Gauge
	Shed       *metrics.Counter
}

// Adaptives keeps each adaptive rule's limit from one configuration to the next while its
// parameters stay the same, so that a reload (the controller renders again whenever a selected
// pod comes or goes) keeps the limit learned and the requests in flight counted. New
// parameters start a new limit. The zero value is ready; safe for concurrent use.
type Adaptives struct {
	mu     sync.Mutex
	byRule map[ruleID]adaptiveEntry
}

type ruleID struct{ policy, rule string }

type adaptiveEntry struct {
	params limiter.AdaptiveParams
	a      *AdaptiveLimit
}

// get returns the limit of rule r of policy p, made with m's series when new.
func (as *Adaptives) get(p string, r policy.Rule, m *metrics.Metrics) *AdaptiveLimit {
	id, params := ruleID{p, r.Name}, r.AdaptiveParams()
	as.mu.Lock()
	defer as.mu.Unlock()
	if e, ok := as.byRule[id]; ok && e.params == params {
		return e.a
	}
	a := &AdaptiveLimit{Adaptive: limiter.NewAdaptive(params)}
	a.LimitGauge, a.Shed = m.Adaptive(p, r.Name)
	a.LimitGauge.Set(float64(a.Limit()))
	if as.byRule == nil {
		as.byRule = map[ruleID]adaptiveEntry{}
	}
	as.byRule[id] = adaptiveEntry{params: params, a: a}
	return a
}

// retain forgets the limits of the adaptive rules c does not have.
func (as *Adaptives) retain(c *Config) {
	keep := map[ruleID]bool{}
	for _, p := range c.Policies {
		for _, a := range p.Adaptive {
			keep[ruleID{p.Name, a.Name}] = true
		}
	}
	as.mu.Lock()
	defer as.mu.Unlock()
	for id := range as.byRule {
		if !keep[id] {
			delete(as.byRule, id)
		}
	}
}
