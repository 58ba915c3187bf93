// Package rendertest renders policy manifests into policies.json as the controller does, for
// tests that run the result through a real sidecar: validated as the API server validates
// them (policyfile), rendered by render.Build for a number of unnamed pods, and with the key
// sets of the Secrets the policies' spec.jwt.jwks.secretRef name given by the test (the
// controller reads them from the cluster; see internal/controller's keySetView).
package rendertest

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/policyfile"
	"github.com/sluice-dev/sluice/internal/render"
)

// Secrets are the key sets of Secrets: Secret name to the document under its key.
type Secrets map[string][]byte

// view answers Build for replicas unnamed pods, and reads key sets from Secrets.
type view struct {
	render.FixedReplicas
	secrets Secrets
}

// KeySet implements render.KeySets as the controller does for a Secret that holds a usable
// key set; any other is an error.
func (v view) KeySet(p *v1alpha1.RateLimitPolicy) (json.RawMessage, error) {
	name, _, _ := render.JWKSSecret(p)
	data, ok := v.secrets[name]
	if !ok {
		return policy.EmptyJWKS, fmt.Errorf("no Secret %s", name)
	}
	pub, _, err := policy.PublicJWKS(data)
	return pub, err
}

// Render decodes the manifests (YAML, documents separated by ---) and renders them for
// replicas pods in namespace default, failing t when a policy is not rendered as is.
func Render(t testing.TB, manifests string, replicas int32, secrets Secrets) []byte {
	t.Helper()
	policies, err := policyfile.Decode(strings.NewReader(manifests), "manifests")
	if err != nil {
		t.Fatal(err)
	}
	doc, verdicts := render.Build("default", policies, view{render.FixedReplicas(replicas), secrets})
	for name, v := range verdicts {
		if v.Err != nil || v.KeysErr != nil {
			t.Fatalf("policy %s not rendered as is: %v %v", name, v.Err, v.KeysErr)
		}
	}
	data, err := policy.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
