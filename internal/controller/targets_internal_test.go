package controller

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/inject"
	"github.com/sluice-dev/sluice/internal/policy"
)

func svc(name string, selector map[string]string, ports ...corev1.ServicePort) corev1.Service {
	return corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}, Spec: corev1.ServiceSpec{Selector: selector, Ports: ports}}
}

func route(name string, rules ...gatewayv1.HTTPRouteRule) gatewayv1.HTTPRoute {
	return gatewayv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}, Spec: gatewayv1.HTTPRouteSpec{Rules: rules}}
}

func routeRule(name, prefix string, backends ...string) gatewayv1.HTTPRouteRule {
	pt := gatewayv1.PathMatchPathPrefix
	r := gatewayv1.HTTPRouteRule{Name: ptr.To(gatewayv1.SectionName(name)),
		Matches: []gatewayv1.HTTPRouteMatch{{Path: &gatewayv1.HTTPPathMatch{Type: &pt, Value: ptr.To(prefix)}}}}
	for _, b := range backends {
		r.BackendRefs = append(r.BackendRefs, gatewayv1.HTTPBackendRef{BackendRef: gatewayv1.BackendRef{BackendObjectReference: gatewayv1.BackendObjectReference{Name: gatewayv1.ObjectName(b)}}})
	}
	return r
}

func refs(r ...v1alpha1.TargetRef) *v1alpha1.RateLimitPolicy {
	return &v1alpha1.RateLimitPolicy{Spec: v1alpha1.RateLimitPolicySpec{TargetRefs: r}}
}

var (
	svcRef = func(name, section string) v1alpha1.TargetRef {
		return v1alpha1.TargetRef{Kind: ServiceKind, Name: name, SectionName: section}
	}
	routeRef = func(name, section string) v1alpha1.TargetRef {
		return v1alpha1.TargetRef{Group: gatewayv1.GroupName, Kind: HTTPRouteKind, Name: name, SectionName: section}
	}
)

func TestResolveTargets(t *testing.T) {
	view := newTargetView([]corev1.Service{
		svc("web", map[string]string{"app": "web"}, corev1.ServicePort{Name: "http", Port: 80}),
		svc("canary", map[string]string{"app": "web-canary"}),
		svc("other", map[string]string{"app": "other", "tier": "x"}),
		svc("headless", nil),
	}, []gatewayv1.HTTPRoute{
		route("shop", routeRule("api", "/api", "web"), routeRule("static", "/static", "web")),
		route("split", routeRule("all", "/", "web", "canary")),
		route("gone", routeRule("x", "/x", "missing")),
	}, nil)
	web := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
	tests := map[string]struct {
		p          *v1alpha1.RateLimitPolicy
		selector   *metav1.LabelSelector
		routes     []policy.RouteMatch
		err        string
		unresolved []string // messages of the targets that do not resolve
	}{
		"a Service":              {p: refs(svcRef("web", "")), selector: web},
		"a Service's port":       {p: refs(svcRef("web", "http")), selector: web},
		"a port it lacks":        {p: refs(svcRef("web", "grpc")), err: "no target", unresolved: []string{"Service web has no port named grpc."}},
		"a missing Service":      {p: refs(svcRef("nope", ""), svcRef("web", "")), selector: web, unresolved: []string{"Service nope does not exist."}},
		"a Service w/o selector": {p: refs(svcRef("headless", "")), err: "no target", unresolved: []string{"Service headless has no selector"}},
		"two Services, one label apart": {p: refs(svcRef("web", ""), svcRef("canary", "")), selector: &metav1.LabelSelector{
			MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: metav1.LabelSelectorOpIn, Values: []string{"web", "web-canary"}}}}},
		"two Services, other labels": {p: refs(svcRef("web", ""), svcRef("other", "")), err: "select pods by different labels"},
		"a route rule":               {p: refs(routeRef("shop", "api")), selector: web, routes: []policy.RouteMatch{{PathPrefix: "/api"}}},
		"a whole route":              {p: refs(routeRef("shop", "")), selector: web, routes: []policy.RouteMatch{{PathPrefix: "/api"}, {PathPrefix: "/static"}}},
		"a rule it lacks":            {p: refs(routeRef("shop", "checkout")), err: "no target", unresolved: []string{"HTTPRoute shop has no rule named checkout."}},
		"a route to two Services": {p: refs(routeRef("split", "")), routes: []policy.RouteMatch{{}}, selector: &metav1.LabelSelector{
			MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: metav1.LabelSelectorOpIn, Values: []string{"web", "web-canary"}}}}},
		"a route to a missing Service":   {p: refs(routeRef("gone", "")), err: "no target", unresolved: []string{"backend Service missing does not exist."}},
		"a missing route":                {p: refs(routeRef("nope", "")), err: "no target", unresolved: []string{"HTTPRoute nope does not exist."}},
		"a Service and a route together": {p: refs(svcRef("web", ""), routeRef("shop", "api")), err: "mixes Services and HTTPRoutes"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			res := view.resolve(tc.p)
			if len(res.resolved) != len(tc.p.Spec.TargetRefs) {
				t.Fatalf("%d target conditions for %d targets", len(res.resolved), len(tc.p.Spec.TargetRefs))
			}
			var unresolved []string
			for _, c := range res.resolved {
				if c.Status == metav1.ConditionFalse {
					unresolved = append(unresolved, c.Message)
				}
			}
			if len(unresolved) != len(tc.unresolved) {
				t.Fatalf("unresolved %q, want %q", unresolved, tc.unresolved)
			}
			for i := range unresolved {
				if !strings.Contains(unresolved[i], tc.unresolved[i]) {
					t.Errorf("unresolved[%d] = %q, want it to contain %q", i, unresolved[i], tc.unresolved[i])
				}
			}
			if tc.err != "" {
				if res.err == nil || !strings.Contains(res.err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", res.err, tc.err)
				}
				return
			}
			if res.err != nil {
				t.Fatal(res.err)
			}
			if got, want := labelString(t, res.target.Selector), labelString(t, tc.selector); got != want {
				t.Errorf("selector %s, want %s", got, want)
			}
			if len(res.target.Routes) != len(tc.routes) {
				t.Fatalf("routes %+v, want %+v", res.target.Routes, tc.routes)
			}
			for i := range tc.routes {
				if res.target.Routes[i].PathPrefix != tc.routes[i].PathPrefix || res.target.Routes[i].PathExact != tc.routes[i].PathExact {
					t.Errorf("routes[%d] = %+v, want %+v", i, res.target.Routes[i], tc.routes[i])
				}
			}
		})
	}
}

