// Package controller renders each namespace's RateLimitPolicies into the ConfigMap that injected
// sidecars mount, and reports on every policy what became of it.
package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/inject"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/render"
)

// ManagedByLabel marks the ConfigMaps the controller writes; the manager caches only those.
const (
	ManagedByLabel = render.ManagedByLabel
	ManagedByValue = render.ManagedByValue
)

// RateLimitPolicyReconciler renders all policies of a namespace into one ConfigMap. Its
// requests are namespaces: every event (a policy, a pod, the ConfigMap) maps to the request
// {Namespace: ns, Name: policy.ConfigMapName}, so one reconcile sees the whole namespace.
type RateLimitPolicyReconciler struct {
	client.Client
	Recorder events.EventRecorder
	Clock    clock.PassiveClock
	// MaxBytes bounds the ConfigMap's data and binaryData; zero is policy.MaxConfigMapBytes,
	// the API server's limit.
	MaxBytes int
	// RenderInterval is the least time between two content changes of one namespace's
	// ConfigMap: a change within it is held back and written, newest state, when it ends, so a
	// rolling update costs the kubelets one volume sync per interval rather than one per pod
	// event. Zero writes every change at once.
	RenderInterval time.Duration
	// Tables reads the ConfigMaps labelled v1alpha1.TenantLimitsLabel "true" (the tables of
	// tenant limits); nil reads none. APIReader, when set, reads a ConfigMap a policy names that
	// is not among them, to say why it is not read.
	Tables, APIReader client.Reader

	fitter render.Fitter
	mu     sync.Mutex
	// written is when each namespace's ConfigMap content last changed by this reconciler.
	written map[string]time.Time
	// statuses is, by namespace and policy UID, the status this reconciler last wrote: what the
	// API server holds while the cache has not yet seen the write (see wroteStatus).
	statuses map[string]map[types.UID]v1alpha1.RateLimitPolicyStatus
}

