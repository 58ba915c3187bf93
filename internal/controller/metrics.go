package controller

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/sluice-dev/sluice/api/v1alpha1"
)

// Names of the manager's policy metrics: each RateLimitPolicy's status, labelled namespace and
// policy, read from the manager's cache when Prometheus scrapes (like kube-state-metrics), so
// that an alert can say which policy is not enforced on some of its pods.
const (
	MetricPolicyMatchedPods    = "sluice_policy_matched_pods"
	MetricPolicyUninjectedPods = "sluice_policy_uninjected_pods"
	MetricPolicyReady          = "sluice_policy_ready"
	MetricPolicyRoutedAround   = "sluice_policy_bypassing_services"
	// MetricPolicyTenantLimits is exported for policies with tenantLimits only.
	MetricPolicyTenantLimits = "sluice_policy_tenant_limits_resolved"
)

var (
	policyLabels     = []string{"namespace", "policy"}
	matchedPodsDesc  = prometheus.NewDesc(MetricPolicyMatchedPods, "Ready pods the policy's podSelector matches (status.matchedPods).", policyLabels, nil)
	uninjectedDesc   = prometheus.NewDesc(MetricPolicyUninjectedPods, "Pods the policy's podSelector matches that run without the sidecar although annotated for injection (status.uninjectedPods): the policy is not enforced on them.", policyLabels, nil)
	policyReadyDesc  = prometheus.NewDesc(MetricPolicyReady, "1 when the policy's Ready condition is True (rendered for the sidecars), else 0.", policyLabels, nil)
	bypassingDesc    = prometheus.NewDesc(MetricPolicyRoutedAround, "Services that select the policy's pods but send traffic past the sidecar (status.bypassingServices): that traffic is not limited.", policyLabels, nil)
	tenantLimitsDesc = prometheus.NewDesc(MetricPolicyTenantLimits, "For a policy with tenantLimits: 1 when its TenantLimitsResolved condition is True (every rule's table read and valid), else 0 (a rule enforces its last good table, or its own limit for every tenant).", policyLabels, nil)
	policyListBudget = 5 * time.Second
)

// policyCollector exports the status of every RateLimitPolicy in the reader (the manager's
// cache) at each scrape. A failed list exports nothing, rather than stale or zero values.
type policyCollector struct {
	reader client.Reader
}

func (c policyCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- matchedPodsDesc
	ch <- uninjectedDesc
	ch <- policyReadyDesc
	ch <- bypassingDesc
	ch <- tenantLimitsDesc
}

func (c policyCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), policyListBudget)
	defer cancel()
	var list v1alpha1.RateLimitPolicyList
	if err := c.reader.List(ctx, &list); err != nil {
		ctrl.Log.WithName("metrics").Error(err, "Listing RateLimitPolicies for the policy metrics")
		return
	}
	for i := range list.Items {
		p := &list.Items[i]
		ready := 0.0
		if meta.IsStatusConditionPresentAndEqual(p.Status.Conditions, v1alpha1.ConditionReady, metav1.ConditionTrue) {
			ready = 1
		}
		ch <- prometheus.MustNewConstMetric(matchedPodsDesc, prometheus.GaugeValue, float64(p.Status.MatchedPods), p.Namespace, p.Name)
		ch <- prometheus.MustNewConstMetric(uninjectedDesc, prometheus.GaugeValue, float64(p.Status.UninjectedPods), p.Namespace, p.Name)
		ch <- prometheus.MustNewConstMetric(policyReadyDesc, prometheus.GaugeValue, ready, p.Namespace, p.Name)
		ch <- prometheus.MustNewConstMetric(bypassingDesc, prometheus.GaugeValue, float64(len(p.Status.BypassingServices)), p.Namespace, p.Name)
		if c := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionTenantLimitsResolved); c != nil {
			resolved := 0.0
			if c.Status == metav1.ConditionTrue {
				resolved = 1
			}
			ch <- prometheus.MustNewConstMetric(tenantLimitsDesc, prometheus.GaugeValue, resolved, p.Namespace, p.Name)
		}
	}
}

// RegisterMetrics adds the policy metrics to controller-runtime's registry, which the manager
// serves on its metrics endpoint. Call it once per process, with the manager whose cache holds
// the policies (Setup makes the cache watch them).
func RegisterMetrics(mgr ctrl.Manager) error {
	err := metrics.Registry.Register(policyCollector{reader: mgr.GetCache()})
	if are := (prometheus.AlreadyRegisteredError{}); errors.As(err, &are) {
		return errors.New("the policy metrics are already registered in this process")
	}
	return err
}
