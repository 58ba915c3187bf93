package render

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/policy"
)

// KeySets reads the key sets of policies whose spec.jwt.jwks names a Secret. A Pods given to
// Build that implements it renders those policies; without it (offline) they do not compile:
// only the controller reads Secrets.
type KeySets interface {
	// KeySet returns the public key set (policy.PublicJWKS's form) of p's
	// spec.jwt.jwks.secretRef. When the Secret gives none (it is missing, or holds no usable
	// key set), err says why and keys are the ones to keep rendering: the last good ones, or
	// policy.EmptyJWKS, which verifies no token. A policy is never left out for its Secret, so
	// that its limits keep applying (to the unverified counter, at worst).
	KeySet(p *v1alpha1.RateLimitPolicy) (keys json.RawMessage, err error)
}

// compileJWT compiles p's spec.jwt, with defaults; keysErr is KeySet's error.
func compileJWT(p *v1alpha1.RateLimitPolicy, ks KeySets) (out *policy.JWT, keysErr, err error) {
	j := p.Spec.JWT
	if j == nil {
		return nil, nil, nil
	}
	out = &policy.JWT{
		Header:    canonicalHeader(string(orDefault(j.Header, policy.AuthorizationHeader))),
		Issuer:    j.Issuer,
		Audiences: sortedStrings(j.Audiences),
		JWKSURL:   j.JWKS.URL,
	}
	for _, a := range j.Algorithms {
		out.Algorithms = append(out.Algorithms, string(a))
	}
	if len(out.Algorithms) == 0 {
		out.Algorithms = append(out.Algorithms, policy.JWTAlgorithms...)
	}
	out.Algorithms = sortedStrings(out.Algorithms)
	if ref := j.JWKS.SecretRef; ref != nil {
		if ks == nil {
			return nil, nil, fmt.Errorf("spec.jwt.jwks.secretRef: the controller reads Secret %s; rendered offline, the policy has no keys", ref.Name)
		}
		out.JWKS, keysErr = ks.KeySet(p)
		if len(out.JWKS) == 0 {
			out.JWKS = policy.EmptyJWKS
		}
	}
	return out, keysErr, nil
}

// JWKSSecret is the Secret name and key of p's spec.jwt.jwks.secretRef (the key defaulted);
// ok is false when p names none.
func JWKSSecret(p *v1alpha1.RateLimitPolicy) (name, key string, ok bool) {
	if p.Spec.JWT == nil || p.Spec.JWT.JWKS.SecretRef == nil {
		return "", "", false
	}
	ref := p.Spec.JWT.JWKS.SecretRef
	return ref.Name, orDefault(ref.Key, DefaultJWKSKey), true
}

// DefaultJWKSKey is the Secret key spec.jwt.jwks.secretRef.key defaults to (the CRD's default).
const DefaultJWKSKey = "jwks.json"

func sortedStrings(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return slices.Sorted(slices.Values(s))
}
