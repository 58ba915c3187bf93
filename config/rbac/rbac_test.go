// Package rbac_test reviews what the manager may do: the rules `make manifests` generates from
// the +kubebuilder:rbac markers, listed here verb by verb, so that a marker that widens them
// fails this test until the list, and the review it stands for, is changed too.
package rbac_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// granted is every permission of role.yaml, one line each: kind, API group, resource (with
// its names, if any), verb. Why each is needed:
//   - configmaps: the rendered policies (create, update when they change, delete with the last
//     policy; get/list/watch through the cache, which holds only the manager's own).
//   - pods: matched and ready pods for the shares, and uninjected pods; read only.
//   - services: the pods a Service target selects, and the routing check (Services whose
//     target port bypasses the sidecar); read only.
//   - httproutes (Gateway API): the backends and matches of an HTTPRoute target; read only.
//   - mutatingwebhookconfigurations: the cert rotator injects the caBundle into Sluice's own.
//   - tokenreviews, subjectaccessreviews: the metrics endpoint's authentication and
//     authorization of scrapers.
//   - events: Rendered/Invalid/... events on policies.
//   - ratelimitpolicies: read; their status: patch.
//   - secrets (Role, the manager's namespace): the webhook certificate; update only its own.
//   - secrets (ClusterRole): the key sets (JWKS) policies name in spec.jwt.jwks.secretRef, in
//     their own namespaces; read only. The manager's cache lists and holds only the Secrets
//     labelled sluice.dev/jwks: "true", and renders only their public keys.
var granted = []string{
	"ClusterRole . configmaps create",
	"ClusterRole . configmaps delete",
	"ClusterRole . configmaps get",
	"ClusterRole . configmaps list",
	"ClusterRole . configmaps update",
	"ClusterRole . configmaps watch",
	"ClusterRole . pods get",
	"ClusterRole . pods list",
	"ClusterRole . pods watch",
	"ClusterRole . secrets get",
	"ClusterRole . secrets list",
	"ClusterRole . secrets watch",
	"ClusterRole . services get",
	"ClusterRole . services list",
	"ClusterRole . services watch",
	"ClusterRole gateway.networking.k8s.io httproutes get",
	"ClusterRole gateway.networking.k8s.io httproutes list",
	"ClusterRole gateway.networking.k8s.io httproutes watch",
	"ClusterRole admissionregistration.k8s.io mutatingwebhookconfigurations get",
	"ClusterRole admissionregistration.k8s.io mutatingwebhookconfigurations list",
	"ClusterRole admissionregistration.k8s.io mutatingwebhookconfigurations watch",
	"ClusterRole admissionregistration.k8s.io mutatingwebhookconfigurations[sluice-mutating-webhook-configuration] update",
	"ClusterRole authentication.k8s.io tokenreviews create",
	"ClusterRole authorization.k8s.io subjectaccessreviews create",
	"ClusterRole events.k8s.io events create",
	"ClusterRole events.k8s.io events patch",
	"ClusterRole sluice.dev ratelimitpolicies get",
	"ClusterRole sluice.dev ratelimitpolicies list",
	"ClusterRole sluice.dev ratelimitpolicies watch",
	"ClusterRole sluice.dev ratelimitpolicies/status get",
	"ClusterRole sluice.dev ratelimitpolicies/status patch",
	"Role . secrets get",
	"Role . secrets list",
	"Role . secrets watch",
	"Role . secrets[sluice-webhook-server-cert] update",
}

func TestManagerPermissionsAreReviewed(t *testing.T) {
	raw, err := os.ReadFile("role.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	d := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	for {
		var role struct {
			Kind  string              `json:"kind"`
			Rules []rbacv1.PolicyRule `json:"rules"`
		}
		if err := d.Decode(&role); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		for _, r := range role.Rules {
			if len(r.NonResourceURLs) > 0 {
				t.Errorf("%s grants non-resource URLs %v", role.Kind, r.NonResourceURLs)
			}
			for _, g := range r.APIGroups {
				if g == "" {
					g = "."
				}
				for _, res := range r.Resources {
					if len(r.ResourceNames) > 0 {
						res += "[" + strings.Join(r.ResourceNames, ",") + "]"
					}
					for _, v := range r.Verbs {
						if v == "*" || res == "*" || g == "*" {
							t.Errorf("%s grants a wildcard: %s %s %s", role.Kind, g, res, v)
						}
						got = append(got, strings.Join([]string{role.Kind, g, res, v}, " "))
					}
				}
			}
		}
	}
	slices.Sort(got)
	want := slices.Sorted(slices.Values(granted))
	for _, g := range got {
		if !slices.Contains(want, g) {
			t.Errorf("role.yaml grants %q, which has not been reviewed (add it to granted, with why)", g)
		}
	}
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf("role.yaml no longer grants %q: remove it from granted", w)
		}
	}
}
