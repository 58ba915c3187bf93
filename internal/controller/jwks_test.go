package controller_test

import (
	"context"
	"encoding/json"

	jose "github.com/go-jose/go-jose/v4"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/testutil/jwttest"
)

// jwksFromSecret makes the first rule key on the verified token's sub, with the key set of
// Secret name.
func jwksFromSecret(name string) func(*v1alpha1.RateLimitPolicy) {
	return func(p *v1alpha1.RateLimitPolicy) {
		p.Spec.JWT = &v1alpha1.JWTSpec{JWKS: v1alpha1.JWKSSource{SecretRef: &v1alpha1.JWKSSecretRef{Name: name}}}
		rule0(func(r *v1alpha1.Rule) { r.Key = []v1alpha1.KeyPart{{JWTClaim: &v1alpha1.JWTClaimKey{Claim: "sub"}}} })(p)
	}
}

// keySet marshals JSON Web Keys (private ones too) as a key set document.
func keySet(raw ...any) []byte {
	b, err := json.Marshal(map[string]any{"keys": raw})
	Expect(err).NotTo(HaveOccurred())
	return b
}

// renderedKIDs returns the key ids of the key set rendered for policy name, each checked to
// be a public key.
func renderedKIDs(g Gomega, ctx context.Context, ns, name string) []string {
	p := renderedPolicy(g, ctx, ns, name)
	g.Expect(p.JWT).NotTo(BeNil())
	var set jose.JSONWebKeySet
	g.Expect(json.Unmarshal(p.JWT.JWKS, &set)).To(Succeed())
	kids := []string{}
	for _, k := range set.Keys {
		g.Expect(k.IsPublic()).To(BeTrue(), "key %s rendered with its private half", k.KeyID)
		kids = append(kids, k.KeyID)
	}
	return kids
}

var _ = Describe("A policy's key set from a Secret", func() {
	It("renders the Secret's public keys only, follows its edits, and keeps the last good keys while it is missing or garbled", func(ctx context.Context) {
		ns := newNamespace(ctx)
		t := GinkgoT()
		rsa, ec, ed := jwttest.NewKey(t, jose.RS256, "rsa-1"), jwttest.NewKey(t, jose.ES256, "ec-1"), jwttest.NewKey(t, jose.EdDSA, "ed-1")

		By("rendering a policy whose Secret does not exist yet with no keys: every token unverified, the policy enforced")
		Expect(k8sClient.Create(ctx, newPolicy(ns, "per-user", jwksFromSecret("idp-keys")))).To(Succeed())
		Eventually(func(g Gomega) {
			expectReady(g, ctx, ns, "per-user", 1)
			g.Expect(renderedKIDs(g, ctx, ns, "per-user")).To(BeEmpty())
			_, c := condition(g, ctx, ns, "per-user", v1alpha1.ConditionJWKSResolved)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Reason).To(Equal(v1alpha1.ReasonSecretMissing))
			g.Expect(c.Message).To(ContainSubstring(`Secret idp-keys with the label sluice.dev/jwks: "true" was not found`))
			g.Expect(c.Message).To(ContainSubstring("every request counts as unverified"))
		}).Should(Succeed())

		By("rendering the public halves of the Secret's keys, private ones included, and no HMAC key")
		secret := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "idp-keys", Labels: map[string]string{v1alpha1.JWKSSecretLabel: "true"}},
			Data: map[string][]byte{"jwks.json": keySet(rsa.PrivateJWK(), ec.PrivateJWK(), ed.JWK(),
				map[string]string{"kty": "oct", "k": "c2VjcmV0LXNoYXJlZC1rZXk", "kid": "hmac"})},
		}
		Expect(k8sClient.Create(ctx, secret)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(renderedKIDs(g, ctx, ns, "per-user")).To(Equal([]string{"rsa-1", "ec-1", "ed-1"}))
			_, c := condition(g, ctx, ns, "per-user", v1alpha1.ConditionJWKSResolved)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
			cm, _ := rendered(g, ctx, ns)
			g.Expect(cm.Data[policy.DataKey]).NotTo(ContainSubstring(`"d":`), "a private key reached the ConfigMap")
			g.Expect(cm.Data[policy.DataKey]).NotTo(ContainSubstring(`c2VjcmV0LXNoYXJlZC1rZXk`), "the HMAC key reached the ConfigMap")
		}).Should(Succeed())

		By("following a rotation of the Secret")
		ec2 := jwttest.NewKey(t, jose.ES256, "ec-2")
		secret.Data["jwks.json"] = keySet(ec2.JWK())
		Expect(k8sClient.Update(ctx, secret)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(renderedKIDs(g, ctx, ns, "per-user")).To(Equal([]string{"ec-2"}))
		}).Should(Succeed())

		By("keeping the last good keys while the Secret holds no key set")
		secret.Data["jwks.json"] = []byte(`{"keys": "garbled"}`)
		Expect(k8sClient.Update(ctx, secret)).To(Succeed())
		Eventually(func(g Gomega) {
			_, c := condition(g, ctx, ns, "per-user", v1alpha1.ConditionJWKSResolved)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Reason).To(Equal(v1alpha1.ReasonInvalidJWKS))
			g.Expect(c.Message).To(ContainSubstring("Secret idp-keys, key jwks.json: not a JSON Web Key Set"))
			g.Expect(c.Message).To(ContainSubstring("the keys rendered before stay in use"))
			expectReady(g, ctx, ns, "per-user", 1)
		}).Should(Succeed())
		Expect(renderedKIDs(Default, ctx, ns, "per-user")).To(Equal([]string{"ec-2"}))

		By("keeping them when the Secret is deleted")
		Expect(k8sClient.Delete(ctx, secret)).To(Succeed())
		Eventually(func(g Gomega) {
			_, c := condition(g, ctx, ns, "per-user", v1alpha1.ConditionJWKSResolved)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Reason).To(Equal(v1alpha1.ReasonSecretMissing))
			g.Expect(c.Message).To(ContainSubstring("the keys rendered before stay in use"))
		}).Should(Succeed())
		Expect(renderedKIDs(Default, ctx, ns, "per-user")).To(Equal([]string{"ec-2"}))
	})
})
