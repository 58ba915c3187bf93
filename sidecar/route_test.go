package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/policyfile"
	"github.com/sluice-dev/sluice/internal/render"
	"github.com/sluice-dev/sluice/internal/testutil/redisserver"
)

// A policy attached to the HTTPRoute rule that sends /api to the pods limits /api/x and not
// /static, which another rule of the route sends to the same pods.
func TestPolicyOnAnHTTPRouteRuleLimitsOnlyThatRulesTraffic(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	prefix := gatewayv1.PathMatchPathPrefix
	apiRule := gatewayv1.HTTPRouteRule{Name: ptr.To(gatewayv1.SectionName("api")),
		Matches: []gatewayv1.HTTPRouteMatch{{Path: &gatewayv1.HTTPPathMatch{Type: &prefix, Value: ptr.To("/api")}}}}
	routes, err := render.RouteMatches(apiRule)
	if err != nil {
		t.Fatal(err)
	}
	policies, err := policyfile.Decode(strings.NewReader(`
apiVersion: sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: api}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: shop, sectionName: api}]
  rules:
  - name: per-client
    key: [{clientIP: {}}]
    algorithm: FixedWindow
    limit: 3
    window: 1h
`), "api.yaml")
	if err != nil {
		t.Fatal(err)
	}
	pods := render.FixedTarget{FixedReplicas: 1, Resolved: render.Target{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "checkout"}}, Routes: routes}}
	doc, verdicts := render.Build("default", policies, pods)
	if err := verdicts["api"].Err; err != nil {
		t.Fatal(err)
	}
	data, err := policy.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }))
	defer up.Close()
	redis := redisserver.StartTest(t)
	s := startSidecarDoc(t, up.URL, data, "app=checkout", redis.URL())

	get := func(path string) int {
		t.Helper()
		resp, err := http.Get(s.URL() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}
	for i := range 3 {
		if code := get("/api/x"); code != http.StatusOK {
			t.Fatalf("request %d to /api/x: %d, want 200 (3 an hour)", i+1, code)
		}
	}
	if code := get("/api/x"); code != http.StatusTooManyRequests {
		t.Errorf("4th request to /api/x: %d, want 429", code)
	}
	if code := get("/api"); code != http.StatusTooManyRequests {
		t.Errorf("/api, within the rule's prefix: %d, want 429", code)
	}
	for i := range 5 {
		if code := get("/static/app.js"); code != http.StatusOK {
			t.Errorf("request %d to /static/app.js, outside the rule: %d, want 200", i+1, code)
		}
	}
	if code := get("/apix"); code != http.StatusOK {
		t.Errorf("/apix, not under /api element by element: %d, want 200", code)
	}
}
