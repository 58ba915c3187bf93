package v1alpha1

// JWKSSecretLabel must be set to "true" on a Secret that spec.jwt.jwks.secretRef names: the
// manager watches and caches only the Secrets that carry it, never the cluster's others.
const JWKSSecretLabel = "sluice.dev/jwks" //nolint:gosec // a label's name, not a credential

// JWTSpec says how a policy's sidecars verify a request's JSON Web Token before a rule keys on
// one of its claims.
type JWTSpec struct {
	// header names the request header carrying the token. Authorization (the default) takes
	// "Bearer <token>"; any other header holds the token itself, with or without a "Bearer "
	// prefix.
	// +optional
	// +kubebuilder:default=Authorization
	Header HeaderName `json:"header,omitempty"`

	// jwks is where the public keys that sign the tokens are: a Secret of the policy's
	// namespace, or an https URL the sidecars fetch.
	// +required
	JWKS JWKSSource `json:"jwks"`

	// algorithms are the signature algorithms a token may use; every one listed here by
	// default. none and the HMAC algorithms (HS256...) are never accepted: a key set holds
	// public keys, which would make an HMAC secret public.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=10
	Algorithms []JWTAlgorithm `json:"algorithms,omitempty"`

	// issuer, when set, must equal the token's iss claim.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Issuer string `json:"issuer,omitempty"`

	// audiences, when set: the token's aud claim must name at least one of them.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=1024
	Audiences []string `json:"audiences,omitempty"`
}

// JWTAlgorithm is a JWS signature algorithm with a public key.
// +kubebuilder:validation:Enum=RS256;RS384;RS512;PS256;PS384;PS512;ES256;ES384;ES512;EdDSA
type JWTAlgorithm string

// JWKSSource is a JSON Web Key Set: exactly one of secretRef and url.
// +kubebuilder:validation:XValidation:rule="has(self.secretRef) != has(self.url)",message="set exactly one of secretRef and url"
type JWKSSource struct {
	// secretRef names a Secret of the policy's namespace, labelled sluice.dev/jwks: "true",
	// whose key holds a JSON Web Key Set. The controller renders its public keys (never a
	// private or symmetric key) into the policies' ConfigMap; an edit of the Secret reaches
	// the sidecars as any policy edit does, without a restart. While the Secret is missing or
	// does not hold a usable key set, the last keys rendered stay (none for a new policy) and
	// the JWKSResolved condition says why.
	// +optional
	SecretRef *JWKSSecretRef `json:"secretRef,omitempty"`

	// url is an https URL the sidecars fetch the key set from, such as
	// https://idp.example.com/.well-known/jwks.json. Each sidecar fetches it when it first
	// needs it, again every 5 minutes and when a token names a key it does not have (at most
	// once every 5 seconds), and keeps the last keys it fetched while the URL fails.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="isURL(self) && url(self).getScheme() == 'https' && url(self).getHostname() != ''",message="must be an https URL such as https://idp.example.com/.well-known/jwks.json"
	URL string `json:"url,omitempty"`
}

// JWKSSecretRef names a key of a Secret of the policy's namespace.
type JWKSSecretRef struct {
	// name is the Secret's name. It must carry the label sluice.dev/jwks: "true".
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",message="must be a Secret name: lower-case letters, digits, '-' and '.'"
	Name string `json:"name"`

	// key is the Secret's key holding the key set; jwks.json by default.
	// +optional
	// +kubebuilder:default=jwks.json
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[-._a-zA-Z0-9]+$')",message="must be a Secret key: letters, digits, '-', '_' and '.'"
	Key string `json:"key,omitempty"`
}

// JWTClaimKey names a claim of the verified token.
type JWTClaimKey struct {
	// claim is the claim's name, such as sub, or a dotted path into nested objects, such as
	// org.id. A claim whose own name holds dots (https://example.com/tenant) is read as is when
	// the token has it. A string is the value as is, a number or a boolean its JSON text; a
	// verified token without the claim (or with an object, a list or null there) is charged to
	// the rule's shared "missing" counter.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:XValidation:rule="self.matches('^[!-~]+$') && !self.startsWith('.') && !self.endsWith('.') && !self.contains('..')",message="must be a claim name or a dotted path such as sub or org.id: printable ASCII without spaces, no empty segment"
	Claim string `json:"claim"`
}

// JWTMatch selects requests by their token.
// +kubebuilder:validation:Enum=Verified;Unverified
type JWTMatch string

// The token matches.
const (
	// JWTVerified matches requests whose token verifies.
	JWTVerified JWTMatch = "Verified"
	// JWTUnverified matches requests without a token, or whose token fails verification.
	JWTUnverified JWTMatch = "Unverified"
)

// Condition type and reasons of a policy's key set (spec.jwt.jwks.secretRef).
const (
	// ConditionJWKSResolved is True when the Secret of spec.jwt.jwks.secretRef holds a usable
	// key set, rendered for the sidecars; False says why, and which keys stay in use.
	ConditionJWKSResolved = "JWKSResolved"

	ReasonJWKSRendered  = "Rendered"
	ReasonSecretMissing = "SecretNotFound"
	ReasonInvalidJWKS   = "InvalidJWKS"
)
