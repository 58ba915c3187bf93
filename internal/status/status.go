// Package status tells what the sidecars of a namespace's RateLimitPolicies decide now: it
// scrapes each injected pod's metrics twice and reports, per policy and rule, admitted and
// denied requests per second and the pods deciding on their local share. sluicectl status
// reaches the pods through the API server's pod proxy with the user's kubeconfig.
package status

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/inject"
)

// The sidecar's metric names and label values this package reads (internal/dataplane/metrics).
const (
	metricRequests = "sluice_requests_total"
	metricFallback = "sluice_fallback_decisions_total"
	metricBreaker  = "sluice_breaker_state"
	metricShed     = "sluice_adaptive_shed_total"
	breakerOpen    = 2
)

// Scrape is what one pod's /metrics said at one instant: the counters Status reads.
type Scrape struct {
	At time.Time
	// Requests counts rule decisions by policy, rule and decision (allowed, denied,
	// shadow_denied).
	Requests map[RuleDecision]float64
	// Local counts each policy's decisions on the pod's local share (fallback mode local).
	Local map[string]float64
	// Breaker is the Redis breaker's state: 0 closed, 1 half-open, 2 open.
	Breaker float64
	// Shed counts the requests each adaptive rule shed (in mode Shadow: would have shed).
	Shed map[PolicyRule]float64
}

// PolicyRule names one rule of one policy.
type PolicyRule struct{ Policy, Rule string }

// RuleDecision names one series of sluice_requests_total.
type RuleDecision struct{ Policy, Rule, Decision string }

// ParseScrape reads a Prometheus text exposition taken at at.
func ParseScrape(r io.Reader, at time.Time) (Scrape, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return Scrape{}, err
	}
	s := Scrape{At: at, Requests: map[RuleDecision]float64{}, Local: map[string]float64{}, Shed: map[PolicyRule]float64{}}
	for _, m := range fams[metricRequests].GetMetric() {
		l := labelMap(m)
		s.Requests[RuleDecision{l["policy"], l["rule"], l["decision"]}] += m.GetCounter().GetValue()
	}
	for _, m := range fams[metricFallback].GetMetric() {
		if l := labelMap(m); l["mode"] == "local" {
			s.Local[l["policy"]] += m.GetCounter().GetValue()
		}
	}
	for _, m := range fams[metricShed].GetMetric() {
		l := labelMap(m)
		s.Shed[PolicyRule{l["policy"], l["rule"]}] += m.GetCounter().GetValue()
	}
	for _, m := range fams[metricBreaker].GetMetric() {
		s.Breaker = m.GetGauge().GetValue()
	}
	return s, nil
}

func labelMap(m *dto.Metric) map[string]string {
	out := make(map[string]string, len(m.GetLabel()))
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// increase is a counter's increase from a to b, counting a reset (b < a: the sidecar restarted)
// as an increase from zero, as Prometheus' rate does.
func increase(a, b float64) float64 {
	if b < a {
		return b
	}
	return b - a
}

// Policy is one RateLimitPolicy and the injected pods it selects.
type Policy struct {
	Name        string
	FailureMode string
	Rules       []string
	Pods        []string
	// Adaptive names the rules that are adaptive protection (a Concurrency rule with adaptive),
	// true for those in mode Shadow.
	Adaptive map[string]bool
}

// Row is one rule's line of the report.
type Row struct {
	Policy, Rule string
	// Admitted, Denied and ShadowDenied are decisions per second summed over the policy's pods
	// that answered both scrapes.
	Admitted, Denied, ShadowDenied float64
	// Scraped is how many of the policy's Pods answered both scrapes.
	Scraped, Pods int
	// Local is how many of those decided on their local share between the scrapes; Open
	// how many had their Redis breaker open at the second.
	Local, BreakerOpen int
	FailureMode        string
	// Adaptive marks an adaptive rule: its Denied (ShadowDenied in mode Shadow) are the
	// requests it shed with 503, and Admitted is not known (the sidecar counts no admissions
	// of an adaptive rule).
	Adaptive bool
}

// Summarize computes the report from two scrapes of each pod. A pod missing from before or
// after counts in Pods but not in Scraped.
func Summarize(policies []Policy, before, after map[string]Scrape) []Row {
	var rows []Row
	for _, p := range policies {
		base := Row{Policy: p.Name, Pods: len(p.Pods), FailureMode: p.FailureMode}
		perRule := map[string]*Row{}
		for _, r := range p.Rules {
			row := base
			row.Rule = r
			_, row.Adaptive = p.Adaptive[r]
			perRule[r] = &row
		}
		for _, pod := range p.Pods {
			b, okb := before[pod]
			a, oka := after[pod]
			if !okb || !oka || !a.At.After(b.At) {
				continue
			}
			dt := a.At.Sub(b.At).Seconds()
			local := increase(b.Local[p.Name], a.Local[p.Name]) > 0
			for _, row := range perRule {
				row.Scraped++
				if local {
					row.Local++
				}
				if a.Breaker == breakerOpen {
					row.BreakerOpen++
				}
			}
			for k, v := range a.Requests {
				row, ok := perRule[k.Rule]
				if k.Policy != p.Name || !ok {
					continue
				}
				r := increase(b.Requests[k], v) / dt
				switch k.Decision {
				case "allowed":
					row.Admitted += r
				case "denied":
					row.Denied += r
				case "shadow_denied":
					row.ShadowDenied += r
				}
			}
			for k, v := range a.Shed {
				row, ok := perRule[k.Rule]
				if k.Policy != p.Name || !ok || !row.Adaptive {
					continue
				}
				if r := increase(b.Shed[k], v) / dt; p.Adaptive[k.Rule] {
					row.ShadowDenied += r
				} else {
					row.Denied += r
				}
			}
		}
		for _, r := range p.Rules {
			rows = append(rows, *perRule[r])
		}
	}
	return rows
}

// Write prints the rows as a table.
func Write(w io.Writer, rows []Row) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POLICY\tRULE\tADMITTED/S\tDENIED/S\tSHADOW-DENIED/S\tPODS\tLOCAL SHARE\tBREAKER OPEN\tFAILURE MODE")
	for _, r := range rows {
		admitted := perSecond(r.Admitted)
		if r.Adaptive {
			admitted = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d/%d\t%d\t%d\t%s\n", r.Policy, r.Rule, admitted, perSecond(r.Denied),
			perSecond(r.ShadowDenied), r.Scraped, r.Pods, r.Local, r.BreakerOpen, r.FailureMode)
	}
	return tw.Flush()
}

