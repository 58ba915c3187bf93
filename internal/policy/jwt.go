package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"

	jose "github.com/go-jose/go-jose/v4"
)

// SourceJWTClaim keys by a claim of the request's verified token (Policy.JWT); Name is the
// claim's name or dotted path.
const SourceJWTClaim = "jwtClaim"

// The values of Match.JWT; the API's enum (v1alpha1.JWTMatch) has the same values.
const (
	JWTVerified   = "Verified"
	JWTUnverified = "Unverified"
)

// AuthorizationHeader is JWT.Header's default: it carries "Bearer <token>".
const AuthorizationHeader = "Authorization"

// JWTAlgorithms are the signature algorithms a token may use, the default of JWT.Algorithms;
// the API's enum (v1alpha1.JWTAlgorithm) has the same values. Every one verifies with a public
// key: none and the HMAC algorithms are not among them.
var JWTAlgorithms = []string{
	string(jose.RS256), string(jose.RS384), string(jose.RS512),
	string(jose.PS256), string(jose.PS384), string(jose.PS512),
	string(jose.ES256), string(jose.ES384), string(jose.ES512),
	string(jose.EdDSA),
}

// JWT is how a policy verifies a request's JSON Web Token before its rules read a claim.
type JWT struct {
	// Header is the canonical name of the header carrying the token: AuthorizationHeader
	// takes "Bearer <token>", any other the token with or without a "Bearer " prefix.
	Header string `json:"header"`
	// Algorithms are those a token may be signed with, a subset of JWTAlgorithms.
	Algorithms []string `json:"algorithms"`
	// Issuer, when set, must equal the token's iss.
	Issuer string `json:"issuer,omitempty"`
	// Audiences, when set: the token's aud must name one of them.
	Audiences []string `json:"audiences,omitempty"`
	// JWKS is the key set (from a Secret), public signing keys only, as PublicJWKS writes it.
	// Exactly one of JWKS and JWKSURL is set.
	JWKS json.RawMessage `json:"jwks,omitempty"`
	// JWKSURL is the https URL the sidecars fetch the key set from.
	JWKSURL string `json:"jwksURL,omitempty"`
}

// EmptyJWKS is a key set without keys: every token fails to verify against it.
var EmptyJWKS = json.RawMessage(`{"keys":[]}`)

func (j *JWT) validate() error {
	if j.Header == "" {
		return errors.New("jwt.header is empty")
	}
	if len(j.Algorithms) == 0 {
		return errors.New("jwt.algorithms is empty")
	}
	for _, a := range j.Algorithms {
		if !slices.Contains(JWTAlgorithms, a) {
			return fmt.Errorf("jwt.algorithms: %q is not one of %s", a, strings.Join(JWTAlgorithms, ", "))
		}
	}
	if (len(j.JWKS) == 0) == (j.JWKSURL == "") {
		return errors.New("jwt needs exactly one of jwks and jwksURL")
	}
	if j.JWKSURL != "" {
		u, err := url.Parse(j.JWKSURL)
		if err != nil || u.Scheme != "https" || u.Host == "" {
			return fmt.Errorf("jwt.jwksURL %q is not an https URL", j.JWKSURL)
		}
	}
	if len(j.JWKS) > 0 {
		if _, err := ParseJWKS(j.JWKS); err != nil {
			return fmt.Errorf("jwt.jwks: %w", err)
		}
	}
	return nil
}

// KeySet is a parsed key set: its public signing keys, and why each key left out was.
type KeySet struct {
	Keys []jose.JSONWebKey
	// Skipped says, for each key of the document not in Keys, why: an encryption key, a
	// symmetric key, a key of a type or curve not supported.
	Skipped []string
}

// MaxJWKSBytes bounds a key set document, rendered or fetched: a larger one is refused.
const MaxJWKSBytes = 1 << 20

