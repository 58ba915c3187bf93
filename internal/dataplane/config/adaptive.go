package config

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/internal/dataplane/metrics"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/policy"
)

// Adaptive is a policy's adaptive limit on the requests in flight to the pod's application
// (policy.Policy.Adaptive), with its series.
type Adaptive struct {
	*limiter.Adaptive
	// LimitGauge is sluice_adaptive_limit; Shed counts the requests shed.
	LimitGauge prometheus.Gauge
	Shed       prometheus.Counter
}

// Adaptives keeps each policy's Adaptive from one configuration to the next while its
// parameters stay the same, so that a reload (the controller renders again whenever a selected
// pod comes or goes) keeps the limit learned and the requests in flight counted. New
// parameters start a new limit. The zero value is ready; safe for concurrent use.
type Adaptives struct {
	mu       sync.Mutex
	byPolicy map[string]adaptiveEntry
}

type adaptiveEntry struct {
	params policy.Adaptive
	a      *Adaptive
}

// get returns policy name's Adaptive of params, made with m's series when new.
func (as *Adaptives) get(name string, params policy.Adaptive, m *metrics.Metrics) *Adaptive {
	as.mu.Lock()
	defer as.mu.Unlock()
	if e, ok := as.byPolicy[name]; ok && e.params == params {
		return e.a
	}
	a := &Adaptive{Adaptive: limiter.NewAdaptive(params.Params())}
	a.LimitGauge, a.Shed = m.Adaptive(name)
	a.LimitGauge.Set(float64(a.Limit()))
	if as.byPolicy == nil {
		as.byPolicy = map[string]adaptiveEntry{}
	}
	as.byPolicy[name] = adaptiveEntry{params: params, a: a}
	return a
}

// retain forgets the Adaptives of the policies c does not have, or has without one.
func (as *Adaptives) retain(c *Config) {
	keep := map[string]bool{}
	for _, p := range c.Policies {
		keep[p.Name] = p.Adaptive != nil
	}
	as.mu.Lock()
	defer as.mu.Unlock()
	for name := range as.byPolicy {
		if !keep[name] {
			delete(as.byPolicy, name)
		}
	}
}
