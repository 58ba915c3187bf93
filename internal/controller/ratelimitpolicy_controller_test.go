package controller_test

import (
	"context"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/render"
)

// rendered reads and parses the namespace's ConfigMap.
func rendered(g Gomega, ctx context.Context, ns string) (*corev1.ConfigMap, *policy.Document) {
	var cm corev1.ConfigMap
	g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: policy.ConfigMapName}, &cm)).To(Succeed())
	doc, err := policy.Decode([]byte(cm.Data[policy.DataKey]), cm.BinaryData[policy.CompressedKey])
	g.Expect(err).NotTo(HaveOccurred())
	return &cm, doc
}

func names(doc *policy.Document) []string {
	var out []string
	for _, p := range doc.Policies {
		out = append(out, p.Name)
	}
	return out
}

// status reads a policy and returns it with its Accepted and Ready conditions.
func status(g Gomega, ctx context.Context, ns, name string) (*v1alpha1.RateLimitPolicy, *metav1.Condition, *metav1.Condition) {
	var p v1alpha1.RateLimitPolicy
	g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &p)).To(Succeed())
	accepted := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionAccepted)
	ready := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionReady)
	g.Expect(accepted).NotTo(BeNil())
	g.Expect(ready).NotTo(BeNil())
	return &p, accepted, ready
}

func expectReady(g Gomega, ctx context.Context, ns, name string, generation int64) *v1alpha1.RateLimitPolicy {
	p, accepted, ready := status(g, ctx, ns, name)
	g.Expect(p.Status.ObservedGeneration).To(Equal(generation))
	g.Expect(accepted.Status).To(Equal(metav1.ConditionTrue))
	g.Expect(accepted.ObservedGeneration).To(Equal(generation))
	g.Expect(ready.Status).To(Equal(metav1.ConditionTrue), ready.Message)
	g.Expect(ready.Reason).To(Equal(v1alpha1.ReasonRendered))
	g.Expect(ready.ObservedGeneration).To(Equal(generation))
	g.Expect(p.Status.ConfigMap).To(Equal(policy.ConfigMapName))
	return p
}

