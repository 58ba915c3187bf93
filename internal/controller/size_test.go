package controller_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/policy"
)

// wide is a policy of 64 rules named after it (so that policies selecting the same pods do not
// conflict), each rule with its own path; junk random base64url characters go into each rule's
// path and headers, which gzip cannot shrink below three quarters.
func wide(ns, name string, junk int) *v1alpha1.RateLimitPolicy {
	return newPolicy(ns, name, func(p *v1alpha1.RateLimitPolicy) {
		p.Spec.Rules = nil
		for j := range 64 {
			r := v1alpha1.Rule{
				Name:      fmt.Sprintf("%s-r%02d", name, j),
				Key:       []v1alpha1.KeyPart{{ClientIP: &v1alpha1.ClientIPKey{}}, {Header: &v1alpha1.HeaderKey{Name: "x-tenant"}}},
				Algorithm: v1alpha1.TokenBucket,
				Limit:     int64(10 + j),
				Window:    "1m",
				Match:     &v1alpha1.RuleMatch{PathPrefix: fmt.Sprintf("/api/v1/%s/resource-%02d/", name, j), Methods: []v1alpha1.HTTPMethod{"GET", "POST"}},
			}
			if junk > 0 {
				r.Match.PathPrefix += randomText(junk/4 - 40)
				for h := range 3 {
					r.Match.Headers = append(r.Match.Headers, v1alpha1.HeaderMatch{Name: v1alpha1.HeaderName(fmt.Sprintf("x-h%d", h)), Value: randomText(junk/4 - 40)})
				}
			}
			p.Spec.Rules = append(p.Spec.Rules, r)
		}
	})
}

func randomText(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)[:n]
}

// conditions returns the Accepted and Ready conditions of every policy of ns by name.
func conditions(g Gomega, ctx context.Context, ns string) map[string][2]*metav1.Condition {
	var list v1alpha1.RateLimitPolicyList
	g.Expect(k8sClient.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
	out := map[string][2]*metav1.Condition{}
	for _, p := range list.Items {
		a, r := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionAccepted), meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionReady)
		g.Expect(a).NotTo(BeNil(), p.Name)
		g.Expect(r).NotTo(BeNil(), p.Name)
		g.Expect(a.ObservedGeneration).To(Equal(p.Generation))
		out[p.Name] = [2]*metav1.Condition{a, r}
	}
	return out
}

var _ = Describe("A namespace near the ConfigMap's size limit", func() {
	var ns string
	BeforeEach(func(ctx context.Context) { ns = newNamespace(ctx) })

	It("renders 60 policies of 64 rules each, compressed, and all reach Ready", func(ctx context.Context) {
		for i := range 60 {
			Expect(k8sClient.Create(ctx, wide(ns, fmt.Sprintf("p%02d", i), 0))).To(Succeed())
		}
		Eventually(func(g Gomega) {
			conds := conditions(g, ctx, ns)
			g.Expect(conds).To(HaveLen(60))
			for name, c := range conds {
				g.Expect(c[1].Status).To(Equal(metav1.ConditionTrue), "%s: %s", name, c[1].Message)
			}
			cm, doc := rendered(g, ctx, ns)
			g.Expect(doc.Policies).To(HaveLen(60))
			g.Expect(cm.BinaryData).To(HaveKey(policy.CompressedKey))
			GinkgoWriter.Printf("60 x 64 rules: %d bytes compressed\n", len(cm.BinaryData[policy.CompressedKey]))
		}).WithTimeout(3 * time.Minute).WithPolling(time.Second).Should(Succeed())
	})

	It("keeps its oldest policies Ready, marks the rest TooLarge, and brings the next in when one goes", func(ctx context.Context) {
		// Each policy compresses to about 115 KiB: 10 do not fit in 1 MiB. The waits are long
		// because a render of this namespace (1.5 MB of JSON compressed a few times while Fit
		// searches) takes half a minute under the race detector on a busy machine.
		const n = 10
		for i := range n {
			Expect(k8sClient.Create(ctx, wide(ns, fmt.Sprintf("big-%02d", i), 2600))).To(Succeed())
		}
		// Created within a second or two: ties of creationTimestamp go by name, so oldest first
		// is name order as long as the names sort like the creation.
		var fit int
		Eventually(func(g Gomega) {
			conds := conditions(g, ctx, ns)
			g.Expect(conds).To(HaveLen(n))
			fit = 0
			for i := range n {
				c := conds[fmt.Sprintf("big-%02d", i)]
				if c[1].Status == metav1.ConditionTrue {
					g.Expect(fit).To(Equal(i), "big-%02d is Ready after a policy that is not", i)
					fit++
					continue
				}
				g.Expect(c[0].Status).To(Equal(metav1.ConditionFalse))
				g.Expect(c[0].Reason).To(Equal(v1alpha1.ReasonTooLarge), c[0].Message)
				g.Expect(c[0].Message).To(MatchRegexp(`over the 1\.00 MiB a ConfigMap holds`))
			}
			g.Expect(fit).To(BeNumerically(">", 0))
			g.Expect(fit).To(BeNumerically("<", n))
			_, doc := rendered(g, ctx, ns)
			g.Expect(names(doc)).To(HaveLen(fit))
		}).WithTimeout(3 * time.Minute).WithPolling(time.Second).Should(Succeed())
		GinkgoWriter.Printf("%d of %d policies fit\n", fit, n)

		By("deleting the oldest")
		Expect(k8sClient.Delete(ctx, &v1alpha1.RateLimitPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "big-00"}})).To(Succeed())
		Eventually(func(g Gomega) {
			conds := conditions(g, ctx, ns)
			next := conds[fmt.Sprintf("big-%02d", fit)]
			g.Expect(next[1].Status).To(Equal(metav1.ConditionTrue), next[1].Message)
			_, doc := rendered(g, ctx, ns)
			g.Expect(names(doc)).To(ContainElement(fmt.Sprintf("big-%02d", fit)))
			g.Expect(names(doc)).NotTo(ContainElement("big-00"))
		}).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())
	})
})
