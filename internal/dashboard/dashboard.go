// Package dashboard defines Sluice's operator dashboard once: its panels and their PromQL.
// Grafana builds config/grafana/sluice.json from them with the Grafana Foundation SDK, Render
// draws the same panels with gonum/plot from query results (docs/dashboard.png), and
// test/prometheus checks that every query returns data from a running system.
package dashboard

import "strings"

// NamespaceVar is the dashboard variable the queries filter on, as it appears in them.
const NamespaceVar = "$namespace"

// Grafana units of the panels.
const (
	UnitPerSecond = "reqps"
	UnitShare     = "percentunit"
	UnitSeconds   = "s"
	UnitCount     = "short"
)

// Query is one PromQL expression of a panel and the legend of its series, in Grafana's
// {{label}} form.
type Query struct {
	Expr, Legend string
}

// Panel is one time series panel.
type Panel struct {
	Title, Description string
	// Unit is a Grafana unit, one of the Unit constants.
	Unit    string
	Queries []Query
}

// Panels returns the dashboard's panels in reading order, two to a row. Their queries read
// the recorded series of config/prometheus/sluice-rules.yaml where one exists.
func Panels() []Panel {
	ns := `namespace=~"` + NamespaceVar + `"`
	return []Panel{{
		Title:       "Admitted per rule",
		Description: "Requests each rule admitted per second, over all pods. A request counts once per matching rule.",
		Unit:        UnitPerSecond,
		Queries:     []Query{{Expr: `sum by (policy, rule) (sluice:requests:rate1m{` + ns + `, decision="allowed"})`, Legend: "{{policy}}/{{rule}}"}},
	}, {
		Title:       "Denied per rule",
		Description: "Requests each rule denied per second (answered 429), and those a Shadow rule would have denied.",
		Unit:        UnitPerSecond,
		Queries: []Query{
			{Expr: `sum by (policy, rule) (sluice:requests:rate1m{` + ns + `, decision="denied"})`, Legend: "{{policy}}/{{rule}}"},
			{Expr: `sum by (policy, rule) (sluice:requests:rate1m{` + ns + `, decision="shadow_denied"})`, Legend: "{{policy}}/{{rule}} (shadow)"},
		},
	}, {
		Title:       "Top denied rules",
		Description: "The ten rules denying the largest share of their decisions over 5 minutes.",
		Unit:        UnitShare,
		Queries:     []Query{{Expr: `topk(10, sluice:requests_denied:ratio_rate5m{` + ns + `})`, Legend: "{{policy}}/{{rule}}"}},
	}, {
		Title:       "Decisions without Redis",
		Description: "Rule decisions per second each pod made without Redis, by policy and failure mode: local is the pod's share of the limit, open admits, closed denies.",
		Unit:        UnitPerSecond,
		Queries:     []Query{{Expr: `sum by (pod, policy, mode) (sluice:fallback_decisions:rate1m{` + ns + `})`, Legend: "{{pod}} {{policy}} {{mode}}"}},
	}, {
		Title:       "Redis breaker per pod",
		Description: "Each sidecar's Redis circuit breaker: 0 closed (deciding through Redis), 1 half-open (probing), 2 open (deciding by failure mode).",
		Unit:        UnitCount,
		Queries:     []Query{{Expr: `max by (pod) (sluice_breaker_state{` + ns + `})`, Legend: "{{pod}}"}},
	}, {
		Title:       "Redis errors",
		Description: "Failed Redis calls per second, by pod and kind (timeout, unavailable).",
		Unit:        UnitPerSecond,
		Queries:     []Query{{Expr: `sum by (pod, kind) (sluice:redis_errors:rate1m{` + ns + `})`, Legend: "{{pod}} {{kind}}"}},
	}, {
		Title:       "Decision latency",
		Description: "Quantiles of the time to decide a request over all its rules (Redis round trips included, queue delay excluded), over 5 minutes.",
		Unit:        UnitSeconds,
		Queries:     []Query{{Expr: `max by (quantile) (sluice:decision_duration_seconds:quantile_rate5m{` + ns + `})`, Legend: "p{{quantile}}"}},
	}, {
		Title:       "Config reloads",
		Description: "Successful reloads and failed loads of policies.json per pod over 10 minutes; after a failure the sidecar keeps its last good configuration.",
		Unit:        UnitCount,
		Queries: []Query{
			{Expr: `sum by (pod) (increase(sluice_config_reloads_total{` + ns + `}[10m]))`, Legend: "{{pod}} reloaded"},
			{Expr: `sum by (pod) (increase(sluice_config_reload_failures_total{` + ns + `}[10m]))`, Legend: "{{pod}} failed"},
		},
	}, {
		Title:       "Pods per policy",
		Description: "Ready pods each policy selects, and those running without the sidecar although annotated for injection (the policy is not enforced on them), from the manager.",
		Unit:        UnitCount,
		Queries: []Query{
			{Expr: `sum by (policy) (sluice_policy_matched_pods{` + ns + `})`, Legend: "{{policy}} matched"},
			{Expr: `sum by (policy) (sluice_policy_uninjected_pods{` + ns + `})`, Legend: "{{policy}} uninjected"},
		},
	}, {
		Title:       "Upstream errors and abandoned queue",
		Description: "Requests per second the application could not answer (502 from the sidecar), and queued requests whose client left during the delay.",
		Unit:        UnitPerSecond,
		Queries: []Query{
			{Expr: `sum by (pod) (rate(sluice_upstream_errors_total{` + ns + `}[5m]))`, Legend: "{{pod}} upstream errors"},
			{Expr: `sum by (pod) (rate(sluice_queue_abandoned_total{` + ns + `}[5m]))`, Legend: "{{pod}} abandoned"},
		},
	}}
}

// ForNamespace returns expr with the namespace variable replaced by a regular expression that
// matches namespace, as Grafana does when one namespace is selected.
func ForNamespace(expr, namespace string) string {
	return strings.ReplaceAll(expr, NamespaceVar, namespace)
}

// Legend fills a {{label}} legend from a series' labels, as Grafana does.
func Legend(format string, labels map[string]string) string {
	var b strings.Builder
	for {
		i := strings.Index(format, "{{")
		if i < 0 {
			break
		}
		j := strings.Index(format[i:], "}}")
		if j < 0 {
			break
		}
		b.WriteString(format[:i])
		b.WriteString(labels[strings.TrimSpace(format[i+2:i+j])])
		format = format[i+j+2:]
	}
	b.WriteString(format)
	return b.String()
}