// ParseJWKS parses a JSON Web Key Set (RFC 7517) and keeps its public signing keys: a private
// key is reduced to its public half, and a key for encryption (use "enc"), a symmetric key
// (kty "oct": Sluice accepts no HMAC) or one go-jose cannot read is skipped, with why. It is
// an error when the document is not a key set, or when it lists keys and none is usable; a
// set listing no key (EmptyJWKS) is valid and verifies nothing.
func ParseJWKS(data []byte) (KeySet, error) {
	if len(data) > MaxJWKSBytes {
		return KeySet{}, fmt.Errorf("the key set is %d bytes, over %d", len(data), MaxJWKSBytes)
	}
	var doc struct {
		Keys []json.RawMessage `json:"keys"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		return KeySet{}, fmt.Errorf("not a JSON Web Key Set: %w", err)
	}
	if doc.Keys == nil {
		return KeySet{}, errors.New(`not a JSON Web Key Set: no "keys" list`)
	}
	var set KeySet
	for i, raw := range doc.Keys {
		var k jose.JSONWebKey
		name := fmt.Sprintf("keys[%d]", i)
		if err := k.UnmarshalJSON(raw); err != nil {
			set.Skipped = append(set.Skipped, fmt.Sprintf("%s: %v", name, err))
			continue
		}
		if k.KeyID != "" {
			name = fmt.Sprintf("%s (kid %q)", name, k.KeyID)
		}
		_, symmetric := k.Key.([]byte)
		switch {
		case symmetric:
			set.Skipped = append(set.Skipped, name+": a symmetric (HMAC) key, which Sluice never accepts")
			continue
		case k.Use != "" && k.Use != "sig":
			set.Skipped = append(set.Skipped, fmt.Sprintf("%s: use %q, not sig", name, k.Use))
			continue
		case !k.IsPublic() && !k.Valid():
			set.Skipped = append(set.Skipped, fmt.Sprintf("%s: not a usable key", name))
			continue
		}
		pub := k.Public()
		if !pub.Valid() {
			set.Skipped = append(set.Skipped, fmt.Sprintf("%s: not a public key Sluice can verify with", name))
			continue
		}
		if pub.Algorithm != "" && !slices.Contains(JWTAlgorithms, pub.Algorithm) {
			set.Skipped = append(set.Skipped, fmt.Sprintf("%s: alg %q is not one of %s", name, pub.Algorithm, strings.Join(JWTAlgorithms, ", ")))
			continue
		}
		set.Keys = append(set.Keys, pub)
	}
	if len(set.Keys) == 0 && len(doc.Keys) > 0 {
		return set, fmt.Errorf("no usable public signing key: %s", strings.Join(set.Skipped, "; "))
	}
	return set, nil
}

// PublicJWKS parses a key set as ParseJWKS does and writes its usable keys back, public halves
// only, in the document's order: what the controller renders, so that no private or symmetric
// key ever reaches a ConfigMap.
func PublicJWKS(data []byte) (json.RawMessage, KeySet, error) {
	set, err := ParseJWKS(data)
	if err != nil {
		return nil, set, err
	}
	if len(set.Keys) == 0 {
		return EmptyJWKS, set, nil
	}
	out, err := json.Marshal(jose.JSONWebKeySet{Keys: set.Keys})
	if err != nil {
		return nil, set, err
	}
	return out, set, nil
}

// UsesJWT reports whether r reads the request's token: a key part SourceJWTClaim or a
// Match.JWT.
func (r Rule) UsesJWT() bool {
	return r.Match != nil && r.Match.JWT != "" || slices.ContainsFunc(r.Key, func(k KeyPart) bool { return k.Source == SourceJWTClaim })
}

// validateJWT checks p.JWT and that exactly the policies whose HTTP rules read a token have
// one.
func (p Policy) validateJWT() error {
	uses := false
	for _, r := range p.Rules {
		if !r.UsesJWT() {
			continue
		}
		if r.Descriptor() {
			return fmt.Errorf("rule %s matches descriptors and reads a token (jwtClaim or match.jwt), which the RLS server never sees", r.Name)
		}
		uses = true
	}
	switch {
	case p.JWT == nil && uses:
		return errors.New("a rule keys on jwtClaim or matches on jwt, but the policy has no jwt")
	case p.JWT != nil && !uses:
		return errors.New("jwt is set, but no rule keys on jwtClaim or matches on jwt")
	case p.JWT != nil:
		return p.JWT.validate()
	}
	return nil
}
