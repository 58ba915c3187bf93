// Package metrics holds the sidecar's Prometheus metrics. Labels are policy and rule names from
// the configuration, decisions, states and error kinds: a bounded set. Client keys never become
// labels.
package metrics

import (
	"io"
	"net/http"
	httppprof "net/http/pprof"
)

// Decision label values of sluice_requests_total.
const (
	Allowed      = "allowed"
	Denied       = "denied"
	ShadowDenied = "shadow_denied"
	// NotCharged counts a rule that did not deny a request another rule denied: the request
	// charged it nothing.
	NotCharged = "not_charged"
)

// policyRuleLabels label the series of one rule's own: its policy and its name.
var policyRuleLabels = []string{policyLabel, "rule"}

// policyLabel names a policy in every series of one.
const policyLabel = "policy"

// Metrics are the sidecar's collectors, registered on one registry. Safe for concurrent use.
type Metrics struct {
	Registry *Registry

	requests           *CounterVec
	fallback           *CounterVec
	DecisionSeconds    *Histogram
	RedisErrors        *CounterVec
	BreakerState       *Gauge
	BreakerTransitions *CounterVec
	ConfigGeneration   *Gauge
	ConfigReloads      *Counter
	ReloadFailures     *Counter
	ConfigPolicies     *Gauge
	QueueDelaySeconds  *Histogram
	QueueAbandoned     *Counter
	UpstreamErrors     *Counter
	// OutageUnits counts the units admitted locally while Redis could not decide, by what
	// became of them: "charged" to Redis when it was back, "expired" (their window passed
	// first), "dropped" (the backlog was full, see proxy.Options.BacklogMaxKeys).
	OutageUnits *CounterVec

	responseCostMissing *CounterVec
	slotsHeld           *GaugeVec
	adaptiveLimit       *GaugeVec
	adaptiveShed        *CounterVec
	jwt                 jwtCollectors
	limitOverrides      *CounterVec
}

// New creates the series and registers them, with the process's own (registerProcess), on a
// new registry.
func New() *Metrics {
	r := &Registry{}
	m := &Metrics{
		Registry: r,
		requests: r.counterVec("sluice_requests_total",
			"Rule decisions by policy, rule and decision (allowed, denied, shadow_denied, not_charged: the rule did not deny a request another rule denied, so it was not charged). A request counts once per matching rule.",
			[]string{"policy", "rule", "decision"}),
		fallback: r.counterVec("sluice_fallback_decisions_total",
			"Rule decisions made without Redis (breaker open, Redis failed, or no Redis configured), by policy and failure mode (local, open, closed).",
			[]string{"policy", "mode"}),
		DecisionSeconds: r.histogram("sluice_decision_duration_seconds",
			"Time to decide a request over all its matching rules, excluding queue delay.",
			[]float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25}),
		RedisErrors: r.counterVec("sluice_redis_errors_total",
			"Redis calls that failed, by kind (timeout, unavailable; late_charge: a countWhen or responseCost charge after the response).",
			[]string{"kind"}),
		BreakerState: r.gauge("sluice_breaker_state",
			"Redis circuit breaker state: 0 closed, 1 half-open, 2 open."),
		BreakerTransitions: r.counterVec("sluice_breaker_transitions_total",
			"Redis circuit breaker state changes, by target state.",
			[]string{"to"}),
		ConfigGeneration: r.gauge("sluice_config_generation",
			"Generation of the configuration in use; increases with every successful reload that changed something."),
		ConfigReloads: r.counter("sluice_config_reloads_total",
			"Successful configuration loads that changed the configuration in use."),
		ReloadFailures: r.counter("sluice_config_reload_failures_total",
			"Configuration loads that failed (unreadable, unparseable or invalid); the last good configuration stays in use."),
		ConfigPolicies: r.gauge("sluice_config_policies",
			"Policies in use: those of policies.json whose selector matches this pod's labels."),
		QueueDelaySeconds: r.histogram("sluice_queue_delay_seconds",
			"Delays imposed on requests by LeakyBucket Queue rules.",
			[]float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}),
		QueueAbandoned: r.counter("sluice_queue_abandoned_total",
			"Queued requests whose client went away during the delay; they never reached the upstream."),
		UpstreamErrors: r.counter("sluice_upstream_errors_total",
			"Requests the upstream could not answer (answered 502 by the sidecar)."),
		OutageUnits: r.counterVec("sluice_outage_units_total",
			"Units admitted on the local share while Redis could not decide, by outcome: charged to Redis once it was back, expired with their window first, or dropped (backlog full).",
			[]string{"outcome"}),
		responseCostMissing: r.counterVec("sluice_response_cost_missing_total",
			"Responses of responseCost rules that reported no valid cost (no header or field, a value that is no non-negative integer, a body too large to search, or no response from the upstream), by policy and rule: such a request was charged its minimumCost.",
			policyRuleLabels),
	}
	m.slotsHeld = r.gaugeVec("sluice_concurrency_slots_held",
		"Slots of Concurrency rules this pod's requests hold now (admitted, response not finished), by policy and rule.",
		policyRuleLabels)
	m.adaptiveLimit = r.gaugeVec("sluice_adaptive_limit",
		"An adaptive rule's limit on the requests it matches in flight to this pod's application, now.",
		policyRuleLabels)
	m.adaptiveShed = r.counterVec("sluice_adaptive_shed_total",
		"Requests shed with 503 by an adaptive rule's limit on the requests in flight to this pod's application (in mode Shadow: that it would have shed, and let pass); not in sluice_requests_total.",
		policyRuleLabels)
	m.jwt = newJWTCollectors(r)
	m.limitOverrides = r.counterVec("sluice_limit_overrides_total",
		"Envoy descriptors whose limit override a descriptor rule decided, by policy, rule and outcome: applied, or ignored (an override no rule of that algorithm can take: the rule's own limit applied).",
		append(policyRuleLabels[:len(policyRuleLabels):len(policyRuleLabels)], "outcome"))
	registerProcess(r)
	return m
}

