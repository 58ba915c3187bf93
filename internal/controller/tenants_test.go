package controller_test

import (
	"context"
	"fmt"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/controller"
	"github.com/sluice-dev/sluice/internal/policy"
)

// tenantTable is a table of n tenants t00000.. with limit 100+i (burst column empty), and
// extra rows after them.
func tenantTable(n int, extra ...string) string {
	var b strings.Builder
	b.WriteString("tenant,limit,burst\n")
	for i := range n {
		fmt.Fprintf(&b, "t%05d,%d,\n", i, 100+i)
	}
	for _, e := range extra {
		b.WriteString(e + "\n")
	}
	return b.String()
}

// tableConfigMap is the labelled ConfigMap limits of ns with the table under key per-tenant.
func tableConfigMap(ns, table string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "limits", Labels: map[string]string{v1alpha1.TenantLimitsLabel: "true"}},
		Data:       map[string]string{"per-tenant": table},
	}
}

// tenantRule makes the first rule per-tenant: a TokenBucket of 10 a minute keyed by client and
// X-Tenant, the tenant the second part, with its table in ConfigMap limits.
func tenantRule(p *v1alpha1.RateLimitPolicy) {
	rule0(func(r *v1alpha1.Rule) {
		r.Name, r.Limit, r.Window = "per-tenant", 10, "1m"
		r.Key = append(r.Key, v1alpha1.KeyPart{Header: &v1alpha1.HeaderKey{Name: "X-Tenant"}})
		r.TenantLimits = &v1alpha1.TenantLimitsSpec{ConfigMapName: "limits", KeyPart: ptr.To[int32](1)}
	})(p)
}

// renderedTenants returns the tenants of rule per-tenant of policy name as rendered in ns's
// ConfigMap, by value.
func renderedTenants(g Gomega, ctx context.Context, ns, name string) map[string]policy.TenantLimit {
	var cm corev1.ConfigMap
	g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: policy.ConfigMapName}, &cm)).To(Succeed())
	doc, err := policy.Decode([]byte(cm.Data[policy.DataKey]), cm.BinaryData[policy.CompressedKey])
	g.Expect(err).NotTo(HaveOccurred())
	for _, p := range doc.Policies {
		if p.Name != name {
			continue
		}
		for _, r := range p.Rules {
			if r.Name == "per-tenant" {
				g.Expect(r.Limit).To(Equal(int64(10)), "the rule keeps its own limit for other tenants")
				out := map[string]policy.TenantLimit{}
				if r.Tenants != nil {
					g.Expect(r.Tenants.Part).To(Equal(1))
					for _, e := range r.Tenants.Limits {
						out[e.Value] = e
					}
				}
				return out
			}
		}
	}
	g.Expect(name).To(BeEmpty(), "policy not rendered")
	return nil
}

// tenantCondition returns the policy's TenantLimitsResolved condition, checking it describes
// the policy's generation and that the policy is Ready all the same.
func tenantCondition(g Gomega, ctx context.Context, ns, name string) *metav1.Condition {
	var p v1alpha1.RateLimitPolicy
	g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &p)).To(Succeed())
	g.Expect(meta.IsStatusConditionTrue(p.Status.Conditions, v1alpha1.ConditionReady)).To(BeTrue())
	c := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionTenantLimitsResolved)
	g.Expect(c).NotTo(BeNil())
	g.Expect(c.ObservedGeneration).To(Equal(p.Generation))
	return c
}

