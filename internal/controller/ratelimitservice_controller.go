package controller

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/render"
)

// The RLS server's rendered policies and pods.
const (
	// RLSConfigMapName is the ConfigMap, in the manager's namespace, that holds the policies
	// of every namespace that declare a domain; the sluice-ratelimit Deployment mounts it.
	RLSConfigMapName = "sluice-ratelimit-policies"
	// RLSAppLabel selects the RLS server's pods (app.kubernetes.io/name=RLSAppName): the
	// replicas the rendered policies list, whose ranks give their local shares.
	RLSAppLabel = "app.kubernetes.io/name"
	RLSAppName  = "sluice-ratelimit"
)

// RateLimitServiceReconciler renders the policies of every namespace that declare an Envoy
// domain into one document for the RLS server: each policy named <namespace>/<name> (so
// that two namespaces' policies keep their own counters), listing the ready RLS pods of
// Namespace as its pods. A policy that does not compile is left out; the namespace's
// reconciler reports why in its status. Every event maps to one request.
type RateLimitServiceReconciler struct {
	client.Client
	// Namespace is where the RLS server runs and its ConfigMap is written.
	Namespace string
	// Tables reads the tables of tenant limits (as RateLimitPolicyReconciler.Tables).
	Tables client.Reader
}

// +kubebuilder:rbac:groups=sluice.dev,resources=ratelimitpolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;update
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch

// Reconcile writes the RLS ConfigMap when its content changed. With no domain policy it
// holds an empty document, so that the RLS server is ready and answers OK.
func (r *RateLimitServiceReconciler) Reconcile(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
	var list v1alpha1.RateLimitPolicyList
	if err := r.List(ctx, &list); err != nil {
		return ctrl.Result{}, err
	}
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(r.Namespace), client.MatchingLabels{RLSAppLabel: RLSAppName}); err != nil {
		return ctrl.Result{}, err
	}
	replicas, _ := podSet(pods.Items).Ready(labels.Everything())
	tables, err := newTableView(ctx, r.Tables, "")
	if err != nil {
		return ctrl.Result{}, err
	}
	tables.policyName = func(p *v1alpha1.RateLimitPolicy) string { return p.Namespace + "/" + p.Name }
	rendered := &corev1.ConfigMap{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: r.Namespace, Name: RLSConfigMapName}, rendered); err == nil {
		tables.rendered = rendered
	} else if !apierrors.IsNotFound(err) {
		return ctrl.Result{}, err
	}
	doc := &policy.Document{Version: policy.Version, Namespace: r.Namespace, Policies: []policy.Policy{}}
	for i := range list.Items {
		p := &list.Items[i]
		if p.Spec.Domain == "" || !p.DeletionTimestamp.IsZero() {
			continue
		}
		// The policy's status (the namespace's reconciler) says what became of its tables.
		compiled, _, err := render.CompileTables(withoutTokens(p), tables)
		if err != nil {
			continue
		}
		compiled.Name = p.Namespace + "/" + p.Name
		compiled.Selector = nil // only the RLS server reads this document
		compiled.Pods, compiled.Replicas = replicas, int32(len(replicas))
		doc.Policies = append(doc.Policies, compiled)
	}
	slices.SortFunc(doc.Policies, func(a, b policy.Policy) int { return strings.Compare(a.Name, b.Name) })
	payload, err := policy.Encode(doc)
	if err != nil {
		return ctrl.Result{}, err
	}
	if payload.Size() > policy.MaxConfigMapBytes {
		return ctrl.Result{}, fmt.Errorf("the domain policies render to %d bytes, more than a ConfigMap holds", payload.Size())
	}
	want := render.ConfigMap(r.Namespace, payload)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: r.Namespace, Name: RLSConfigMapName}}
	op, err := controllerutil.CreateOrUpdate(ctx, r.Client, cm, func() error {
		if cm.Labels == nil {
			cm.Labels = map[string]string{}
		}
		maps.Copy(cm.Labels, want.Labels)
		if cm.Annotations == nil {
			cm.Annotations = map[string]string{}
		}
		maps.Copy(cm.Annotations, want.Annotations)
		cm.Data, cm.BinaryData = want.Data, want.BinaryData
		return nil
	})
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("writing ConfigMap %s/%s: %w", r.Namespace, RLSConfigMapName, err)
	}
	if op != controllerutil.OperationResultNone {
		logf.FromContext(ctx).Info("Rendered domain policies", "namespace", r.Namespace, "configMap", RLSConfigMapName,
			"policies", len(doc.Policies), "replicas", len(replicas), "hash", payload.Hash)
	}
	return ctrl.Result{}, nil
}

// SetupWithManager watches every policy, the RLS pods, the RLS ConfigMap and the tables of
// tenant limits (when Tables is a cache).
func (r *RateLimitServiceReconciler) SetupWithManager(mgr ctrl.Manager) error {
	one := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []ctrl.Request {
		return []ctrl.Request{{NamespacedName: types.NamespacedName{Namespace: r.Namespace, Name: RLSConfigMapName}}}
	})
	inNamespace := func(name func(client.Object) bool) predicate.Predicate {
		return predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetNamespace() == r.Namespace && name(o) })
	}
	rlsPod := inNamespace(func(o client.Object) bool { return o.GetLabels()[RLSAppLabel] == RLSAppName })
	rendered := inNamespace(func(o client.Object) bool { return o.GetName() == RLSConfigMapName })
	b := ctrl.NewControllerManagedBy(mgr).
		Named("ratelimitservice").
		Watches(&v1alpha1.RateLimitPolicy{}, one).
		Watches(&corev1.Pod{}, one, builder.WithPredicates(rlsPod, predicate.Funcs{UpdateFunc: podUpdateMatters})).
		Watches(&corev1.ConfigMap{}, one, builder.WithPredicates(rendered))
	if tables, ok := r.Tables.(cache.Cache); ok {
		b = b.WatchesRawSource(watchTenantTables(tables, func(*corev1.ConfigMap) []ctrl.Request {
			return []ctrl.Request{{NamespacedName: types.NamespacedName{Namespace: r.Namespace, Name: RLSConfigMapName}}}
		}))
	}
	return b.Complete(r)
}

// SetupRateLimitService registers the RLS renderer with a manager, for the RLS server running
// in namespace (the manager's).
func SetupRateLimitService(mgr ctrl.Manager, namespace string) error {
	tables, err := tenantTablesCache(mgr)
	if err != nil {
		return err
	}
	return (&RateLimitServiceReconciler{Client: mgr.GetClient(), Namespace: namespace, Tables: tables}).SetupWithManager(mgr)
}

// withoutTokens returns p without spec.jwt and the rules that read a token (HTTP rules all):
// the RLS server never sees one, and the key set of a Secret, which only the namespace's
// render reads, must not keep the policy's descriptor rules from the RLS server.
func withoutTokens(p *v1alpha1.RateLimitPolicy) *v1alpha1.RateLimitPolicy {
	if p.Spec.JWT == nil {
		return p
	}
	q := p.DeepCopy()
	q.Spec.JWT = nil
	q.Spec.Rules = slices.DeleteFunc(q.Spec.Rules, func(r v1alpha1.Rule) bool {
		return (r.Match != nil && r.Match.JWT != "") || slices.ContainsFunc(r.Key, func(k v1alpha1.KeyPart) bool { return k.JWTClaim != nil })
	})
	return q
}
