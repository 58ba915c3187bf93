package controller_test

import (
	"context"
	"sync/atomic"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/controller"
	"github.com/sluice-dev/sluice/internal/inject"
	"github.com/sluice-dev/sluice/internal/policy"
)

// annotated marks a pod as asking for the sidecar; this suite runs no webhook, so it stays
// without one unless the test adds it.
func annotated(pod *corev1.Pod) *corev1.Pod {
	pod.Annotations = map[string]string{inject.AnnotationInject: "true"}
	return pod
}

// sidecarEvents returns the SidecarMissing events about a policy, by the pod they name.
func sidecarEvents(g Gomega, ctx context.Context, ns, policyName string) map[string]eventsv1.Event {
	var list eventsv1.EventList
	g.Expect(k8sClient.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
	out := map[string]eventsv1.Event{}
	for _, e := range list.Items {
		if e.Regarding.Name == policyName && e.Reason == controller.ReasonSidecarMissing && e.Related != nil {
			out[e.Related.Name] = e
		}
	}
	return out
}

// uninjectedJob creates policy "web" and an uninjected pod "job" it selects, and waits until the
// policy counts it.
func uninjectedJob(ctx context.Context, ns string) *corev1.Pod {
	GinkgoHelper()
	Expect(k8sClient.Create(ctx, newPolicy(ns, "web"))).To(Succeed())
	pod := annotated(newPod(ns, "job", map[string]string{"app": "web"}))
	Expect(k8sClient.Create(ctx, pod)).To(Succeed())
	Eventually(func(g Gomega) {
		p, _, _ := status(g, ctx, ns, "web")
		g.Expect(p.Status.UninjectedPods).To(BeEquivalentTo(1))
	}).Should(Succeed())
	return pod
}

var _ = Describe("Pods that ask for the sidecar but run without it", func() {
	var ns string
	BeforeEach(func(ctx context.Context) { ns = newNamespace(ctx) })

	It("are counted in status.uninjectedPods and named in a Warning event on each policy that selects them", func(ctx context.Context) {
		Expect(k8sClient.Create(ctx, newPolicy(ns, "web"))).To(Succeed())
		Expect(k8sClient.Create(ctx, newPolicy(ns, "other", func(p *v1alpha1.RateLimitPolicy) {
			p.Spec.PodSelector.MatchLabels = map[string]string{"app": "other"}
		}))).To(Succeed())
		Eventually(func(g Gomega) { expectReady(g, ctx, ns, "web", 1) }).Should(Succeed())

		By("creating an uninjected pod, an injected one, one not asking, and one another policy selects")
		Expect(k8sClient.Create(ctx, annotated(newPod(ns, "bare", map[string]string{"app": "web"})))).To(Succeed())
		injected := annotated(newPod(ns, "injected", map[string]string{"app": "web"}))
		injected.Spec.InitContainers = []corev1.Container{{Name: inject.ContainerName, Image: "example.invalid/sidecar:1",
			RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)}}
		Expect(k8sClient.Create(ctx, injected)).To(Succeed())
		Expect(k8sClient.Create(ctx, newPod(ns, "plain", map[string]string{"app": "web"}))).To(Succeed())
		optedOut := newPod(ns, "opted-out", map[string]string{"app": "web"})
		optedOut.Annotations = map[string]string{inject.AnnotationInject: "false"}
		Expect(k8sClient.Create(ctx, optedOut)).To(Succeed())
		Expect(k8sClient.Create(ctx, annotated(newPod(ns, "elsewhere", map[string]string{"app": "other"})))).To(Succeed())

		Eventually(func(g Gomega) {
			p, _, _ := status(g, ctx, ns, "web")
			g.Expect(p.Status.UninjectedPods).To(BeEquivalentTo(1))
			events := sidecarEvents(g, ctx, ns, "web")
			g.Expect(events).To(HaveLen(1))
			g.Expect(events).To(HaveKey("bare"))
			e := events["bare"]
			g.Expect(e.Type).To(Equal(corev1.EventTypeWarning))
			g.Expect(e.Related.Kind).To(Equal("Pod"))
			g.Expect(e.Note).To(ContainSubstring("Pod bare is annotated sluice.dev/inject"))
			g.Expect(e.Note).To(ContainSubstring("sluice-sidecar"))

			other, _, _ := status(g, ctx, ns, "other")
			g.Expect(other.Status.UninjectedPods).To(BeEquivalentTo(1))
			g.Expect(sidecarEvents(g, ctx, ns, "other")).To(HaveKey("elsewhere"))
		}).Should(Succeed())

		By("deleting the uninjected pod, the count returns to zero")
		Expect(k8sClient.Delete(ctx, newPod(ns, "bare", nil))).To(Succeed())
		Eventually(func(g Gomega) {
			p, _, _ := status(g, ctx, ns, "web")
			g.Expect(p.Status.UninjectedPods).To(BeZero())
		}).Should(Succeed())
	})

	It("are no longer counted once they have finished", func(ctx context.Context) {
		pod := uninjectedJob(ctx, ns)

		pod.Status.Phase = corev1.PodSucceeded
		Expect(k8sClient.Status().Update(ctx, pod)).To(Succeed())
		Eventually(func(g Gomega) {
			p, _, _ := status(g, ctx, ns, "web")
			g.Expect(p.Status.UninjectedPods).To(BeZero())
		}).Should(Succeed())
	})

	It("hold no share of the limits: the shares go to the pods that enforce them", func(ctx context.Context) {
		Expect(k8sClient.Create(ctx, newPolicy(ns, "web"))).To(Succeed())
		injected := annotated(newPod(ns, "injected", map[string]string{"app": "web"}))
		injected.Spec.InitContainers = []corev1.Container{{Name: inject.ContainerName, Image: "example.invalid/sidecar:1",
			RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)}}
		bare := annotated(newPod(ns, "bare", map[string]string{"app": "web"}))
		for _, pod := range []*corev1.Pod{injected, bare} {
			Expect(k8sClient.Create(ctx, pod)).To(Succeed())
			setReady(ctx, pod, true)
		}
		Eventually(func(g Gomega) {
			p, _, _ := status(g, ctx, ns, "web")
			g.Expect(p.Status.UninjectedPods).To(BeEquivalentTo(1))
			_, doc := rendered(g, ctx, ns)
			g.Expect(doc.Policies).To(HaveLen(1))
			g.Expect(doc.Policies[0].Pods).To(Equal([]string{"injected"}))
			g.Expect(doc.Policies[0].Replicas).To(BeEquivalentTo(1))
		}).Should(Succeed())
	})
})

