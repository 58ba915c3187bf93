package controller

import (
	"context"
	"fmt"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/render"
)

// Tenant tables. A rule's tenantLimits names a ConfigMap of its policy's namespace; the
// controller reads (and watches) only ConfigMaps labelled v1alpha1.TenantLimitsLabel "true",
// through a cache of their own (the manager's caches only the ConfigMaps it writes), so an
// edit of a table renders the namespace again like an edit of a policy. A table that cannot be
// used leaves its rule with the table it was last rendered with, read back from the rendered
// ConfigMap (so a restarted controller keeps it too).

// tenantCaches holds each manager's cache of tenant tables, made once and shared by the
// reconcilers that read them.
var tenantCaches sync.Map // ctrl.Manager -> cache.Cache

// tenantTablesCache returns mgr's cache of the ConfigMaps labelled TenantLimitsLabel "true",
// adding it to mgr the first time.
func tenantTablesCache(mgr ctrl.Manager) (cache.Cache, error) {
	if c, ok := tenantCaches.Load(mgr); ok {
		return c.(cache.Cache), nil
	}
	c, err := cache.New(mgr.GetConfig(), cache.Options{
		Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(),
		ByObject: map[client.Object]cache.ByObject{
			&corev1.ConfigMap{}: {Label: labels.SelectorFromSet(labels.Set{v1alpha1.TenantLimitsLabel: v1alpha1.LabelEnabled})},
		},
	})
	if err != nil {
		return nil, err
	}
	if got, loaded := tenantCaches.LoadOrStore(mgr, c); loaded {
		return got.(cache.Cache), nil
	}
	return c, mgr.Add(c)
}

// watchTenantTables is a source of the tenant tables' events, each mapped by toRequests.
func watchTenantTables(c cache.Cache, toRequests func(*corev1.ConfigMap) []reconcile.Request) source.TypedSource[reconcile.Request] {
	return source.Kind(c, &corev1.ConfigMap{}, handler.TypedEnqueueRequestsFromMapFunc(
		func(_ context.Context, cm *corev1.ConfigMap) []reconcile.Request { return toRequests(cm) }))
}

// tableView answers render.TenantTables from the labelled ConfigMaps (tables) and, for what
// a rule keeps, the document last rendered (rendered, decoded at the first need).
type tableView struct {
	tables render.ConfigMapTables
	// unlabelled finds a ConfigMap a rule names that is not among tables, to say why it is
	// not read; nil to say only that it is not found.
	unlabelled func(namespace, name string) *corev1.ConfigMap
	// policyName is the name policy p has in the rendered document.
	policyName func(p *v1alpha1.RateLimitPolicy) string

	rendered *corev1.ConfigMap
	once     sync.Once
	last     map[string]map[string]*policy.Tenants // policy name -> rule -> tenants
}

// newTableView lists the tenant tables of namespace (every namespace when "") from reader
// (none when nil).
func newTableView(ctx context.Context, reader client.Reader, namespace string) (*tableView, error) {
	var cms corev1.ConfigMapList
	if reader != nil {
		if err := reader.List(ctx, &cms, client.InNamespace(namespace)); err != nil {
			return nil, err
		}
	}
	return &tableView{tables: render.NewConfigMapTables(cms.Items), policyName: func(p *v1alpha1.RateLimitPolicy) string { return p.Name }}, nil
}

// TenantTable implements render.TenantTables.
func (v *tableView) TenantTable(p *v1alpha1.RateLimitPolicy, r *v1alpha1.Rule) (string, error) {
	cm := v.tables[p.Namespace+"/"+r.TenantLimits.ConfigMapName]
	if cm == nil && v.unlabelled != nil {
		cm = v.unlabelled(p.Namespace, r.TenantLimits.ConfigMapName)
	}
	return render.TableFrom(cm, p.Namespace, r)
}

// LastTenants implements render.TenantTables from the rendered document.
func (v *tableView) LastTenants(p *v1alpha1.RateLimitPolicy, rule string) *policy.Tenants {
	v.once.Do(func() {
		v.last = map[string]map[string]*policy.Tenants{}
		if v.rendered == nil {
			return
		}
		doc, err := policy.Decode([]byte(v.rendered.Data[policy.DataKey]), v.rendered.BinaryData[policy.CompressedKey])
		if err != nil {
			return // nothing to keep: the rule renders without its table
		}
		for _, dp := range doc.Policies {
			for _, r := range dp.Rules {
				if r.Tenants != nil {
					if v.last[dp.Name] == nil {
						v.last[dp.Name] = map[string]*policy.Tenants{}
					}
					v.last[dp.Name][r.Name] = r.Tenants
				}
			}
		}
	})
	return v.last[v.policyName(p)][rule]
}

// Fingerprint summarises what TenantTable answers from: the tables. What LastTenants reads, the
// rendered document, is left out: it changes with each render, and a table kept from it is
// kept again while the tables are as they were.
func (v *tableView) Fingerprint() string { return v.tables.Fingerprint() }

// unlabelledFrom returns a function that reads a ConfigMap with reader (the API server, not a
// cache: it is not labelled), or nil when it does not exist or cannot be read.
func unlabelledFrom(ctx context.Context, reader client.Reader) func(namespace, name string) *corev1.ConfigMap {
	if reader == nil {
		return nil
	}
	return func(namespace, name string) *corev1.ConfigMap {
		var got corev1.ConfigMap
		if err := reader.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &got); err != nil {
			if !apierrors.IsNotFound(err) {
				logf.FromContext(ctx).V(1).Info("Reading a ConfigMap a policy names", "namespace", namespace, "name", name, "error", err.Error())
			}
			return nil
		}
		return &got
	}
}

// setTenantStatus sets the TenantLimitsResolved condition of a policy with tenantLimits from
// what became of its tables, and removes it from one without.
func setTenantStatus(p *v1alpha1.RateLimitPolicy, v render.Verdict, set func(metav1.Condition)) {
	if len(v.Tenants) == 0 || v.Err != nil {
		meta.RemoveStatusCondition(&p.Status.Conditions, v1alpha1.ConditionTenantLimitsResolved)
		return
	}
	var ok, bad []string
	for _, t := range v.Tenants {
		if t.Err == nil {
			ok = append(ok, fmt.Sprintf("rule %s: %d tenants from ConfigMap %s, key %s", t.Rule, t.Tenants, t.ConfigMap, t.Key))
			continue
		}
		kept := "every tenant gets the rule's own limit until it is fixed"
		if t.Kept {
			kept = fmt.Sprintf("its last good table (%d tenants) stays enforced", t.Tenants)
		}
		bad = append(bad, fmt.Sprintf("rule %s: %v; %s", t.Rule, t.Err, kept))
	}
	if len(bad) > 0 {
		set(metav1.Condition{Type: v1alpha1.ConditionTenantLimitsResolved, Status: metav1.ConditionFalse,
			Reason: v1alpha1.ReasonTenantLimitsInvalid, Message: truncate(strings.Join(bad, "; "))})
		return
	}
	set(metav1.Condition{Type: v1alpha1.ConditionTenantLimitsResolved, Status: metav1.ConditionTrue,
		Reason: v1alpha1.ReasonResolved, Message: truncate(strings.Join(ok, "; ") + ".")})
}

// truncate keeps a condition's message within the API's 32768 bytes.
func truncate(s string) string {
	const maxMessage = 32768
	if len(s) > maxMessage {
		return s[:maxMessage-3] + "..."
	}
	return s
}
