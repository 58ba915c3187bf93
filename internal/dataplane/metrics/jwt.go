package metrics

// jwtCollectors are the series of the policies that verify tokens (spec.jwt).
type jwtCollectors struct {
	tokens  *CounterVec
	fetches *CounterVec
	keys    *GaugeVec
}

func newJWTCollectors(r *Registry) jwtCollectors {
	c := jwtCollectors{
		tokens: r.counterVec("sluice_jwt_tokens_total",
			"Token verifications of policies with jwt, by policy and result: verified, cached (verified before), or why the request counts as unverified (missing, malformed, algorithm, unknown_key, signature, no_expiry, expired, not_yet_valid, issuer, audience). A request counts once per policy that reads its token.",
			[]string{policyLabel, "result"}),
		fetches: r.counterVec("sluice_jwks_fetches_total",
			"Fetches of a policy's key set URL (jwt.jwks.url), by policy and result (ok, error); after an error the keys fetched before stay in use.",
			[]string{policyLabel, "result"}),
		keys: r.gaugeVec("sluice_jwks_keys",
			"Public keys in use to verify a policy's tokens; 0 means every token counts as unverified.",
			[]string{policyLabel}),
	}
	return c
}

// JWT is one policy's token series. Safe for concurrent use.
type JWT struct {
	c      *jwtCollectors
	policy string
	// Keys is sluice_jwks_keys of the policy.
	Keys *Gauge
	// Tokens are sluice_jwt_tokens_total of the policy by result, resolved once.
	Tokens map[string]*Counter
}

// ForJWT returns the token series of a policy that verifies tokens, with a counter of each of
// results; they are created only for those policies, so other policies have no such series.
func (m *Metrics) ForJWT(policyName string, results ...string) *JWT {
	j := &JWT{c: &m.jwt, policy: policyName, Keys: m.jwt.keys.WithLabelValues(policyName), Tokens: map[string]*Counter{}}
	for _, r := range results {
		j.Tokens[r] = m.jwt.tokens.WithLabelValues(policyName, r)
	}
	return j
}

// Fetch counts one fetch of the key set URL: keys usable ones, or err.
func (j *JWT) Fetch(keys int, err error) {
	if err != nil {
		j.c.fetches.WithLabelValues(j.policy, "error").Inc()
		return
	}
	j.c.fetches.WithLabelValues(j.policy, "ok").Inc()
	j.Keys.Set(float64(keys))
}