// +kubebuilder:rbac:groups=sluice.dev,resources=ratelimitpolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=sluice.dev,resources=ratelimitpolicies/status,verbs=get;patch
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch
// +kubebuilder:rbac:groups=gateway.networking.k8s.io,resources=httproutes,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile renders the namespace's policies, writes the ConfigMap when its content changed,
// and patches the status of each policy whose status changed.
func (r *RateLimitPolicyReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := logf.FromContext(ctx)
	ns := req.Namespace
	if wait := r.holdBack(ns); wait > 0 {
		// Statuses wait too: they report the content the ConfigMap holds.
		return ctrl.Result{RequeueAfter: wait}, nil
	}

	var list v1alpha1.RateLimitPolicyList
	if err := r.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return ctrl.Result{}, err
	}
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(ns)); err != nil {
		return ctrl.Result{}, err
	}
	var services corev1.ServiceList
	if err := r.List(ctx, &services, client.InNamespace(ns)); err != nil {
		return ctrl.Result{}, err
	}
	var routes gatewayv1.HTTPRouteList
	routesErr := r.List(ctx, &routes, client.InNamespace(ns))
	if routesErr != nil && !isNoKind(routesErr) {
		return ctrl.Result{}, routesErr
	}
	if len(list.Items) == 0 {
		r.fitter.Forget(ns) // bounded by the namespaces that have policies
	}
	r.forgetStatuses(ns, list.Items)
	// The ConfigMap rendered last: the key sets and tenant tables to keep while their sources
	// are missing or garbled.
	rendered := &corev1.ConfigMap{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: ns, Name: policy.ConfigMapName}, rendered); apierrors.IsNotFound(err) {
		rendered = nil
	} else if err != nil {
		return ctrl.Result{}, err
	}
	keySets, err := newKeySetView(ctx, r.Client, ns, list.Items, rendered)
	if err != nil {
		return ctrl.Result{}, err
	}
	tables, err := newTableView(ctx, r.Tables, ns)
	if err != nil {
		return ctrl.Result{}, err
	}
	tables.unlabelled = unlabelledFrom(ctx, r.APIReader)
	tables.rendered = rendered
	view := namespaceView{podSet(pods.Items), newTargetView(services.Items, routes.Items, routesErr), keySets, tables}
	doc, payload, verdicts, err := r.fitter.BuildFit(ns, list.Items, view, r.MaxBytes)
	if err != nil {
		return ctrl.Result{}, err
	}

	changed, hash, renderErr := r.writeConfigMap(ctx, doc, payload, list.Items)
	if changed {
		r.mu.Lock()
		if r.written == nil {
			r.written = map[string]time.Time{}
		}
		if len(list.Items) == 0 {
			delete(r.written, ns)
		} else {
			r.written[ns] = r.Clock.Now()
		}
		r.mu.Unlock()
	}
	if renderErr == nil && changed {
		log.Info("Rendered policies", "namespace", ns, "configMap", policy.ConfigMapName, "policies", len(doc.Policies),
			"bytes", payload.Size(), "compressed", payload.BinaryData != nil, "hash", hash)
	}

	var errs []error
	if renderErr != nil {
		errs = append(errs, renderErr)
	}
	// Every policy's Ready names the content hash, so a render patches each status: a few at a
	// time, or a namespace of many policies takes a round trip per policy.
	var (
		mu sync.Mutex
		g  errgroup.Group
	)
	g.SetLimit(statusPatches)
	for i := range list.Items {
		p := &list.Items[i]
		if !p.DeletionTimestamp.IsZero() {
			continue
		}
		g.Go(func() error {
			rt := routingOf(p, view.targetView, services.Items, pods.Items)
			if err := r.updateStatus(ctx, p, verdicts[p.Name], uninjected(p, rt.selector, pods.Items), rt, hash, renderErr); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
			return nil
		})
	}
	_ = g.Wait()
	return ctrl.Result{}, errors.Join(errs...)
}

// holdBack returns how long ns's next render waits: zero unless its ConfigMap content changed
// less than RenderInterval ago. A held-back request is requeued for the end of the interval,
// without listing or rendering anything, so a burst of pod events costs one render.
func (r *RateLimitPolicyReconciler) holdBack(ns string) time.Duration {
	if r.RenderInterval <= 0 {
		return 0
	}
	r.mu.Lock()
	last, ok := r.written[ns]
	r.mu.Unlock()
	if wait := r.RenderInterval - r.Clock.Since(last); ok && wait > 0 {
		return wait
	}
	return 0
}

// writeConfigMap makes the namespace's ConfigMap hold doc, owned by every live policy, and
// deletes it when no policy is left. It writes only when something differs.
func (r *RateLimitPolicyReconciler) writeConfigMap(ctx context.Context, doc *policy.Document, payload *policy.Payload, policies []v1alpha1.RateLimitPolicy) (changed bool, hash string, err error) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: doc.Namespace, Name: policy.ConfigMapName}}
	var owners []*v1alpha1.RateLimitPolicy
	for i := range policies {
		if policies[i].DeletionTimestamp.IsZero() {
			owners = append(owners, &policies[i])
		}
	}
	if len(owners) == 0 {
		if err := r.Get(ctx, client.ObjectKeyFromObject(cm), cm); apierrors.IsNotFound(err) {
			return false, "", nil
		} else if err != nil {
			return false, "", err
		}
		return true, "", client.IgnoreNotFound(r.Delete(ctx, cm))
	}
	slices.SortFunc(owners, func(a, b *v1alpha1.RateLimitPolicy) int { return strings.Compare(a.Name, b.Name) })

	hash = payload.Hash
	want := render.ConfigMap(doc.Namespace, payload)
	op, err := controllerutil.CreateOrUpdate(ctx, r.Client, cm, func() error {
		if cm.Labels == nil {
			cm.Labels = map[string]string{}
		}
		maps.Copy(cm.Labels, want.Labels)
		if cm.Annotations == nil {
			cm.Annotations = map[string]string{}
		}
		maps.Copy(cm.Annotations, want.Annotations)
		// Exactly the live policies, sorted by name: a deleted policy's reference goes.
		cm.OwnerReferences = nil
		for _, p := range owners {
			if err := controllerutil.SetOwnerReference(p, cm, r.Scheme()); err != nil {
				return err
			}
		}
		cm.Data, cm.BinaryData = want.Data, want.BinaryData
		return nil
	})
	if err != nil {
		return false, "", fmt.Errorf("writing ConfigMap %s: %w", client.ObjectKeyFromObject(cm), err)
	}
	return op != controllerutil.OperationResultNone, hash, nil
}