// A reconciler's cache can lag behind its own status patch, and the watch filters status
// updates out, so nothing refreshes it in time. A reconcile that compared the new status with
// that stale copy would take a count that went back (1 → 0) for unchanged and never write it.
// The reconciler here reads the API server directly, except for the policy list, which it is
// handed from before its own last patch: the cache's copy at its stalest.
var _ = Describe("A status that goes back to what a stale cache still holds", func() {
	It("is written all the same", func(ctx context.Context) {
		ns := newNamespace(ctx)
		pod := uninjectedJob(ctx, ns)

		By("taking the server back to a status without the pod, as an earlier reconcile wrote it")
		p, _, _ := status(Default, ctx, ns, "web")
		before := p.DeepCopy()
		p.Status.UninjectedPods = 0
		Expect(k8sClient.Status().Patch(ctx, p, client.MergeFrom(before))).To(Succeed())
		var stale v1alpha1.RateLimitPolicyList
		Expect(k8sClient.List(ctx, &stale, client.InNamespace(ns))).To(Succeed())

		var (
			useStale atomic.Bool
			patches  atomic.Int32
		)
		direct, err := client.NewWithWatch(cfg, client.Options{Scheme: controller.NewScheme()})
		Expect(err).NotTo(HaveOccurred())
		c := interceptor.NewClient(direct, interceptor.Funcs{
			List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
				if l, ok := list.(*v1alpha1.RateLimitPolicyList); ok && useStale.Load() {
					stale.DeepCopyInto(l)
					return nil
				}
				return c.List(ctx, list, opts...)
			},
			SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
				patches.Add(1)
				return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
			},
		})
		r := &controller.RateLimitPolicyReconciler{Client: c, Clock: clock.RealClock{}}
		req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: policy.ConfigMapName}}

		By("reconciling with a fresh list: the reconciler writes the count of 1 itself")
		_, err = r.Reconcile(ctx, req)
		Expect(err).NotTo(HaveOccurred())
		Expect(patches.Load()).To(BeEquivalentTo(1))

		By("finishing the pod and reconciling with the list from before that write")
		pod.Status.Phase = corev1.PodSucceeded
		Expect(k8sClient.Status().Update(ctx, pod)).To(Succeed())
		useStale.Store(true)
		_, err = r.Reconcile(ctx, req)
		Expect(err).NotTo(HaveOccurred())
		Expect(patches.Load()).To(BeEquivalentTo(2), "the count went back to 0: the status must be written")
		got, _, _ := status(Default, ctx, ns, "web")
		Expect(got.Status.UninjectedPods).To(BeZero())
	})
})
