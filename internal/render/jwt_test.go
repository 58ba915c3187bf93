package render

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/policy"
)

func jwtPolicy(jwks v1alpha1.JWKSSource) *v1alpha1.RateLimitPolicy {
	p := &v1alpha1.RateLimitPolicy{}
	p.Name = "p"
	p.Spec.PodSelector = &metav1.LabelSelector{}
	p.Spec.JWT = &v1alpha1.JWTSpec{JWKS: jwks, Audiences: []string{"web", "api"}}
	p.Spec.Rules = []v1alpha1.Rule{{Name: "per-user", Key: []v1alpha1.KeyPart{{JWTClaim: &v1alpha1.JWTClaimKey{Claim: "org.id"}}},
		Match: &v1alpha1.RuleMatch{JWT: v1alpha1.JWTVerified}, Algorithm: v1alpha1.FixedWindow, Limit: 5, Window: "1m"}}
	return p
}

// keySets answers KeySet with keys and err, counting the calls.
type keySets struct {
	FixedReplicas
	keys  json.RawMessage
	err   error
	calls int
}

func (k *keySets) KeySet(*v1alpha1.RateLimitPolicy) (json.RawMessage, error) {
	k.calls++
	return k.keys, k.err
}

func TestCompileJWT(t *testing.T) {
	got, err := Compile(jwtPolicy(v1alpha1.JWKSSource{URL: "https://idp.example.com/jwks"}))
	if err != nil {
		t.Fatal(err)
	}
	want := &policy.JWT{Header: "Authorization", Algorithms: slices.Sorted(slices.Values(policy.JWTAlgorithms)),
		Audiences: []string{"api", "web"}, JWKSURL: "https://idp.example.com/jwks"}
	if j := got.JWT; j == nil || j.Header != want.Header || !slices.Equal(j.Algorithms, want.Algorithms) ||
		!slices.Equal(j.Audiences, want.Audiences) || j.JWKSURL != want.JWKSURL || j.JWKS != nil {
		t.Errorf("jwt %+v, want %+v", got.JWT, want)
	}
	if r := got.Rules[0]; r.Key[0] != (policy.KeyPart{Source: policy.SourceJWTClaim, Name: "org.id"}) || r.Match.JWT != policy.JWTVerified {
		t.Errorf("rule %+v", r)
	}

	// A Secret's keys are rendered only by the controller; offline the policy is refused.
	secret := jwtPolicy(v1alpha1.JWKSSource{SecretRef: &v1alpha1.JWKSSecretRef{Name: "idp"}})
	if _, err := Compile(secret); err == nil || !strings.Contains(err.Error(), "spec.jwt.jwks.secretRef: the controller reads Secret idp") {
		t.Errorf("offline with a secretRef: %v", err)
	}
	// With the controller's view, the keys it gives are rendered, and its error is the
	// verdict's KeysErr, the policy rendered all the same.
	ks := &keySets{FixedReplicas: 1, keys: policy.EmptyJWKS, err: errors.New("Secret idp was not found")}
	doc, verdicts := Build("ns", []v1alpha1.RateLimitPolicy{*secret}, ks)
	if v := verdicts["p"]; v.Err != nil || v.KeysErr == nil || len(doc.Policies) != 1 || string(doc.Policies[0].JWT.JWKS) != string(policy.EmptyJWKS) {
		t.Errorf("verdict %+v, policies %+v", v, doc.Policies)
	}
	if ks.calls != 1 {
		t.Errorf("KeySet called %d times, want 1", ks.calls)
	}
}

func TestJWKSSecretDefaultsItsKey(t *testing.T) {
	name, key, ok := JWKSSecret(jwtPolicy(v1alpha1.JWKSSource{SecretRef: &v1alpha1.JWKSSecretRef{Name: "idp"}}))
	if name != "idp" || key != DefaultJWKSKey || !ok {
		t.Errorf("%q %q %t", name, key, ok)
	}
	if _, _, ok := JWKSSecret(jwtPolicy(v1alpha1.JWKSSource{URL: "https://x"})); ok {
		t.Error("a URL source names a Secret")
	}
}
