package config

import (
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/dataplane/metrics"
	"github.com/sluice-dev/sluice/internal/policy"
	st "github.com/sluice-dev/sluice/internal/testutil/sidecartest"
)

// A policy's verifier (its fetched keys, its verified tokens) outlives a reload that leaves
// its jwt settings alone, and is made anew when they change; a policy gone takes it along.
func TestVerifiersSurviveReloads(t *testing.T) {
	m := metrics.New()
	jwtPolicy := func(name, jwks string) policy.Policy {
		return st.Policy(name, []policy.Rule{st.Rule("per-user", 10, time.Second, func(r *policy.Rule) {
			r.Key = []policy.KeyPart{{Source: policy.SourceJWTClaim, Name: "sub"}}
		})}, func(p *policy.Policy) {
			p.JWT = &policy.JWT{Header: "Authorization", Algorithms: policy.JWTAlgorithms, JWKS: []byte(jwks)}
		})
	}
	doc := func(ps ...policy.Policy) *policy.Document {
		return &policy.Document{Version: policy.Version, Namespace: "ns", Policies: ps}
	}
	labels := map[string]string{"app": "behaviour"}
	var vs Verifiers
	compile := func(d *policy.Document) {
		t.Helper()
		c, err := compileFor(d, labels, "", m, &vs, &Adaptives{})
		if err != nil {
			t.Fatal(err)
		}
		vs.retain(c)
	}
	compile(doc(jwtPolicy("a", `{"keys":[]}`), jwtPolicy("b", `{"keys":[]}`)))
	first := vs.byPolicy["a"].jwt
	compile(doc(jwtPolicy("a", `{"keys":[]}`), jwtPolicy("b", `{"keys":[]}`)))
	if vs.byPolicy["a"].jwt != first || first == nil {
		t.Error("an unchanged policy got another verifier")
	}
	changed := jwtPolicy("a", `{"keys": []}`) // the same keys, spelt otherwise: no change
	compile(doc(changed, jwtPolicy("b", `{"keys":[]}`)))
	if vs.byPolicy["a"].jwt != first {
		t.Error("the same keys written otherwise made another verifier")
	}
	changed.JWT.Issuer = "https://idp.test"
	compile(doc(changed))
	if vs.byPolicy["a"].jwt == first {
		t.Error("changed settings kept the verifier")
	}
	if _, ok := vs.byPolicy["b"]; ok || len(vs.byPolicy) != 1 {
		t.Errorf("verifiers kept: %v", vs.byPolicy)
	}
}
