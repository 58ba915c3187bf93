package controller_test

import (
	"context"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/controller"
	"github.com/sluice-dev/sluice/internal/inject"
	"github.com/sluice-dev/sluice/internal/policy"
)

// targets attaches the policy to refs instead of its podSelector (a Service when the group
// is left empty).
func targets(refs ...v1alpha1.TargetRef) func(*v1alpha1.RateLimitPolicy) {
	return func(p *v1alpha1.RateLimitPolicy) {
		p.Spec.PodSelector = nil
		p.Spec.TargetRefs = refs
	}
}

// newService is a Service selecting selector, one port per name → targetPort.
func newService(ns, name string, selector map[string]string, ports ...corev1.ServicePort) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.ServiceSpec{Selector: selector, Ports: ports}}
}

func port(name string, number int32, target intstr.IntOrString) corev1.ServicePort {
	return corev1.ServicePort{Name: name, Port: number, TargetPort: target, Protocol: corev1.ProtocolTCP}
}

// injectedPod is a pod whose application declares http (8080) and whose native sidecar
// declares sluice-http (8081), as the webhook leaves it.
func injectedPod(ns, name string, podLabels map[string]string) *corev1.Pod {
	pod := newPod(ns, name, podLabels)
	pod.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}
	pod.Spec.InitContainers = []corev1.Container{{Name: inject.ContainerName, Image: "example.invalid/sidecar:1",
		RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways), Ports: []corev1.ContainerPort{{Name: inject.PortName, ContainerPort: 8081}}}}
	return pod
}

// renderedPolicy returns the rendered form of the namespace's policy name, failing g when the
// ConfigMap does not hold it.
func renderedPolicy(g Gomega, ctx context.Context, ns, name string) policy.Policy {
	_, doc := rendered(g, ctx, ns)
	for _, p := range doc.Policies {
		if p.Name == name {
			return p
		}
	}
	g.Expect(names(doc)).To(ContainElement(name))
	return policy.Policy{}
}

// condition reads a policy's condition of type t (nil when absent).
func condition(g Gomega, ctx context.Context, ns, name, t string) (*v1alpha1.RateLimitPolicy, *metav1.Condition) {
	var p v1alpha1.RateLimitPolicy
	g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &p)).To(Succeed())
	return &p, meta.FindStatusCondition(p.Status.Conditions, t)
}

// targetCondition is condition t of the policy's i-th target.
func targetCondition(g Gomega, p *v1alpha1.RateLimitPolicy, i int, t string) *metav1.Condition {
	g.Expect(len(p.Status.Targets)).To(BeNumerically(">", i))
	c := meta.FindStatusCondition(p.Status.Targets[i].Conditions, t)
	g.Expect(c).NotTo(BeNil(), "targets[%d] has no %s condition", i, t)
	return c
}

var service = func(name, section string) v1alpha1.TargetRef {
	return v1alpha1.TargetRef{Kind: controller.ServiceKind, Name: name, SectionName: section}
}

