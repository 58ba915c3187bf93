package controller

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/render"
)

// Target kinds a policy attaches to (spec.targetRefs); the CRD's CEL admits only these.
const (
	ServiceKind   = "Service"
	HTTPRouteKind = "HTTPRoute"
)

// httpRouteGVK is the HTTPRoute version the controller reads (Gateway API's standard channel).
var httpRouteGVK = schema.GroupVersionKind{Group: gatewayv1.GroupName, Version: "v1", Kind: HTTPRouteKind}

// targetView answers what a namespace's policies' targetRefs resolve to, from the namespace's
// Services and HTTPRoutes. routesErr is why HTTPRoutes could not be listed (their CRD is not
// installed); the routes are then unknown, not absent.
type targetView struct {
	services  map[string]*corev1.Service
	routes    map[string]*gatewayv1.HTTPRoute
	routesErr error
}

func newTargetView(services []corev1.Service, routes []gatewayv1.HTTPRoute, routesErr error) *targetView {
	v := &targetView{services: map[string]*corev1.Service{}, routes: map[string]*gatewayv1.HTTPRoute{}, routesErr: routesErr}
	for i := range services {
		v.services[services[i].Name] = &services[i]
	}
	for i := range routes {
		v.routes[routes[i].Name] = &routes[i]
	}
	return v
}

// resolution is what a policy's targetRefs resolved to: the render.Target, or err when they
// give no pods (nothing resolved, or the resolved targets cannot be combined), and each
// target's ResolvedRefs condition, in spec order.
type resolution struct {
	target   render.Target
	err      error
	reason   string
	resolved []metav1.Condition
}

// targetResult is one target's resolution: the selector of its pods and its route matches, or
// the condition saying why it did not resolve.
type targetResult struct {
	selectors []map[string]string
	routes    []policy.RouteMatch
	route     bool
	failed    *metav1.Condition
}

// resolve resolves every target of p.
func (v *targetView) resolve(p *v1alpha1.RateLimitPolicy) resolution {
	var (
		res       resolution
		selectors []map[string]string
		routes    []policy.RouteMatch
		kinds     = map[bool]bool{}
	)
	for _, ref := range p.Spec.TargetRefs {
		var r targetResult
		switch ref.Kind {
		case ServiceKind:
			r = v.service(ref)
		case HTTPRouteKind:
			r = v.httpRoute(ref)
		default: // the CRD's CEL admits no other kind
			r = fail(v1alpha1.ReasonInvalidKind, "Kind %s is not a target Sluice knows.", ref.Kind)
		}
		if r.failed != nil {
			res.resolved = append(res.resolved, *r.failed)
			continue
		}
		res.resolved = append(res.resolved, metav1.Condition{Type: v1alpha1.ConditionResolvedRefs, Status: metav1.ConditionTrue,
			Reason: v1alpha1.ReasonResolved, Message: fmt.Sprintf("%s %s selects pods %s.", ref.Kind, ref.Name, selectorsString(r.selectors))})
		selectors = append(selectors, r.selectors...)
		routes = append(routes, r.routes...)
		kinds[r.route] = true
	}
	switch {
	case len(selectors) == 0:
		res.reason, res.err = v1alpha1.ReasonTargetNotFound, errors.New("no target of spec.targetRefs resolves to pods (status.targets says why)")
	case len(kinds) > 1:
		res.reason, res.err = v1alpha1.ReasonUnsupportedTarget, errors.New("spec.targetRefs mixes Services and HTTPRoutes: a policy on a Service limits all of its pods' traffic, one on an HTTPRoute only the route's; write one policy for each")
	default:
		sel, err := unionSelector(selectors)
		if err != nil {
			res.reason, res.err = v1alpha1.ReasonUnsupportedTarget, err
			break
		}
		res.target = render.Target{Selector: sel, Routes: routes}
	}
	return res
}

// Target implements render.Targets.
func (v *targetView) Target(p *v1alpha1.RateLimitPolicy) (render.Target, error) {
	r := v.resolve(p)
	return r.target, r.err
}

func fail(reason, format string, args ...any) targetResult {
	return targetResult{failed: &metav1.Condition{Type: v1alpha1.ConditionResolvedRefs, Status: metav1.ConditionFalse, Reason: reason,
		Message: fmt.Sprintf(format, args...)}}
}

// service resolves a Service target to its selector; sectionName must name one of its ports.
func (v *targetView) service(ref v1alpha1.TargetRef) targetResult {
	svc, ok := v.services[ref.Name]
	if !ok {
		return fail(v1alpha1.ReasonTargetNotFound, "Service %s does not exist.", ref.Name)
	}
	if ref.SectionName != "" && !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == ref.SectionName }) {
		return fail(v1alpha1.ReasonTargetNotFound, "Service %s has no port named %s.", ref.Name, ref.SectionName)
	}
	if len(svc.Spec.Selector) == 0 {
		return fail(v1alpha1.ReasonUnsupportedTarget, "Service %s has no selector, so its pods are not known; select them with podSelector.", ref.Name)
	}
	return targetResult{selectors: []map[string]string{svc.Spec.Selector}}
}