// updateStatus sets the policy's conditions from its verdict and patches the status once, and
// only when it changed.
func (r *RateLimitPolicyReconciler) updateStatus(ctx context.Context, p *v1alpha1.RateLimitPolicy, v render.Verdict, uninjected []*corev1.Pod, rt routing, hash string, renderErr error) error {
	if st, ok := r.wroteStatus(p); ok {
		p.Status = st
	}
	before := p.DeepCopy()
	now := metav1.NewTime(r.Clock.Now())
	set := func(c metav1.Condition) {
		c.ObservedGeneration = p.Generation
		c.LastTransitionTime = now
		meta.SetStatusCondition(&p.Status.Conditions, c)
	}

	st := &p.Status
	st.ObservedGeneration = p.Generation
	st.MatchedPods = v.MatchedPods
	st.UninjectedPods = int32(len(uninjected))
	st.Summary = render.Summary(p)
	switch {
	case v.Err != nil:
		reason := v1alpha1.ReasonInvalid
		switch {
		case v.Conflict:
			reason = v1alpha1.ReasonRuleConflict
		case v.TooLarge:
			reason = v1alpha1.ReasonTooLarge
		case v.Unresolved && rt.targets != nil:
			reason = rt.targets.reason
		}
		set(metav1.Condition{Type: v1alpha1.ConditionAccepted, Status: metav1.ConditionFalse, Reason: reason, Message: v.Err.Error()})
		set(metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonNotAccepted,
			Message: "The policy is not rendered until it is accepted."})
		st.ConfigMap = ""
	case renderErr != nil:
		set(metav1.Condition{Type: v1alpha1.ConditionAccepted, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonValid, Message: "The policy is valid."})
		set(metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonRenderFailed, Message: renderErr.Error()})
	default:
		set(metav1.Condition{Type: v1alpha1.ConditionAccepted, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonValid, Message: "The policy is valid."})
		set(metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonRendered,
			Message: fmt.Sprintf("Rendered into ConfigMap %s (content hash %.12s).", policy.ConfigMapName, hash)})
		st.ConfigMap = policy.ConfigMapName
	}
	setTargetStatus(p, v, rt.targets, set, now)
	setKeySetStatus(p, v, set)
	setTenantStatus(p, v, set)
	setBypassStatus(p, rt, set)
	if equalStatus(before.Status, p.Status) {
		return nil
	}
	r.recordTransitions(before, p)
	r.recordUninjected(before, p, uninjected)
	r.recordBypass(before, p)
	if err := r.Status().Patch(ctx, p, client.MergeFrom(before)); err != nil {
		r.setWrote(p, nil) // what the server holds is unknown: the cache's copy answers next time
		return client.IgnoreNotFound(err)
	}
	r.setWrote(p, &p.Status)
	return nil
}