var _ = Describe("RateLimitPolicy controller", func() {
	var ns string
	BeforeEach(func(ctx context.Context) { ns = newNamespace(ctx) })

	It("renders a policy into the namespace's ConfigMap and reports Ready", func(ctx context.Context) {
		p := newPolicy(ns, "checkout", rule0(func(r *v1alpha1.Rule) {
			r.Burst = ptr.To[int64](20)
			r.Window = "1m"
			r.Key = append(r.Key, v1alpha1.KeyPart{Header: &v1alpha1.HeaderKey{Name: "x-api-key"}})
		}))
		Expect(k8sClient.Create(ctx, p)).To(Succeed())

		Eventually(func(g Gomega) {
			got := expectReady(g, ctx, ns, "checkout", 1)
			g.Expect(got.Status.Summary).To(Equal("TokenBucket 10/1m"))
			cm, doc := rendered(g, ctx, ns)
			g.Expect(cm.Annotations[policy.HashAnnotation]).To(Equal(policy.Hash([]byte(cm.Data[policy.DataKey]))))
			g.Expect(cm.Labels).To(HaveKeyWithValue("app.kubernetes.io/managed-by", "sluice"))
			g.Expect(cm.OwnerReferences).To(ConsistOf(HaveField("UID", got.UID)))
			g.Expect(doc.Version).To(Equal(policy.Version))
			g.Expect(doc.Namespace).To(Equal(ns))
			g.Expect(doc.Policies).To(HaveLen(1))
			r := doc.Policies[0].Rules[0]
			g.Expect(r).To(Equal(policy.Rule{
				Name: "per-client", Algorithm: "TokenBucket", Limit: 10, WindowMs: 60_000, Burst: 20, Cost: 1, Mode: "Enforce",
				Key: []policy.KeyPart{{Source: "clientIP"}, {Source: "header", Name: "X-Api-Key"}},
			}))
			g.Expect(doc.Policies[0].FailureMode).To(Equal(policy.FailureLocal))
			g.Expect(doc.Policies[0].Response).To(Equal(policy.Response{StatusCode: 429, Headers: "Both"}))
		}).Should(Succeed())

		By("recording an event for the rendered generation")
		Eventually(func(g Gomega) {
			g.Expect(eventReasons(g, ctx, ns, "checkout")).To(ContainElement(v1alpha1.ReasonRendered))
		}).Should(Succeed())
	})

	It("re-renders on update, writes only on change, and deletes the ConfigMap with the last policy", func(ctx context.Context) {
		p := newPolicy(ns, "web")
		Expect(k8sClient.Create(ctx, p)).To(Succeed())
		var version string
		Eventually(func(g Gomega) {
			expectReady(g, ctx, ns, "web", 1)
			cm, _ := rendered(g, ctx, ns)
			version = cm.ResourceVersion
		}).Should(Succeed())

		By("changing the limit")
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
		p.Spec.Rules[0].Limit = 42
		Expect(k8sClient.Update(ctx, p)).To(Succeed())
		Eventually(func(g Gomega) {
			expectReady(g, ctx, ns, "web", 2)
			cm, doc := rendered(g, ctx, ns)
			g.Expect(doc.Policies[0].Rules[0].Limit).To(Equal(int64(42)))
			g.Expect(cm.ResourceVersion).NotTo(Equal(version))
			version = cm.ResourceVersion
		}).Should(Succeed())

		By("a label change on the policy, which changes nothing rendered")
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
		p.Labels = map[string]string{"team": "payments"}
		Expect(k8sClient.Update(ctx, p)).To(Succeed())
		Consistently(func(g Gomega) {
			cm, _ := rendered(g, ctx, ns)
			g.Expect(cm.ResourceVersion).To(Equal(version))
		}, "1s", "100ms").Should(Succeed())

		By("repairing a hand-edited ConfigMap")
		cm := &corev1.ConfigMap{}
		Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: policy.ConfigMapName}, cm)).To(Succeed())
		cm.Data[policy.DataKey] = "{}"
		Expect(k8sClient.Update(ctx, cm)).To(Succeed())
		Eventually(func(g Gomega) {
			_, doc := rendered(g, ctx, ns)
			g.Expect(names(doc)).To(Equal([]string{"web"}))
		}).Should(Succeed())

		By("deleting the policy")
		Expect(k8sClient.Delete(ctx, p)).To(Succeed())
		Eventually(func(g Gomega) {
			err := k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: policy.ConfigMapName}, &corev1.ConfigMap{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "ConfigMap should be gone, got %v", err)
		}).Should(Succeed())
	})

	It("counts the ready pods a policy selects and renders them as replicas", func(ctx context.Context) {
		Expect(k8sClient.Create(ctx, newPolicy(ns, "web"))).To(Succeed())
		pods := []*corev1.Pod{
			newPod(ns, "web-1", map[string]string{"app": "web"}),
			newPod(ns, "web-2", map[string]string{"app": "web"}),
			newPod(ns, "other", map[string]string{"app": "other"}),
		}
		for _, pod := range pods {
			Expect(k8sClient.Create(ctx, pod)).To(Succeed())
		}
		// The ready pods it selects, by name and sorted: each pod's rank for its exact share.
		expectReplicas := func(n int32, names ...string) {
			GinkgoHelper()
			Eventually(func(g Gomega) {
				p := expectReady(g, ctx, ns, "web", 1)
				g.Expect(p.Status.MatchedPods).To(Equal(n))
				_, doc := rendered(g, ctx, ns)
				g.Expect(doc.Policies[0].Replicas).To(Equal(n))
				g.Expect(doc.Policies[0].Pods).To(Equal(append([]string{}, names...)))
			}).Should(Succeed())
		}
		expectReplicas(0)

		By("the pods becoming ready")
		for _, pod := range pods {
			setReady(ctx, pod, true)
		}
		expectReplicas(2, "web-1", "web-2")

		By("one pod becoming unready")
		setReady(ctx, pods[0], false)
		expectReplicas(1, "web-2")

		By("a ready pod's labels changing so it is no longer selected")
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(pods[1]), pods[1])).To(Succeed())
		pods[1].Labels = map[string]string{"app": "canary"}
		Expect(k8sClient.Update(ctx, pods[1])).To(Succeed())
		expectReplicas(0)

		By("a ready pod gaining the label")
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(pods[2]), pods[2])).To(Succeed())
		pods[2].Labels = map[string]string{"app": "web"}
		Expect(k8sClient.Update(ctx, pods[2])).To(Succeed())
		expectReplicas(1, "other")

		By("the pod being deleted")
		Expect(k8sClient.Delete(ctx, pods[2], client.GracePeriodSeconds(0))).To(Succeed())
		expectReplicas(0)
	})

	It("renders the ready pods by name exactly as sluicectl render --pods does", func(ctx context.Context) {
		Expect(k8sClient.Create(ctx, newPolicy(ns, "six", rule0(func(r *v1alpha1.Rule) { r.Limit = 6 })))).To(Succeed())
		Expect(k8sClient.Create(ctx, newPolicy(ns, "two", rule0(func(r *v1alpha1.Rule) { r.Name, r.Limit = "other", 2 })))).To(Succeed())
		names := []string{"web-d", "web-a", "web-c", "web-b"}
		for _, name := range names {
			pod := newPod(ns, name, map[string]string{"app": "web"})
			Expect(k8sClient.Create(ctx, pod)).To(Succeed())
			setReady(ctx, pod, true)
		}
		Eventually(func(g Gomega) {
			cm, doc := rendered(g, ctx, ns)
			g.Expect(doc.Policies).To(HaveLen(2))
			g.Expect(doc.Policies[0].Pods).To(Equal([]string{"web-a", "web-b", "web-c", "web-d"}))
			var list v1alpha1.RateLimitPolicyList
			g.Expect(k8sClient.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
			offline, verdicts := render.Build(ns, list.Items, render.NamedPods(names))
			g.Expect(verdicts).To(HaveLen(2))
			want, err := policy.Marshal(offline)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(cm.Data[policy.DataKey]).To(Equal(string(want)))
		}).Should(Succeed())
	})

	It("renders two policies of one namespace into one ConfigMap, sorted by name", func(ctx context.Context) {
		Expect(k8sClient.Create(ctx, newPolicy(ns, "zeta"))).To(Succeed())
		Expect(k8sClient.Create(ctx, newPolicy(ns, "alpha", func(p *v1alpha1.RateLimitPolicy) {
			p.Spec.PodSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "api"}}
		}))).To(Succeed())
		Eventually(func(g Gomega) {
			expectReady(g, ctx, ns, "zeta", 1)
			expectReady(g, ctx, ns, "alpha", 1)
			cm, doc := rendered(g, ctx, ns)
			g.Expect(names(doc)).To(Equal([]string{"alpha", "zeta"}))
			g.Expect(cm.OwnerReferences).To(HaveLen(2))
		}).Should(Succeed())

		By("deleting one, the other stays")
		Expect(k8sClient.Delete(ctx, newPolicy(ns, "zeta"))).To(Succeed())
		Eventually(func(g Gomega) {
			cm, doc := rendered(g, ctx, ns)
			g.Expect(names(doc)).To(Equal([]string{"alpha"}))
			g.Expect(cm.OwnerReferences).To(HaveLen(1))
		}).Should(Succeed())
	})

	It("keeps namespaces apart", func(ctx context.Context) {
		other := newNamespace(ctx)
		Expect(k8sClient.Create(ctx, newPolicy(ns, "a"))).To(Succeed())
		Expect(k8sClient.Create(ctx, newPolicy(other, "b"))).To(Succeed())
		Eventually(func(g Gomega) {
			_, doc := rendered(g, ctx, ns)
			g.Expect(names(doc)).To(Equal([]string{"a"}))
			_, doc = rendered(g, ctx, other)
			g.Expect(names(doc)).To(Equal([]string{"b"}))
			g.Expect(doc.Namespace).To(Equal(other))
		}).Should(Succeed())
	})

	It("refuses a rule name that another policy selecting the same pods already uses", func(ctx context.Context) {
		Expect(k8sClient.Create(ctx, newPolicy(ns, "first"))).To(Succeed())
		Eventually(func(g Gomega) { expectReady(g, ctx, ns, "first", 1) }).Should(Succeed())
		Expect(k8sClient.Create(ctx, newPolicy(ns, "second"))).To(Succeed())
		Eventually(func(g Gomega) {
			p, accepted, ready := status(g, ctx, ns, "second")
			g.Expect(accepted.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(accepted.Reason).To(Equal(v1alpha1.ReasonRuleConflict))
			g.Expect(accepted.Message).To(ContainSubstring(`rule "per-client" is also defined by policy "first"`))
			g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(p.Status.ConfigMap).To(BeEmpty())
			_, doc := rendered(g, ctx, ns)
			g.Expect(names(doc)).To(Equal([]string{"first"}))
		}).Should(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(eventReasons(g, ctx, ns, "second")).To(ContainElement(v1alpha1.ReasonRuleConflict))
		}).Should(Succeed())

		By("a pod selected by both policies when the selectors differ")
		Expect(k8sClient.Create(ctx, newPolicy(ns, "third", func(p *v1alpha1.RateLimitPolicy) {
			p.Spec.PodSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "front"}}
		}))).To(Succeed())
		Eventually(func(g Gomega) { expectReady(g, ctx, ns, "third", 1) }).Should(Succeed())
		Expect(k8sClient.Create(ctx, newPod(ns, "both", map[string]string{"app": "web", "tier": "front"}))).To(Succeed())
		Eventually(func(g Gomega) {
			_, accepted, _ := status(g, ctx, ns, "third")
			g.Expect(accepted.Reason).To(Equal(v1alpha1.ReasonRuleConflict))
		}).Should(Succeed())

		By("deleting the first policy, the second is accepted")
		Expect(k8sClient.Delete(ctx, newPolicy(ns, "first"))).To(Succeed())
		Eventually(func(g Gomega) {
			expectReady(g, ctx, ns, "second", 1)
			_, doc := rendered(g, ctx, ns)
			g.Expect(names(doc)).To(Equal([]string{"second"}))
		}).Should(Succeed())
	})
})

// eventReasons lists the reasons of the events about an object of the namespace.
func eventReasons(g Gomega, ctx context.Context, ns, object string) []string {
	var list eventsv1.EventList
	g.Expect(k8sClient.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
	var out []string
	for _, e := range list.Items {
		if e.Regarding.Name == object {
			out = append(out, e.Reason)
		}
	}
	return out
}