// httpRoute resolves an HTTPRoute target to its backend Services' selectors and the matches of
// its rules (of the rule sectionName names, when set).
func (v *targetView) httpRoute(ref v1alpha1.TargetRef) targetResult {
	if v.routesErr != nil {
		return fail(v1alpha1.ReasonInvalidKind, "HTTPRoutes (%s) cannot be read: %v; install Gateway API's CRDs, then restart the manager to watch them.",
			httpRouteGVK.GroupVersion(), v.routesErr)
	}
	route, ok := v.routes[ref.Name]
	if !ok {
		return fail(v1alpha1.ReasonTargetNotFound, "HTTPRoute %s does not exist.", ref.Name)
	}
	var out targetResult
	out.route = true
	found := false
	for i, rule := range route.Spec.Rules {
		name := fmt.Sprintf("rules[%d]", i)
		if rule.Name != nil {
			name = string(*rule.Name)
		}
		if ref.SectionName != "" && (rule.Name == nil || string(*rule.Name) != ref.SectionName) {
			continue
		}
		found = true
		for _, f := range rule.Filters {
			if f.Type == gatewayv1.HTTPRouteFilterURLRewrite || f.Type == gatewayv1.HTTPRouteFilterRequestHeaderModifier {
				return fail(v1alpha1.ReasonUnsupportedTarget, "HTTPRoute %s rule %s has a %s filter: its pods see the request rewritten, so the route's matches cannot pick its traffic out.",
					ref.Name, name, f.Type)
			}
		}
		if len(rule.BackendRefs) == 0 {
			return fail(v1alpha1.ReasonUnsupportedTarget, "HTTPRoute %s rule %s has no backendRefs: no pod of this namespace receives its traffic.", ref.Name, name)
		}
		for _, b := range rule.BackendRefs {
			sel, bad := v.backend(route, b.BackendRef)
			if bad != nil {
				return *bad
			}
			out.selectors = append(out.selectors, sel)
		}
		rms, err := render.RouteMatches(rule)
		if err != nil {
			return fail(v1alpha1.ReasonUnsupportedTarget, "HTTPRoute %s rule %s: %v.", ref.Name, name, err)
		}
		out.routes = append(out.routes, rms...)
	}
	if !found {
		return fail(v1alpha1.ReasonTargetNotFound, "HTTPRoute %s has no rule named %s.", ref.Name, ref.SectionName)
	}
	return out
}

// backend resolves one backendRef to its Service's selector.
func (v *targetView) backend(route *gatewayv1.HTTPRoute, b gatewayv1.BackendRef) (map[string]string, *targetResult) {
	bad := func(format string, args ...any) (map[string]string, *targetResult) {
		r := fail(v1alpha1.ReasonUnsupportedTarget, "HTTPRoute %s: "+format, append([]any{route.Name}, args...)...)
		return nil, &r
	}
	if (b.Group != nil && *b.Group != "") || (b.Kind != nil && *b.Kind != ServiceKind) {
		return bad("backend %s is not a Service.", b.Name)
	}
	if b.Namespace != nil && string(*b.Namespace) != route.Namespace {
		return bad("backend Service %s is in namespace %s; a policy applies to pods of its own namespace.", b.Name, *b.Namespace)
	}
	svc, ok := v.services[string(b.Name)]
	if !ok {
		r := fail(v1alpha1.ReasonTargetNotFound, "HTTPRoute %s: backend Service %s does not exist.", route.Name, b.Name)
		return nil, &r
	}
	if len(svc.Spec.Selector) == 0 {
		return bad("backend Service %s has no selector, so its pods are not known.", b.Name)
	}
	return svc.Spec.Selector, nil
}

// unionSelector returns one label selector that matches exactly the pods some of sels (each a
// Service's equality selector) match: the selector itself when they are all equal, or, when
// they have the same keys and differ in one, that key's values as an In requirement.
func unionSelector(sels []map[string]string) (*metav1.LabelSelector, error) {
	first := sels[0]
	var differ string
	for _, s := range sels[1:] {
		if !slices.Equal(slices.Sorted(maps.Keys(s)), slices.Sorted(maps.Keys(first))) {
			return nil, fmt.Errorf("the targets select pods by different labels (%s): one selector cannot match exactly their pods; write one policy for each", selectorsString(sels))
		}
		for k, val := range s {
			if val != first[k] && k != differ {
				if differ != "" {
					return nil, fmt.Errorf("the targets' selectors (%s) differ in more than one label: one selector cannot match exactly their pods; write one policy for each", selectorsString(sels))
				}
				differ = k
			}
		}
	}
	out := &metav1.LabelSelector{MatchLabels: maps.Clone(first)}
	if differ == "" {
		return out, nil
	}
	delete(out.MatchLabels, differ)
	if len(out.MatchLabels) == 0 {
		out.MatchLabels = nil
	}
	values := map[string]bool{}
	for _, s := range sels {
		values[s[differ]] = true
	}
	out.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: differ, Operator: metav1.LabelSelectorOpIn, Values: slices.Sorted(maps.Keys(values))}}
	return out, nil
}