var _ = Describe("Policies attached to Services (targetRefs)", func() {
	var ns string
	BeforeEach(func(ctx context.Context) { ns = newNamespace(ctx) })

	It("apply to the pods the Service selects, report each target, and follow edits and deletion of the Service", func(ctx context.Context) {
		web := injectedPod(ns, "web-1", map[string]string{"app": "web"})
		Expect(k8sClient.Create(ctx, web)).To(Succeed())
		setReady(ctx, web, true)
		svc := newService(ns, "web", map[string]string{"app": "web"}, port("http", 80, intstr.FromString(inject.PortName)))
		Expect(k8sClient.Create(ctx, svc)).To(Succeed())
		Expect(k8sClient.Create(ctx, newPolicy(ns, "checkout", targets(service("web", "http"))))).To(Succeed())

		Eventually(func(g Gomega) {
			p := expectReady(g, ctx, ns, "checkout", 1)
			g.Expect(p.Status.MatchedPods).To(Equal(int32(1)))
			g.Expect(renderedPolicy(g, ctx, ns, "checkout").Selector).To(Equal(&policy.LabelSelector{MatchLabels: map[string]string{"app": "web"}}))
			g.Expect(meta.IsStatusConditionTrue(p.Status.Conditions, v1alpha1.ConditionResolvedRefs)).To(BeTrue())
			g.Expect(meta.IsStatusConditionFalse(p.Status.Conditions, v1alpha1.ConditionConflicted)).To(BeTrue())
			g.Expect(p.Status.Targets).To(HaveLen(1))
			g.Expect(p.Status.Targets[0].TargetRef).To(Equal(service("web", "http")))
			g.Expect(targetCondition(g, p, 0, v1alpha1.ConditionAccepted).Status).To(Equal(metav1.ConditionTrue))
			g.Expect(targetCondition(g, p, 0, v1alpha1.ConditionResolvedRefs).Status).To(Equal(metav1.ConditionTrue))
			g.Expect(targetCondition(g, p, 0, v1alpha1.ConditionConflicted).Status).To(Equal(metav1.ConditionFalse))
		}).Should(Succeed())

		By("following an edit of the Service's selector")
		svc.Spec.Selector = map[string]string{"app": "web", "track": "canary"}
		Expect(k8sClient.Update(ctx, svc)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(renderedPolicy(g, ctx, ns, "checkout").Selector.MatchLabels).To(Equal(map[string]string{"app": "web", "track": "canary"}))
			p, _ := condition(g, ctx, ns, "checkout", v1alpha1.ConditionReady)
			g.Expect(p.Status.MatchedPods).To(BeZero())
		}).Should(Succeed())

		By("reporting the Service's deletion: not resolved, not rendered")
		Expect(k8sClient.Delete(ctx, svc)).To(Succeed())
		Eventually(func(g Gomega) {
			p, accepted := condition(g, ctx, ns, "checkout", v1alpha1.ConditionAccepted)
			g.Expect(accepted.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(accepted.Reason).To(Equal(v1alpha1.ReasonTargetNotFound))
			resolved := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionResolvedRefs)
			g.Expect(resolved.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(resolved.Message).To(ContainSubstring("Service web does not exist."))
			g.Expect(targetCondition(g, p, 0, v1alpha1.ConditionAccepted).Status).To(Equal(metav1.ConditionFalse))
			_, doc := rendered(g, ctx, ns)
			g.Expect(names(doc)).NotTo(ContainElement("checkout"))
		}).Should(Succeed())
	})

	It("report a missing Service and a missing port, apply to the targets that resolve, and pick up a Service created later", func(ctx context.Context) {
		Expect(k8sClient.Create(ctx, newService(ns, "api", map[string]string{"app": "api"}, port("http", 80, intstr.FromString(inject.PortName))))).To(Succeed())
		Expect(k8sClient.Create(ctx, newPolicy(ns, "p", targets(service("api", "grpc"), service("missing", ""), service("api", ""))))).To(Succeed())
		Eventually(func(g Gomega) {
			p := expectReady(g, ctx, ns, "p", 1)
			g.Expect(renderedPolicy(g, ctx, ns, "p").Selector.MatchLabels).To(Equal(map[string]string{"app": "api"}))
			resolved := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionResolvedRefs)
			g.Expect(resolved.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(resolved.Message).To(And(ContainSubstring("Service api has no port named grpc."), ContainSubstring("Service missing does not exist.")))
			g.Expect(targetCondition(g, p, 0, v1alpha1.ConditionResolvedRefs).Reason).To(Equal(v1alpha1.ReasonTargetNotFound))
			g.Expect(targetCondition(g, p, 1, v1alpha1.ConditionResolvedRefs).Reason).To(Equal(v1alpha1.ReasonTargetNotFound))
			g.Expect(targetCondition(g, p, 2, v1alpha1.ConditionAccepted).Status).To(Equal(metav1.ConditionTrue))
		}).Should(Succeed())

		By("creating the missing Service with a selector that differs in one label")
		Expect(k8sClient.Create(ctx, newService(ns, "missing", map[string]string{"app": "api-canary"}, port("http", 80, intstr.FromString(inject.PortName))))).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(renderedPolicy(g, ctx, ns, "p").Selector).To(Equal(&policy.LabelSelector{
				MatchExpressions: []policy.LabelSelectorRequirement{{Key: "app", Operator: policy.SelectorOpIn, Values: []string{"api", "api-canary"}}}}))
			p, _ := condition(g, ctx, ns, "p", v1alpha1.ConditionReady)
			g.Expect(targetCondition(g, p, 1, v1alpha1.ConditionResolvedRefs).Status).To(Equal(metav1.ConditionTrue))
		}).Should(Succeed())
	})

	It("mark the newer of two policies defining a rule of the same name on one Service Conflicted", func(ctx context.Context) {
		// Creation times have whole seconds: names that sort in creation order keep the
		// older policy first when both fall in one second.
		Expect(k8sClient.Create(ctx, newService(ns, "web", map[string]string{"app": "web"}, port("http", 80, intstr.FromString(inject.PortName))))).To(Succeed())
		Expect(k8sClient.Create(ctx, newPolicy(ns, "first", targets(service("web", ""))))).To(Succeed())
		Eventually(func(g Gomega) { expectReady(g, ctx, ns, "first", 1) }).Should(Succeed())
		Expect(k8sClient.Create(ctx, newPolicy(ns, "second", targets(service("web", ""))))).To(Succeed())
		Eventually(func(g Gomega) {
			p, conflicted := condition(g, ctx, ns, "second", v1alpha1.ConditionConflicted)
			g.Expect(conflicted).NotTo(BeNil())
			g.Expect(conflicted.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(conflicted.Message).To(ContainSubstring(`policy "first"`))
			g.Expect(targetCondition(g, p, 0, v1alpha1.ConditionConflicted).Status).To(Equal(metav1.ConditionTrue))
			g.Expect(targetCondition(g, p, 0, v1alpha1.ConditionAccepted).Status).To(Equal(metav1.ConditionFalse))
			first, _ := condition(g, ctx, ns, "first", v1alpha1.ConditionConflicted)
			g.Expect(meta.IsStatusConditionFalse(first.Status.Conditions, v1alpha1.ConditionConflicted)).To(BeTrue())
		}).Should(Succeed())
	})

	It("report an HTTPRoute target as unknown while Gateway API's CRDs are not installed", func(ctx context.Context) {
		Expect(k8sClient.Create(ctx, newPolicy(ns, "route", targets(v1alpha1.TargetRef{Group: "gateway.networking.k8s.io", Kind: "HTTPRoute", Name: "web"})))).To(Succeed())
		Eventually(func(g Gomega) {
			p, resolved := condition(g, ctx, ns, "route", v1alpha1.ConditionResolvedRefs)
			g.Expect(resolved).NotTo(BeNil())
			g.Expect(resolved.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(resolved.Reason).To(Equal(v1alpha1.ReasonInvalidKind))
			g.Expect(resolved.Message).To(ContainSubstring("install Gateway API's CRDs"))
			accepted := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionAccepted)
			g.Expect(accepted.Status).To(Equal(metav1.ConditionFalse))
		}).Should(Succeed())
	})
})

