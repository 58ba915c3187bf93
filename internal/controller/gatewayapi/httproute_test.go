package gatewayapi_test

import (
	"context"
	"fmt"
	"sync/atomic"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/policy"
)

var nsCounter atomic.Int64

func newNamespace(ctx context.Context) string {
	name := fmt.Sprintf("gw-%d", nsCounter.Add(1))
	Expect(k8sClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})).To(Succeed())
	return name
}

func service(ns, name, app string) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.ServiceSpec{
		Selector: map[string]string{"app": app}, Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}
}

// shopRoute sends /api to Service api and /static to Service static, in rules named api and
// static.
func shopRoute(ns string) *gatewayv1.HTTPRoute {
	prefix := gatewayv1.PathMatchPathPrefix
	rule := func(name, path, backend string) gatewayv1.HTTPRouteRule {
		return gatewayv1.HTTPRouteRule{Name: ptr.To(gatewayv1.SectionName(name)),
			Matches:     []gatewayv1.HTTPRouteMatch{{Path: &gatewayv1.HTTPPathMatch{Type: &prefix, Value: ptr.To(path)}}},
			BackendRefs: []gatewayv1.HTTPBackendRef{{BackendRef: gatewayv1.BackendRef{BackendObjectReference: gatewayv1.BackendObjectReference{Name: gatewayv1.ObjectName(backend), Port: ptr.To(gatewayv1.PortNumber(80))}}}}}
	}
	return &gatewayv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "shop"}, Spec: gatewayv1.HTTPRouteSpec{
		Rules: []gatewayv1.HTTPRouteRule{rule("api", "/api", "api"), rule("static", "/static", "static")}}}
}

func routePolicy(ns, name, section string) *v1alpha1.RateLimitPolicy {
	return &v1alpha1.RateLimitPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.RateLimitPolicySpec{
			TargetRefs: []v1alpha1.TargetRef{{Group: gatewayv1.GroupName, Kind: "HTTPRoute", Name: "shop", SectionName: section}},
			Rules: []v1alpha1.Rule{{Name: name, Key: []v1alpha1.KeyPart{{ClientIP: &v1alpha1.ClientIPKey{}}},
				Algorithm: v1alpha1.TokenBucket, Limit: 10, Window: "1s"}},
		},
	}
}

// renderedPolicy reads the namespace's ConfigMap and returns its policy name.
func renderedPolicy(g Gomega, ctx context.Context, ns, name string) policy.Policy {
	var cm corev1.ConfigMap
	g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: policy.ConfigMapName}, &cm)).To(Succeed())
	doc, err := policy.Decode([]byte(cm.Data[policy.DataKey]), cm.BinaryData[policy.CompressedKey])
	g.Expect(err).NotTo(HaveOccurred())
	for _, p := range doc.Policies {
		if p.Name == name {
			return p
		}
	}
	g.Expect(doc.Policies).To(ContainElement(HaveField("Name", name)))
	return policy.Policy{}
}

func conditions(g Gomega, ctx context.Context, ns, name string) *v1alpha1.RateLimitPolicy {
	var p v1alpha1.RateLimitPolicy
	g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &p)).To(Succeed())
	return &p
}