func selectorsString(sels []map[string]string) string {
	var parts []string
	for _, s := range sels {
		var kv []string
		for _, k := range slices.Sorted(maps.Keys(s)) {
			kv = append(kv, k+"="+s[k])
		}
		if p := strings.Join(kv, ","); !slices.Contains(parts, p) {
			parts = append(parts, p)
		}
	}
	return strings.Join(parts, " or ")
}

// isNoKind reports whether err says a kind's CRD is not installed.
func isNoKind(err error) bool {
	return meta.IsNoMatchError(err)
}

// Fingerprint summarises what Target answers from: each Service's and HTTPRoute's name and
// resource version, and why routes could not be read.
func (v *targetView) Fingerprint() string {
	var b strings.Builder
	for _, name := range slices.Sorted(maps.Keys(v.services)) {
		fmt.Fprintf(&b, "svc\x00%s\x00%s\n", name, v.services[name].ResourceVersion)
	}
	for _, name := range slices.Sorted(maps.Keys(v.routes)) {
		fmt.Fprintf(&b, "route\x00%s\x00%s\n", name, v.routes[name].ResourceVersion)
	}
	if v.routesErr != nil {
		fmt.Fprintf(&b, "routes\x00%v\n", v.routesErr)
	}
	return b.String()
}

// namespaceView answers render.Build's questions, pods, targets, key sets and tenant tables,
// for one namespace.
type namespaceView struct {
	podSet
	*targetView
	*keySetView
	*tableView
}

// Fingerprint implements render.Fingerprinter over the pods, the targets, the key sets and the
// tables.
func (n namespaceView) Fingerprint() string {
	return n.podSet.Fingerprint() + "\x01" + n.targetView.Fingerprint() + "\x01" + n.keySetView.Fingerprint() + "\x01" + n.tableView.Fingerprint()
}

// setTargetStatus sets the ResolvedRefs and Conflicted conditions and status.targets of a
// policy with targetRefs (res), and removes them from one without.
func setTargetStatus(p *v1alpha1.RateLimitPolicy, v render.Verdict, res *resolution, set func(metav1.Condition), now metav1.Time) {
	if res == nil {
		meta.RemoveStatusCondition(&p.Status.Conditions, v1alpha1.ConditionResolvedRefs)
		meta.RemoveStatusCondition(&p.Status.Conditions, v1alpha1.ConditionConflicted)
		p.Status.Targets = nil
		return
	}
	var failed []string
	reason := ""
	for _, c := range res.resolved {
		if c.Status == metav1.ConditionFalse {
			failed = append(failed, c.Message)
			reason = cmp.Or(reason, c.Reason)
		}
	}
	if len(failed) == 0 {
		set(metav1.Condition{Type: v1alpha1.ConditionResolvedRefs, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonResolved,
			Message: "Every target resolves to pods."})
	} else {
		set(metav1.Condition{Type: v1alpha1.ConditionResolvedRefs, Status: metav1.ConditionFalse, Reason: reason, Message: strings.Join(failed, " ")})
	}
	conflicted := metav1.Condition{Type: v1alpha1.ConditionConflicted, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonNoConflict,
		Message: "No older policy defines a rule of the same name for the same pods."}
	if v.Conflict {
		conflicted = metav1.Condition{Type: v1alpha1.ConditionConflicted, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonRuleConflict, Message: v.Err.Error()}
	}
	set(conflicted)
	accepted := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionAccepted)

	targets := make([]v1alpha1.TargetStatus, len(p.Spec.TargetRefs))
	for i, ref := range p.Spec.TargetRefs {
		ts := v1alpha1.TargetStatus{TargetRef: ref}
		for _, old := range p.Status.Targets {
			if old.TargetRef == ref {
				ts.Conditions = slices.Clone(old.Conditions)
			}
		}
		setT := func(c metav1.Condition) {
			c.ObservedGeneration, c.LastTransitionTime = p.Generation, now
			meta.SetStatusCondition(&ts.Conditions, c)
		}
		resolved := res.resolved[i]
		setT(resolved)
		switch {
		case resolved.Status == metav1.ConditionFalse:
			setT(metav1.Condition{Type: v1alpha1.ConditionAccepted, Status: metav1.ConditionFalse, Reason: resolved.Reason, Message: resolved.Message})
		case accepted != nil && accepted.Status == metav1.ConditionFalse:
			setT(metav1.Condition{Type: v1alpha1.ConditionAccepted, Status: metav1.ConditionFalse, Reason: accepted.Reason, Message: accepted.Message})
		default:
			setT(metav1.Condition{Type: v1alpha1.ConditionAccepted, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonValid,
				Message: "The policy applies to this target's pods."})
		}
		setT(conflicted)
		targets[i] = ts
	}
	p.Status.Targets = targets
}