// LeaseStats is what the leasing engine counted (lease.Stats), for RegisterLeases.
type LeaseStats struct {
	Decisions, StoreCalls, Leases, UnitsReturned int64
}

// RegisterLeases registers the leased rules' counters, read from stats at each scrape:
// sluice_lease_decisions_total and sluice_lease_store_calls_total (their ratio is the store
// calls per decision), sluice_leases_total (leases taken) and sluice_lease_units_returned_total.
func (m *Metrics) RegisterLeases(stats func() LeaseStats) {
	counter := func(name, help string, v func(LeaseStats) int64) {
		m.Registry.counterFunc(name, help, func() float64 { return float64(v(stats())) })
	}
	counter("sluice_lease_decisions_total", "Decisions of leased rules, made from a lease or in Redis.",
		func(s LeaseStats) int64 { return s.Decisions })
	counter("sluice_lease_store_calls_total", "Redis calls leased rules made: exact takes, lease issues and returns.",
		func(s LeaseStats) int64 { return s.StoreCalls })
	counter("sluice_leases_total", "Leases taken from Redis with at least one unit.",
		func(s LeaseStats) int64 { return s.Leases })
	counter("sluice_lease_units_returned_total", "Unused leased units given back to Redis when their lease ended.",
		func(s LeaseStats) int64 { return s.UnitsReturned })
}

// Rule holds one rule's counters, resolved once when the configuration is compiled so that a
// request does no label lookup.
type Rule struct {
	Allowed, Denied, ShadowDenied, NotCharged *Counter
	// ResponseCostMissing is set for a responseCost rule (see Metrics.ResponseCostMissing).
	ResponseCostMissing *Counter
	// SlotsHeld is set for a Concurrency rule (see Metrics.SlotsHeld).
	SlotsHeld *Gauge
}

// ResponseCostMissing returns the sluice_response_cost_missing_total counter of a responseCost
// rule; it is created only for those, so other rules have no such series.
func (m *Metrics) ResponseCostMissing(policyName, rule string) *Counter {
	return m.responseCostMissing.WithLabelValues(policyName, rule)
}

// SlotsHeld returns the sluice_concurrency_slots_held gauge of a Concurrency rule; it is
// created only for those, so other rules have no such series.
func (m *Metrics) SlotsHeld(policyName, rule string) *Gauge {
	return m.slotsHeld.WithLabelValues(policyName, rule)
}

// Adaptive returns the sluice_adaptive_limit gauge and sluice_adaptive_shed_total counter of
// an adaptive rule; they are created only for those.
func (m *Metrics) Adaptive(policyName, rule string) (limit *Gauge, shed *Counter) {
	return m.adaptiveLimit.WithLabelValues(policyName, rule), m.adaptiveShed.WithLabelValues(policyName, rule)
}

// LimitOverride returns the sluice_limit_overrides_total counter of a descriptor rule's
// overrides applied (or ignored); it is created only for those rules.
func (m *Metrics) LimitOverride(policyName, rule string, applied bool) *Counter {
	outcome := "ignored"
	if applied {
		outcome = "applied"
	}
	return m.limitOverrides.WithLabelValues(policyName, rule, outcome)
}

// ForRule returns the counters of a rule.
func (m *Metrics) ForRule(policyName, rule string) *Rule {
	return &Rule{
		Allowed:      m.requests.WithLabelValues(policyName, rule, Allowed),
		Denied:       m.requests.WithLabelValues(policyName, rule, Denied),
		ShadowDenied: m.requests.WithLabelValues(policyName, rule, ShadowDenied),
		NotCharged:   m.requests.WithLabelValues(policyName, rule, NotCharged),
	}
}

// Fallback holds one policy's fallback counters.
type Fallback struct {
	Local, Open, Closed *Counter
}

// ForPolicy returns the fallback counters of a policy.
func (m *Metrics) ForPolicy(policyName string) *Fallback {
	return &Fallback{
		Local:  m.fallback.WithLabelValues(policyName, "local"),
		Open:   m.fallback.WithLabelValues(policyName, "open"),
		Closed: m.fallback.WithLabelValues(policyName, "closed"),
	}
}

// AdminHandler serves the metrics listener: /metrics (Prometheus), /healthz (200 while the
// process serves), /readyz (200 when ready returns nil, else 503 with the reason), and, with
// pprof, /debug/pprof/.
func (m *Metrics) AdminHandler(ready func() error, pprof bool) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", m.Registry.handler())
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := ready(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, err.Error()+"\n")
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	if pprof {
		mux.HandleFunc("/debug/pprof/", httppprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", httppprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", httppprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", httppprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", httppprof.Trace)
	}
	return mux
}