func labelString(t *testing.T, s *metav1.LabelSelector) string {
	t.Helper()
	sel, err := metav1.LabelSelectorAsSelector(s)
	if err != nil {
		t.Fatal(err)
	}
	return sel.String()
}

func TestResolveWithoutGatewayAPI(t *testing.T) {
	view := newTargetView(nil, nil, errors.New(`no matches for kind "HTTPRoute" in version "gateway.networking.k8s.io/v1"`))
	res := view.resolve(refs(routeRef("shop", "")))
	if res.err == nil || len(res.resolved) != 1 || res.resolved[0].Reason != v1alpha1.ReasonInvalidKind ||
		!strings.Contains(res.resolved[0].Message, "install Gateway API's CRDs") {
		t.Fatalf("got %+v", res)
	}
}

func TestBypassing(t *testing.T) {
	pod := func(name string, appPortName, sidecarPortName string) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "web"}}, Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "app", Ports: []corev1.ContainerPort{{Name: appPortName, ContainerPort: 8080}}}},
			InitContainers: []corev1.Container{{Name: inject.ContainerName, RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
				Ports: []corev1.ContainerPort{{Name: sidecarPortName, ContainerPort: 8081}}}},
		}}
	}
	port := func(name string, target intstr.IntOrString) corev1.ServicePort {
		return corev1.ServicePort{Name: name, Port: 80, TargetPort: target}
	}
	sel := labels.SelectorFromSet(labels.Set{"app": "web"})
	services := []corev1.Service{
		svc("routed", map[string]string{"app": "web"}, port("http", intstr.FromString(inject.PortName))),
		svc("by-number", map[string]string{"app": "web"}, port("http", intstr.FromInt32(8081))),
		svc("numeric", map[string]string{"app": "web"}, port("http", intstr.FromInt32(8080))),
		svc("named", map[string]string{"app": "web"}, port("", intstr.FromString("http"))),
		svc("undeclared", map[string]string{"app": "web"}, port("", intstr.FromInt32(9999))),
		svc("no-such-name", map[string]string{"app": "web"}, port("", intstr.FromString("grpc"))),
		svc("defaulted", map[string]string{"app": "web"}, corev1.ServicePort{Port: 8080}),
		svc("elsewhere", map[string]string{"app": "other"}, port("", intstr.FromInt32(8080))),
	}
	got := bypassing(sel, services, []corev1.Pod{pod("web-1", "http", inject.PortName)})
	var names []string
	for _, b := range got {
		names = append(names, b.service)
	}
	if want := "defaulted named numeric undeclared"; strings.Join(names, " ") != want {
		t.Errorf("bypassing %q, want %s", names, want)
	}

	taken := bypassing(sel, services[3:4], []corev1.Pod{pod("web-1", "", "http")})
	if len(taken) != 0 {
		t.Errorf("a Service naming the port the sidecar took over bypasses: %+v", taken)
	}
}
