package policyfile

import (
	"strings"
	"testing"
)

// TestTargetRefsRules: the CRD's rules on spec.targetRefs, evaluated offline as the API server
// evaluates them (the envtest suite checks that both say the same).
func TestTargetRefsRules(t *testing.T) {
	const rules = `
  rules:
  - name: r
    key: [{clientIP: {}}]
    algorithm: FixedWindow
    limit: 1
    window: 1s
`
	doc := func(spec string) string {
		return "apiVersion: sluice.dev/v1alpha1\nkind: RateLimitPolicy\nmetadata: {name: p}\nspec:\n" + spec + rules
	}
	tests := map[string]struct {
		spec, want string
	}{
		"a Service":         {spec: "  targetRefs: [{group: '', kind: Service, name: web, sectionName: http}]\n"},
		"an HTTPRoute rule": {spec: "  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: shop, sectionName: api}]\n"},
		"both ways of selecting": {spec: "  podSelector: {}\n  targetRefs: [{group: '', kind: Service, name: web}]\n",
			want: "set exactly one of podSelector and targetRefs"},
		"another kind": {spec: "  targetRefs: [{group: apps, kind: Deployment, name: web}]\n",
			want: `a target is a Service (group "", kind Service) or an HTTPRoute (group gateway.networking.k8s.io, kind HTTPRoute)`},
		"a route without its group": {spec: "  targetRefs: [{group: '', kind: HTTPRoute, name: web}]\n", want: "a target is a Service"},
		"a target twice": {spec: "  targetRefs: [{group: '', kind: Service, name: web}, {group: '', kind: Service, name: web}]\n",
			want: "each target appears once"},
		"a bad sectionName": {spec: "  targetRefs: [{group: '', kind: Service, name: web, sectionName: HTTP}]\n",
			want: "spec.targetRefs[0].sectionName: Invalid value"},
		"no group": {spec: "  targetRefs: [{kind: Service, name: web}]\n", want: "spec.targetRefs[0].group: Required value"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := Decode(strings.NewReader(doc(tc.spec)), "p.yaml")
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}