var _ = Describe("Tenant limits", func() {
	var ns string
	BeforeEach(func(ctx context.Context) { ns = newNamespace(ctx) })

	It("renders a table of 10,000 tenants, follows an edit of one, and keeps the last good table while the table is invalid or gone", func(ctx context.Context) {
		cm := tableConfigMap(ns, tenantTable(10_000))
		Expect(k8sClient.Create(ctx, cm)).To(Succeed())
		Expect(k8sClient.Create(ctx, newPolicy(ns, "tenants", tenantRule))).To(Succeed())
		Eventually(func(g Gomega) {
			c := tenantCondition(g, ctx, ns, "tenants")
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue), c.Message)
			g.Expect(c.Message).To(Equal("rule per-tenant: 10000 tenants from ConfigMap limits, key per-tenant."))
			got := renderedTenants(g, ctx, ns, "tenants")
			g.Expect(got).To(HaveLen(10_000))
			// A bucket's row without a burst takes the rule's burst, unset here: its own limit.
			g.Expect(got["t04321"]).To(Equal(policy.TenantLimit{Value: "t04321", Limit: 4421, Burst: 4421}))
		}).Should(Succeed())

		By("keeping the last good table while a row is not a valid limit")
		good := cm.Data["per-tenant"]
		cm.Data["per-tenant"] = good + "t99999,many,\nt-new,5,\n"
		Expect(k8sClient.Update(ctx, cm)).To(Succeed())
		Eventually(func(g Gomega) {
			c := tenantCondition(g, ctx, ns, "tenants")
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Reason).To(Equal(v1alpha1.ReasonTenantLimitsInvalid))
			g.Expect(c.Message).To(Equal(`rule per-tenant: ConfigMap limits, key per-tenant: line 10002: tenant "t99999": limit "many" is not an integer from 0 to 100000000; its last good table (10000 tenants) stays enforced`))
		}).Should(Succeed())
		got := renderedTenants(Default, ctx, ns, "tenants")
		Expect(got).To(HaveLen(10_000))
		Expect(got).NotTo(HaveKey("t-new"), "an invalid table is not taken in part")

		By("following an edit of one tenant's limit, the policy untouched")
		// The render above wrote nothing (the last good table is what the ConfigMap holds),
		// so no render is pending: only the watch on the table brings this edit in.
		cm.Data["per-tenant"] = strings.Replace(good, "t04321,4421,\n", "t04321,7,3\n", 1)
		Expect(k8sClient.Update(ctx, cm)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(renderedTenants(g, ctx, ns, "tenants")["t04321"]).To(Equal(policy.TenantLimit{Value: "t04321", Limit: 7, Burst: 3}))
			g.Expect(tenantCondition(g, ctx, ns, "tenants").Status).To(Equal(metav1.ConditionTrue))
		}).Should(Succeed())

		By("keeping it while the ConfigMap is gone, even across a policy edit")
		Expect(k8sClient.Delete(ctx, cm)).To(Succeed())
		var p v1alpha1.RateLimitPolicy
		Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "tenants"}, &p)).To(Succeed())
		p.Spec.Rules[0].Mode = v1alpha1.Shadow
		Expect(k8sClient.Update(ctx, &p)).To(Succeed())
		Eventually(func(g Gomega) {
			c := tenantCondition(g, ctx, ns, "tenants")
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Message).To(ContainSubstring("ConfigMap limits not found in namespace " + ns))
			g.Expect(c.Message).To(HaveSuffix("its last good table (10000 tenants) stays enforced"))
		}).Should(Succeed())
		Expect(renderedTenants(Default, ctx, ns, "tenants")).To(HaveLen(10_000))

		By("taking the table again once it is back and valid")
		Expect(k8sClient.Create(ctx, tableConfigMap(ns, tenantTable(3)))).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(tenantCondition(g, ctx, ns, "tenants").Status).To(Equal(metav1.ConditionTrue))
			g.Expect(renderedTenants(g, ctx, ns, "tenants")).To(HaveLen(3))
		}).Should(Succeed())
	})

	It("says why a table is not read, and gives every tenant the rule's own limit until there is a good one", func(ctx context.Context) {
		cm := tableConfigMap(ns, tenantTable(2))
		cm.Labels = nil
		Expect(k8sClient.Create(ctx, cm)).To(Succeed())
		Expect(k8sClient.Create(ctx, newPolicy(ns, "unread", tenantRule))).To(Succeed())
		Eventually(func(g Gomega) {
			c := tenantCondition(g, ctx, ns, "unread")
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Message).To(Equal(`rule per-tenant: ConfigMap limits lacks the label sluice.dev/tenant-limits: "true", without which Sluice does not read it; every tenant gets the rule's own limit until it is fixed`))
			g.Expect(renderedTenants(g, ctx, ns, "unread")).To(BeEmpty())
		}).Should(Succeed())

		By("reading it once labelled: the label's arrival is an event the controller watches")
		cm.Labels = map[string]string{v1alpha1.TenantLimitsLabel: "true"}
		Expect(k8sClient.Update(ctx, cm)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(tenantCondition(g, ctx, ns, "unread").Status).To(Equal(metav1.ConditionTrue))
			g.Expect(renderedTenants(g, ctx, ns, "unread")).To(HaveLen(2))
		}).Should(Succeed())

		By("dropping the condition when the policy no longer has tenant limits")
		var p v1alpha1.RateLimitPolicy
		Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "unread"}, &p)).To(Succeed())
		p.Spec.Rules[0].TenantLimits = nil
		Expect(k8sClient.Update(ctx, &p)).To(Succeed())
		Eventually(func(g Gomega) {
			var got v1alpha1.RateLimitPolicy
			g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "unread"}, &got)).To(Succeed())
			g.Expect(got.Status.ObservedGeneration).To(Equal(got.Generation))
			g.Expect(meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionTenantLimitsResolved)).To(BeNil())
		}).Should(Succeed())
	})

	It("renders a descriptor rule's table into the RLS ConfigMap and follows its edits", func(ctx context.Context) {
		cm := tableConfigMap(ns, "tenant,limit\nacme,500\n")
		Expect(k8sClient.Create(ctx, cm)).To(Succeed())
		Expect(k8sClient.Create(ctx, newPolicy(ns, "edge", func(p *v1alpha1.RateLimitPolicy) {
			domainOnly(p)
			p.Spec.Domain = "edge-" + ns
			rule0(func(r *v1alpha1.Rule) {
				r.Name = "per-tenant"
				r.TenantLimits = &v1alpha1.TenantLimitsSpec{ConfigMapName: "limits"}
			})(p)
		}))).To(Succeed())
		rlsTenants := func(g Gomega) []policy.TenantLimit {
			var rcm corev1.ConfigMap
			g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: rlsNamespace, Name: controller.RLSConfigMapName}, &rcm)).To(Succeed())
			doc, err := policy.Decode([]byte(rcm.Data[policy.DataKey]), rcm.BinaryData[policy.CompressedKey])
			g.Expect(err).NotTo(HaveOccurred())
			for _, p := range doc.Policies {
				if p.Name == ns+"/edge" {
					g.Expect(p.Rules[0].Tenants).NotTo(BeNil())
					return p.Rules[0].Tenants.Limits
				}
			}
			g.Expect("policy").To(BeEmpty(), "not rendered")
			return nil
		}
		Eventually(func(g Gomega) {
			g.Expect(rlsTenants(g)).To(Equal([]policy.TenantLimit{{Value: "acme", Limit: 500, Burst: 500}}))
		}).Should(Succeed())
		cm.Data["per-tenant"] = "tenant,limit\nacme,5\n"
		Expect(k8sClient.Update(ctx, cm)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(rlsTenants(g)).To(Equal([]policy.TenantLimit{{Value: "acme", Limit: 5, Burst: 5}}))
		}).Should(Succeed())
		cm.Data["per-tenant"] = "tenant,limit\nacme,-5\n"
		Expect(k8sClient.Update(ctx, cm)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(tenantCondition(g, ctx, ns, "edge").Status).To(Equal(metav1.ConditionFalse))
		}).Should(Succeed())
		Expect(rlsTenants(Default)).To(Equal([]policy.TenantLimit{{Value: "acme", Limit: 5, Burst: 5}}), "the RLS server keeps the last good table too")
	})
})