var _ = Describe("Policies attached to HTTPRoutes", func() {
	var ns string
	BeforeEach(func(ctx context.Context) { ns = newNamespace(ctx) })

	It("apply to a rule's backend pods and match its requests; the whole route's rules otherwise; and follow edits of the route", func(ctx context.Context) {
		Expect(k8sClient.Create(ctx, service(ns, "api", "api"))).To(Succeed())
		Expect(k8sClient.Create(ctx, service(ns, "static", "api"))).To(Succeed()) // the same pods serve both
		route := shopRoute(ns)
		Expect(k8sClient.Create(ctx, route)).To(Succeed())
		Expect(k8sClient.Create(ctx, routePolicy(ns, "api-only", "api"))).To(Succeed())
		Expect(k8sClient.Create(ctx, routePolicy(ns, "whole", ""))).To(Succeed())

		Eventually(func(g Gomega) {
			p := conditions(g, ctx, ns, "api-only")
			g.Expect(meta.IsStatusConditionTrue(p.Status.Conditions, v1alpha1.ConditionReady)).To(BeTrue(), "%+v", p.Status.Conditions)
			g.Expect(meta.IsStatusConditionTrue(p.Status.Conditions, v1alpha1.ConditionResolvedRefs)).To(BeTrue())
			r := renderedPolicy(g, ctx, ns, "api-only")
			g.Expect(r.Selector.MatchLabels).To(Equal(map[string]string{"app": "api"}))
			g.Expect(r.Rules[0].Match.Routes).To(Equal([]policy.RouteMatch{{PathPrefix: "/api"}}))
			g.Expect(renderedPolicy(g, ctx, ns, "whole").Rules[0].Match.Routes).To(Equal([]policy.RouteMatch{{PathPrefix: "/api"}, {PathPrefix: "/static"}}))
		}).Should(Succeed())

		By("following an edit of the rule's match")
		Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "shop"}, route)).To(Succeed())
		route.Spec.Rules[0].Matches[0].Path.Value = ptr.To("/v2/api")
		Expect(k8sClient.Update(ctx, route)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(renderedPolicy(g, ctx, ns, "api-only").Rules[0].Match.Routes).To(Equal([]policy.RouteMatch{{PathPrefix: "/v2/api"}}))
		}).Should(Succeed())

		By("reporting a rule name the route does not have, and the route's deletion")
		Expect(k8sClient.Create(ctx, routePolicy(ns, "nope", "checkout"))).To(Succeed())
		Expect(k8sClient.Delete(ctx, route)).To(Succeed())
		Eventually(func(g Gomega) {
			p := conditions(g, ctx, ns, "api-only")
			resolved := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionResolvedRefs)
			g.Expect(resolved).NotTo(BeNil())
			g.Expect(resolved.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(resolved.Message).To(ContainSubstring("HTTPRoute shop does not exist."))
			g.Expect(meta.IsStatusConditionFalse(p.Status.Conditions, v1alpha1.ConditionAccepted)).To(BeTrue())
		}).Should(Succeed())
		Expect(k8sClient.Create(ctx, shopRoute(ns))).To(Succeed())
		Eventually(func(g Gomega) {
			p := conditions(g, ctx, ns, "nope")
			resolved := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionResolvedRefs)
			g.Expect(resolved).NotTo(BeNil())
			g.Expect(resolved.Message).To(ContainSubstring("HTTPRoute shop has no rule named checkout."))
			g.Expect(meta.IsStatusConditionTrue(conditions(g, ctx, ns, "api-only").Status.Conditions, v1alpha1.ConditionReady)).To(BeTrue())
		}).Should(Succeed())
	})

	It("refuse a rule that rewrites the request or matches what the sidecar cannot", func(ctx context.Context) {
		Expect(k8sClient.Create(ctx, service(ns, "api", "api"))).To(Succeed())
		route := shopRoute(ns)
		route.Spec.Rules = route.Spec.Rules[:1]
		route.Spec.Rules[0].Filters = []gatewayv1.HTTPRouteFilter{{Type: gatewayv1.HTTPRouteFilterURLRewrite,
			URLRewrite: &gatewayv1.HTTPURLRewriteFilter{Path: &gatewayv1.HTTPPathModifier{Type: gatewayv1.PrefixMatchHTTPPathModifier, ReplacePrefixMatch: ptr.To("/")}}}}
		Expect(k8sClient.Create(ctx, route)).To(Succeed())
		Expect(k8sClient.Create(ctx, routePolicy(ns, "api", "api"))).To(Succeed())
		Eventually(func(g Gomega) {
			p := conditions(g, ctx, ns, "api")
			resolved := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionResolvedRefs)
			g.Expect(resolved).NotTo(BeNil())
			g.Expect(resolved.Reason).To(Equal(v1alpha1.ReasonUnsupportedTarget))
			g.Expect(resolved.Message).To(ContainSubstring("has a URLRewrite filter"))
		}).Should(Succeed())
	})
})