func perSecond(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

// Target is an injected pod and the port of its sidecar's metrics.
type Target struct {
	Name string
	Port int32
}

// Scraper fetches a pod's /metrics.
type Scraper func(ctx context.Context, namespace string, t Target) ([]byte, error)

// PodProxy scrapes through the API server's pod proxy
// (/api/v1/namespaces/NS/pods/NAME:PORT/proxy/metrics): the user needs get on pods/proxy.
func PodProxy(cs kubernetes.Interface) Scraper {
	return func(ctx context.Context, namespace string, t Target) ([]byte, error) {
		body, err := cs.CoreV1().Pods(namespace).ProxyGet("http", t.Name, strconv.Itoa(int(t.Port)), "/metrics", nil).DoRaw(ctx)
		if err != nil && len(body) > 0 {
			// The API server's own words (e.g. the address it would not dial) say more than the
			// status error's "unknown reason".
			msg := strings.TrimSpace(string(body))
			var st metav1.Status
			if json.Unmarshal(body, &st) == nil && st.Message != "" {
				msg = st.Message
			}
			if len(msg) > 300 {
				msg = msg[:300] + "..."
			}
			return nil, fmt.Errorf("%w: %s", err, msg)
		}
		return body, err
	}
}

// Targets returns the policies of a namespace with the running injected pods each selects,
// and every such pod's metrics target.
func Targets(policies []v1alpha1.RateLimitPolicy, pods []corev1.Pod) ([]Policy, []Target, error) {
	var out []Policy
	targets := map[string]Target{}
	for _, p := range policies {
		sel, err := metav1.LabelSelectorAsSelector(p.Spec.PodSelector)
		if err != nil {
			return nil, nil, fmt.Errorf("policy %s: %w", p.Name, err)
		}
		sp := Policy{Name: p.Name, FailureMode: string(p.Spec.FailureMode)}
		for _, r := range p.Spec.Rules {
			sp.Rules = append(sp.Rules, r.Name)
			if r.Adaptive != nil {
				if sp.Adaptive == nil {
					sp.Adaptive = map[string]bool{}
				}
				sp.Adaptive[r.Name] = r.Mode == v1alpha1.Shadow
			}
		}
		sort.Strings(sp.Rules)
		for i := range pods {
			pod := &pods[i]
			port, ok := metricsPort(pod)
			if !ok || pod.Status.Phase != corev1.PodRunning || pod.DeletionTimestamp != nil || !sel.Matches(labels.Set(pod.Labels)) {
				continue
			}
			sp.Pods = append(sp.Pods, pod.Name)
			targets[pod.Name] = Target{Name: pod.Name, Port: port}
		}
		out = append(out, sp)
	}
	slices.SortFunc(out, func(a, b Policy) int { return strings.Compare(a.Name, b.Name) })
	ts := make([]Target, 0, len(targets))
	for _, t := range targets {
		ts = append(ts, t)
	}
	slices.SortFunc(ts, func(a, b Target) int { return strings.Compare(a.Name, b.Name) })
	return out, ts, nil
}

// metricsPort returns the port named inject.MetricsPortName of the pod's sidecar container.
func metricsPort(pod *corev1.Pod) (int32, bool) {
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range cs {
			if c.Name != inject.ContainerName {
				continue
			}
			for _, p := range c.Ports {
				if p.Name == inject.MetricsPortName {
					return p.ContainerPort, true
				}
			}
		}
	}
	return 0, false
}

// Options of Collect.
type Options struct {
	// Interval separates the two scrapes; 5s when zero.
	Interval time.Duration
	// Clock times the scrapes and waits the interval; the real clock when nil.
	Clock clock.Clock
}

// Collect scrapes every target twice, Interval apart, and summarizes. Pods that failed a
// scrape are left out of the rates and returned with their errors.
func Collect(ctx context.Context, namespace string, policies []Policy, targets []Target, scrape Scraper, o Options) ([]Row, map[string]error) {
	if o.Interval == 0 {
		o.Interval = 5 * time.Second
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	failed := map[string]error{}
	round := func() map[string]Scrape {
		out := map[string]Scrape{}
		for _, t := range targets {
			if failed[t.Name] != nil {
				continue
			}
			body, err := scrape(ctx, namespace, t)
			at := o.Clock.Now()
			if err == nil {
				out[t.Name], err = ParseScrape(strings.NewReader(string(body)), at)
			}
			if err != nil {
				failed[t.Name] = err
				delete(out, t.Name)
			}
		}
		return out
	}
	before := round()
	select {
	case <-ctx.Done():
		for _, t := range targets {
			failed[t.Name] = ctx.Err()
		}
		return Summarize(policies, nil, nil), failed
	case <-o.Clock.After(o.Interval):
	}
	after := round()
	return Summarize(policies, before, after), failed
}