// wroteStatus returns the status this reconciler last wrote for p, when it wrote one. Status
// updates are filtered out of the watch (policyUpdateMatters), so the cache's copy of p can lag
// behind the last patch: compared with it, a status that went back to what the cache still
// holds (a count 0 → 1 → 0 while the cache says 0) would look unchanged and never be written.
// The controller is the status's only writer, so what it last wrote is what the server holds.
func (r *RateLimitPolicyReconciler) wroteStatus(p *v1alpha1.RateLimitPolicy) (v1alpha1.RateLimitPolicyStatus, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st, ok := r.statuses[p.Namespace][p.UID]
	if !ok {
		return v1alpha1.RateLimitPolicyStatus{}, false
	}
	return *st.DeepCopy(), true
}

// setWrote records st as p's status on the server; nil forgets it.
func (r *RateLimitPolicyReconciler) setWrote(p *v1alpha1.RateLimitPolicy, st *v1alpha1.RateLimitPolicyStatus) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if st == nil {
		delete(r.statuses[p.Namespace], p.UID)
		return
	}
	if r.statuses == nil {
		r.statuses = map[string]map[types.UID]v1alpha1.RateLimitPolicyStatus{}
	}
	if r.statuses[p.Namespace] == nil {
		r.statuses[p.Namespace] = map[types.UID]v1alpha1.RateLimitPolicyStatus{}
	}
	r.statuses[p.Namespace][p.UID] = *st.DeepCopy()
}

// forgetStatuses drops the written statuses of ns's policies that are gone, so the record is
// bounded by the policies that exist.
func (r *RateLimitPolicyReconciler) forgetStatuses(ns string, live []v1alpha1.RateLimitPolicy) {
	r.mu.Lock()
	defer r.mu.Unlock()
	kept := r.statuses[ns]
	if len(kept) == 0 {
		return
	}
	present := make(map[types.UID]bool, len(live))
	for i := range live {
		present[live[i].UID] = true
	}
	for uid := range kept {
		if !present[uid] {
			delete(kept, uid)
		}
	}
	if len(kept) == 0 {
		delete(r.statuses, ns)
	}
}

// recordTransitions emits an event when a condition changed status or reason, or a new
// generation was rendered.
func (r *RateLimitPolicyReconciler) recordTransitions(before, after *v1alpha1.RateLimitPolicy) {
	if r.Recorder == nil {
		return
	}
	for _, t := range []string{v1alpha1.ConditionAccepted, v1alpha1.ConditionReady, v1alpha1.ConditionTenantLimitsResolved} {
		old, cur := meta.FindStatusCondition(before.Status.Conditions, t), meta.FindStatusCondition(after.Status.Conditions, t)
		if cur == nil || (old != nil && old.Status == cur.Status && old.Reason == cur.Reason && old.ObservedGeneration == cur.ObservedGeneration) {
			continue
		}
		if cur.Status == metav1.ConditionTrue {
			if t == v1alpha1.ConditionReady {
				r.Recorder.Eventf(after, nil, corev1.EventTypeNormal, cur.Reason, "Render", "Generation %d: %s", after.Generation, cur.Message)
			}
			continue
		}
		if t == v1alpha1.ConditionAccepted || t == v1alpha1.ConditionTenantLimitsResolved || cur.Reason == v1alpha1.ReasonRenderFailed {
			r.Recorder.Eventf(after, nil, corev1.EventTypeWarning, cur.Reason, "Validate", "%s", cur.Message)
		}
	}
}

// maxUninjectedEvents bounds the events one reconcile emits about pods without the sidecar.
const maxUninjectedEvents = 10

// recordUninjected emits a Warning event naming each pod (up to maxUninjectedEvents) that
// asks for the sidecar but runs without it, when their number changed: such a pod is not
// rate limited, and nothing else would tell.
func (r *RateLimitPolicyReconciler) recordUninjected(before, after *v1alpha1.RateLimitPolicy, pods []*corev1.Pod) {
	if r.Recorder == nil || len(pods) == 0 || before.Status.UninjectedPods == after.Status.UninjectedPods {
		return
	}
	for _, pod := range pods[:min(len(pods), maxUninjectedEvents)] {
		r.Recorder.Eventf(after, pod, corev1.EventTypeWarning, ReasonSidecarMissing, "Inject",
			"Pod %s is annotated %s: \"true\" but runs without the %s container, so this policy is not enforced on it; "+
				"the injection webhook was unreachable when it was created. Recreate the pod once the manager is ready.",
			pod.Name, inject.AnnotationInject, inject.ContainerName)
	}
}

