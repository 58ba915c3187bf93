package controller

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/inject"
)

// maxBypassing bounds the Services a policy's status names as bypassing its sidecars.
const maxBypassing = 32

// bypass is a Service that sends traffic to a policy's pods past the sidecar, and how.
type bypass struct {
	service string
	detail  string
}

// bypassing returns the Services of services that select some live pod sel matches and send
// one of their ports to that pod past the sidecar, sorted by name: a targetPort that reaches a
// container port other than the sidecar's, or a number no container declares (the sidecar
// listens only on its own port). A targetPort naming no port of the pod sends nothing there
// (the pod is not an endpoint for it), so it is no bypass.
func bypassing(sel labels.Selector, services []corev1.Service, pods []corev1.Pod) []bypass {
	var out []bypass
	for i := range services {
		svc := &services[i]
		if len(svc.Spec.Selector) == 0 {
			continue
		}
		svcSel := labels.SelectorFromSet(svc.Spec.Selector)
		if d, ok := serviceBypass(svc, svcSel, sel, pods); ok {
			out = append(out, bypass{service: svc.Name, detail: d})
		}
	}
	slices.SortFunc(out, func(a, b bypass) int { return strings.Compare(a.service, b.service) })
	return out
}

// serviceBypass returns how svc sends traffic past the sidecar of the first pod it and sel
// both select that it bypasses.
func serviceBypass(svc *corev1.Service, svcSel, sel labels.Selector, pods []corev1.Pod) (string, bool) {
	for i := range pods {
		pod := &pods[i]
		if !pod.DeletionTimestamp.IsZero() || isDone(pod) || !sel.Matches(labels.Set(pod.Labels)) || !svcSel.Matches(labels.Set(pod.Labels)) {
			continue
		}
		for _, sp := range svc.Spec.Ports {
			tp := sp.TargetPort
			if tp.Type == intstr.Int && tp.IntVal == 0 {
				tp = intstr.FromInt32(sp.Port) // the API server's default
			}
			container, number, found := portOwner(pod, tp)
			port := fmt.Sprint(sp.Port)
			if sp.Name != "" {
				port = fmt.Sprintf("%s (%d)", sp.Name, sp.Port)
			}
			switch {
			case found && container == inject.ContainerName:
				continue
			case found:
				return fmt.Sprintf("Service %s port %s sends to port %d of container %s in pod %s, not to the sidecar's %s",
					svc.Name, port, number, container, pod.Name, inject.PortName), true
			case tp.Type == intstr.Int:
				return fmt.Sprintf("Service %s port %s sends to port %d of pod %s, where no container declares it; the sidecar listens on %s",
					svc.Name, port, tp.IntVal, pod.Name, inject.PortName), true
			}
		}
	}
	return "", false
}

// portOwner finds the container of pod (native sidecars among the init containers included)
// that declares the port tp names or numbers.
func portOwner(pod *corev1.Pod, tp intstr.IntOrString) (container string, number int32, found bool) {
	var cs []corev1.Container
	for _, c := range pod.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			cs = append(cs, c)
		}
	}
	cs = append(cs, pod.Spec.Containers...)
	for _, c := range cs {
		for _, p := range c.Ports {
			if (tp.Type == intstr.String && p.Name == tp.StrVal) || (tp.Type == intstr.Int && p.ContainerPort == tp.IntVal) {
				return c.Name, p.ContainerPort, true
			}
		}
	}
	return "", 0, false
}

// routing is what a policy's targets and the namespace's Services say about the traffic that
// reaches its pods.
type routing struct {
	// selector selects the policy's pods: podSelector, or what its targets resolve to (nil
	// when they resolve to none).
	selector *metav1.LabelSelector
	// targets is the resolution of spec.targetRefs; nil without them.
	targets *resolution
	bypass  []bypass
}

func routingOf(p *v1alpha1.RateLimitPolicy, tv *targetView, services []corev1.Service, pods []corev1.Pod) routing {
	rt := routing{selector: p.Spec.PodSelector}
	if len(p.Spec.TargetRefs) > 0 {
		res := tv.resolve(p)
		rt.targets, rt.selector = &res, res.target.Selector
	}
	if rt.selector != nil {
		if sel, err := metav1.LabelSelectorAsSelector(rt.selector); err == nil {
			rt.bypass = bypassing(sel, services, pods)
		}
	}
	return rt
}

// maxBypassDetails bounds the Services the SidecarBypassed message describes.
const maxBypassDetails = 8

// setBypassStatus sets status.bypassingServices and the SidecarBypassed condition; a policy
// without pods has neither.
func setBypassStatus(p *v1alpha1.RateLimitPolicy, rt routing, set func(metav1.Condition)) {
	p.Status.BypassingServices = nil
	if rt.selector == nil {
		meta.RemoveStatusCondition(&p.Status.Conditions, v1alpha1.ConditionSidecarBypassed)
		return
	}
	if len(rt.bypass) == 0 {
		set(metav1.Condition{Type: v1alpha1.ConditionSidecarBypassed, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonThroughSidecar,
			Message: "Every Service that selects the policy's pods sends their traffic to the sidecar."})
		return
	}
	var details []string
	for i, b := range rt.bypass {
		if i < maxBypassing {
			p.Status.BypassingServices = append(p.Status.BypassingServices, b.service)
		}
		if i < maxBypassDetails {
			details = append(details, b.detail)
		}
	}
	more := ""
	if n := len(rt.bypass) - len(details); n > 0 {
		more = fmt.Sprintf(" (and %d more Services)", n)
	}
	set(metav1.Condition{Type: v1alpha1.ConditionSidecarBypassed, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonTargetPortBypass,
		Message: fmt.Sprintf("%s%s: the policy does not limit that traffic. Set the Service's targetPort to %s, or annotate the pod template %s with the name of the application's port.",
			strings.Join(details, "; "), more, inject.PortName, inject.AnnotationTakeOverPort)})
}

// ReasonSidecarBypassed is the reason of the event about Services that send a policy's
// traffic past the sidecar.
const ReasonSidecarBypassed = "SidecarBypassed"

// recordBypass emits a Warning event when the Services bypassing the sidecar changed and some
// do: nothing else would tell that the policy limits less than it seems.
func (r *RateLimitPolicyReconciler) recordBypass(before, after *v1alpha1.RateLimitPolicy) {
	if r.Recorder == nil || len(after.Status.BypassingServices) == 0 || slices.Equal(before.Status.BypassingServices, after.Status.BypassingServices) {
		return
	}
	c := meta.FindStatusCondition(after.Status.Conditions, v1alpha1.ConditionSidecarBypassed)
	r.Recorder.Eventf(after, nil, corev1.EventTypeWarning, ReasonSidecarBypassed, "Route", "%s", c.Message)
}