// bypassEvents returns the notes of the SidecarBypassed events about a policy.
func bypassEvents(g Gomega, ctx context.Context, ns, policyName string) []string {
	var list eventsv1.EventList
	g.Expect(k8sClient.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
	var out []string
	for _, e := range list.Items {
		if e.Regarding.Name == policyName && e.Reason == controller.ReasonSidecarBypassed && e.Type == corev1.EventTypeWarning {
			out = append(out, e.Note)
		}
	}
	return out
}

var _ = Describe("The routing check", func() {
	var ns string
	BeforeEach(func(ctx context.Context) { ns = newNamespace(ctx) })

	It("names the Services whose targetPort does not reach the sidecar, in the status and a Warning event, until they do", func(ctx context.Context) {
		Expect(k8sClient.Create(ctx, injectedPod(ns, "web-1", map[string]string{"app": "web"}))).To(Succeed())
		Expect(k8sClient.Create(ctx, newService(ns, "routed", map[string]string{"app": "web"}, port("http", 80, intstr.FromString(inject.PortName))))).To(Succeed())
		numeric := newService(ns, "numeric", map[string]string{"app": "web"}, port("http", 80, intstr.FromInt32(8080)))
		named := newService(ns, "named", map[string]string{"app": "web"}, port("", 80, intstr.FromString("http")))
		Expect(k8sClient.Create(ctx, numeric)).To(Succeed())
		Expect(k8sClient.Create(ctx, named)).To(Succeed())
		Expect(k8sClient.Create(ctx, newService(ns, "elsewhere", map[string]string{"app": "other"}, port("http", 80, intstr.FromInt32(8080))))).To(Succeed())
		Expect(k8sClient.Create(ctx, newPolicy(ns, "web"))).To(Succeed())

		Eventually(func(g Gomega) {
			p, bypassed := condition(g, ctx, ns, "web", v1alpha1.ConditionSidecarBypassed)
			g.Expect(p.Status.BypassingServices).To(Equal([]string{"named", "numeric"}))
			g.Expect(bypassed).NotTo(BeNil())
			g.Expect(bypassed.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(bypassed.Reason).To(Equal(v1alpha1.ReasonTargetPortBypass))
			g.Expect(bypassed.Message).To(And(
				ContainSubstring("Service named port 80 sends to port 8080 of container app in pod web-1, not to the sidecar's sluice-http"),
				ContainSubstring("Service numeric port http (80) sends to port 8080 of container app"),
				ContainSubstring("sluice.dev/take-over-port")))
			g.Expect(bypassEvents(g, ctx, ns, "web")).NotTo(BeEmpty())
		}).Should(Succeed())

		By("routing both through the sidecar")
		numeric.Spec.Ports[0].TargetPort = intstr.FromInt32(8081)
		named.Spec.Ports[0].TargetPort = intstr.FromString(inject.PortName)
		Expect(k8sClient.Update(ctx, numeric)).To(Succeed())
		Expect(k8sClient.Update(ctx, named)).To(Succeed())
		Eventually(func(g Gomega) {
			p, bypassed := condition(g, ctx, ns, "web", v1alpha1.ConditionSidecarBypassed)
			g.Expect(p.Status.BypassingServices).To(BeEmpty())
			g.Expect(bypassed.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(bypassed.Reason).To(Equal(v1alpha1.ReasonThroughSidecar))
		}).Should(Succeed())
	})

	It("counts a Service targeting the port the sidecar took over (sluice.dev/take-over-port) as routed", func(ctx context.Context) {
		pod := injectedPod(ns, "web-1", map[string]string{"app": "web"})
		pod.Spec.Containers[0].Ports[0].Name = ""
		pod.Spec.InitContainers[0].Ports[0].Name = "http"
		Expect(k8sClient.Create(ctx, pod)).To(Succeed())
		Expect(k8sClient.Create(ctx, newService(ns, "web", map[string]string{"app": "web"}, port("http", 80, intstr.FromString("http"))))).To(Succeed())
		Expect(k8sClient.Create(ctx, newPolicy(ns, "web"))).To(Succeed())
		Eventually(func(g Gomega) {
			p, bypassed := condition(g, ctx, ns, "web", v1alpha1.ConditionSidecarBypassed)
			g.Expect(bypassed).NotTo(BeNil())
			g.Expect(bypassed.Status).To(Equal(metav1.ConditionFalse), bypassed.Message)
			g.Expect(p.Status.BypassingServices).To(BeEmpty())
		}).Should(Succeed())
	})
})