// ReasonSidecarMissing is the reason of the event about a pod that asks for the sidecar but
// runs without it.
const ReasonSidecarMissing = "SidecarMissing"

// uninjected returns the live pods selector (p's pods) selects that ask for the sidecar but
// run without it, sorted by name.
func uninjected(p *v1alpha1.RateLimitPolicy, selector *metav1.LabelSelector, pods []corev1.Pod) []*corev1.Pod {
	if selector == nil && len(p.Spec.TargetRefs) > 0 {
		return nil // its targets resolve to no pods
	}
	sel, err := metav1.LabelSelectorAsSelector(selector)
	if err != nil {
		return nil // the policy is not accepted; its status says why
	}
	var out []*corev1.Pod
	for i := range pods {
		pod := &pods[i]
		if pod.DeletionTimestamp.IsZero() && !isDone(pod) && uninjectedPod(pod) && sel.Matches(labels.Set(pod.Labels)) {
			out = append(out, pod)
		}
	}
	slices.SortFunc(out, func(a, b *corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// equalStatus compares statuses ignoring condition transition times, which Reconcile always
// stamps with now.
func equalStatus(a, b v1alpha1.RateLimitPolicyStatus) bool {
	strip := func(s v1alpha1.RateLimitPolicyStatus) v1alpha1.RateLimitPolicyStatus {
		s.Conditions = slices.Clone(s.Conditions)
		for i := range s.Conditions {
			s.Conditions[i].LastTransitionTime = metav1.Time{}
		}
		return s
	}
	return reflect.DeepEqual(strip(a), strip(b))
}

// podSet answers render.Build's questions from a namespace's pods.
type podSet []corev1.Pod

// Ready returns the names of the ready pods sel matches, sorted: each pod's rank, from which
// it computes its local shares. Never nil, so that the document says the pods are named. A
// pod that asks for the sidecar but runs without it (uninjectedPod) enforces nothing, so it
// holds no share: the shares of the pods that do enforce still sum to the limit.
func (s podSet) Ready(sel labels.Selector) ([]string, int32) {
	names := []string{}
	for i := range s {
		if isReady(&s[i]) && !uninjectedPod(&s[i]) && sel.Matches(labels.Set(s[i].Labels)) {
			names = append(names, s[i].Name)
		}
	}
	slices.Sort(names)
	return names, int32(len(names))
}

// Fingerprint summarises what Ready and Shared answer from: each pod's name, labels, readiness,
// deletion and whether it is uninjected, in the order the list gave them.
func (s podSet) Fingerprint() string {
	var b strings.Builder
	for i := range s {
		p := &s[i]
		fmt.Fprintf(&b, "%s\x00%t\x00%t\x00%t\x00", p.Name, isReady(p), p.DeletionTimestamp.IsZero(), uninjectedPod(p))
		for _, k := range slices.Sorted(maps.Keys(p.Labels)) {
			fmt.Fprintf(&b, "%s=%s\x00", k, p.Labels[k])
		}
		b.WriteByte('\n')
	}
	return b.String()
}

func (s podSet) Shared(a, b labels.Selector) bool {
	for i := range s {
		if s[i].DeletionTimestamp.IsZero() && a.Matches(labels.Set(s[i].Labels)) && b.Matches(labels.Set(s[i].Labels)) {
			return true
		}
	}
	return false
}

func isDone(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

func isReady(p *corev1.Pod) bool {
	if !p.DeletionTimestamp.IsZero() || p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podUpdateMatters reports whether a pod update can change what Reconcile derives from the
// pod: its readiness (the shares), labels (which policies select it), deletion, completion and
// whether it asks for the sidecar without having it. Status churn such as restarts or probe
// times is filtered out. An update of anything but a pod passes, to be safe.
func podUpdateMatters(e event.UpdateEvent) bool {
	oldPod, ok1 := e.ObjectOld.(*corev1.Pod)
	newPod, ok2 := e.ObjectNew.(*corev1.Pod)
	return !ok1 || !ok2 || isReady(oldPod) != isReady(newPod) || !reflect.DeepEqual(oldPod.Labels, newPod.Labels) ||
		oldPod.DeletionTimestamp.IsZero() != newPod.DeletionTimestamp.IsZero() ||
		uninjectedPod(oldPod) != uninjectedPod(newPod) || isDone(oldPod) != isDone(newPod)
}

// Workers is how many namespaces the controller renders at once, and statusPatches how many
// status patches one reconcile has in flight.
const (
	Workers       = 4
	statusPatches = 8
)

// policyUpdateMatters reports whether a policy update can change the rendering: its spec
// (generation) or its deletion. The reconciler's own status patches are filtered out, so that
// a namespace of large policies is not rendered again for each status it wrote.
func policyUpdateMatters(e event.UpdateEvent) bool {
	return e.ObjectOld.GetGeneration() != e.ObjectNew.GetGeneration() ||
		e.ObjectOld.GetDeletionTimestamp().IsZero() != e.ObjectNew.GetDeletionTimestamp().IsZero()
}

// SetupWithManager watches what the rendering derives from: policies, pods (their labels and
// readiness), Services, HTTPRoutes, the rendered ConfigMaps and the tables of tenant limits
// (when Tables is a cache), each mapped to its namespace's request.
func (r *RateLimitPolicyReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	toNamespace := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []ctrl.Request {
		return []ctrl.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: policy.ConfigMapName}}}
	})
	rendered := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetName() == policy.ConfigMapName })
	b := ctrl.NewControllerManagedBy(mgr).
		Named("ratelimitpolicy").
		// Requests are namespaces, never one namespace twice at once: several workers keep a
		// namespace of large policies, whose render takes longest, from holding up the others.
		WithOptions(crcontroller.Options{MaxConcurrentReconciles: Workers}).
		Watches(&v1alpha1.RateLimitPolicy{}, toNamespace, builder.WithPredicates(predicate.Funcs{UpdateFunc: policyUpdateMatters})).
		Watches(&corev1.Pod{}, toNamespace, builder.WithPredicates(predicate.Funcs{UpdateFunc: podUpdateMatters})).
		Watches(&corev1.ConfigMap{}, toNamespace, builder.WithPredicates(rendered)).
		Watches(&corev1.Service{}, toNamespace).
		Watches(&corev1.Secret{}, toNamespace, builder.WithPredicates(predicate.NewPredicateFuncs(jwksSecret)))
	if tables, ok := r.Tables.(cache.Cache); ok {
		b = b.WatchesRawSource(watchTenantTables(tables, func(cm *corev1.ConfigMap) []ctrl.Request {
			return []ctrl.Request{{NamespacedName: types.NamespacedName{Namespace: cm.Namespace, Name: policy.ConfigMapName}}}
		}))
	}
	// HTTPRoutes are watched when Gateway API's CRDs are installed as the manager starts;
	// otherwise a policy targeting one says the kind is unknown.
	if _, err := mgr.GetRESTMapper().RESTMapping(httpRouteGVK.GroupKind(), httpRouteGVK.Version); err == nil {
		b = b.Watches(&gatewayv1.HTTPRoute{}, toNamespace, builder.WithPredicates(predicate.GenerationChangedPredicate{}))
	} else if !isNoKind(err) {
		return err
	}
	return b.Complete(r)
}
