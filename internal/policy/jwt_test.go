package policy

import (
	"encoding/json"
	"strings"
	"testing"
)

// Of an EC signing key, the same key marked for encryption, an HMAC key, a key of a type
// go-jose does not know and a key whose alg is HMAC, only the first is kept; a document that is
// not a key set, or whose only key is unusable, is refused.
func TestParseJWKSKeepsPublicSigningKeysOnly(t *testing.T) {
	const ec = `{"kty":"EC","crv":"P-256","kid":"ec","x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"}`
	doc := `{"keys":[` + ec + `,` +
		`{"kty":"EC","crv":"P-256","kid":"enc","use":"enc","x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"},` +
		`{"kty":"oct","kid":"hmac","k":"c2VjcmV0"},` +
		`{"kty":"XYZ","kid":"new"},` +
		`{"kty":"EC","crv":"P-256","kid":"hs","alg":"HS256","x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"}]}`
	pub, set, err := PublicJWKS([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if len(set.Keys) != 1 || set.Keys[0].KeyID != "ec" || len(set.Skipped) != 4 {
		t.Fatalf("keys %d, skipped %q", len(set.Keys), set.Skipped)
	}
	var out struct {
		Keys []map[string]any `json:"keys"`
	}
	if err := json.Unmarshal(pub, &out); err != nil || len(out.Keys) != 1 || out.Keys[0]["kid"] != "ec" {
		t.Fatalf("%s: %v", pub, err)
	}
	for _, bad := range []string{`[]`, `{}`, `{"keys":"x"}`, `not json`, `{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}`} {
		if _, err := ParseJWKS([]byte(bad)); err == nil {
			t.Errorf("ParseJWKS(%s) accepted", bad)
		}
	}
	if s, err := ParseJWKS(EmptyJWKS); err != nil || len(s.Keys) != 0 {
		t.Errorf("the empty set: %v", err)
	}
	if _, err := ParseJWKS([]byte(`{"keys":[],"pad":"` + strings.Repeat("x", MaxJWKSBytes) + `"}`)); err == nil {
		t.Error("a key set over the bound accepted")
	}
}

func TestValidateJWT(t *testing.T) {
	base := func() Policy {
		return Policy{Name: "p", Domain: "d", FailureMode: FailureLocal, Response: Response{StatusCode: 429, Headers: HeadersBoth},
			JWT: &JWT{Header: "Authorization", Algorithms: JWTAlgorithms, JWKSURL: "https://idp.test/jwks"},
			Rules: []Rule{{Name: "r", Algorithm: "FixedWindow", Limit: 1, WindowMs: 1000, Cost: 1, Mode: Enforce,
				Key: []KeyPart{{Source: SourceJWTClaim, Name: "sub"}}}}}
	}
	if err := base().Validate(); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		mutate func(*Policy)
		want   string
	}{
		"no jwt":          {func(p *Policy) { p.JWT = nil }, "the policy has no jwt"},
		"unused jwt":      {func(p *Policy) { p.Rules[0].Key[0] = KeyPart{Source: SourceClientIP} }, "no rule keys on jwtClaim"},
		"no source":       {func(p *Policy) { p.JWT.JWKSURL = "" }, "exactly one of jwks and jwksURL"},
		"two sources":     {func(p *Policy) { p.JWT.JWKS = EmptyJWKS }, "exactly one of jwks and jwksURL"},
		"http":            {func(p *Policy) { p.JWT.JWKSURL = "http://idp.test/jwks" }, "not an https URL"},
		"none":            {func(p *Policy) { p.JWT.Algorithms = []string{"none"} }, `"none" is not one of`},
		"bad jwks":        {func(p *Policy) { p.JWT.JWKSURL, p.JWT.JWKS = "", json.RawMessage(`{"keys":1}`) }, "jwt.jwks: not a JSON Web Key Set"},
		"bad match":       {func(p *Policy) { p.Rules[0].Match = &Match{JWT: "Maybe"} }, `match.jwt "Maybe"`},
		"descriptor rule": {func(p *Policy) { p.Rules[0].Match = &Match{Descriptors: []DescriptorEntry{{Key: "k"}}} }, "never sees"},
	} {
		t.Run(name, func(t *testing.T) {
			p := base()
			tc.mutate(&p)
			if err := p.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%v, want %q", err, tc.want)
			}
		})
	}
}
