package config

import (
	"encoding/json"
	"fmt"
	"sync"

	"github.com/sluice-dev/sluice/internal/dataplane/keys"
	"github.com/sluice-dev/sluice/internal/dataplane/metrics"
	"github.com/sluice-dev/sluice/internal/policy"
)

// Verifiers keeps each policy's token verifier (keys.JWT) from one configuration to the next
// while the policy's jwt settings stay the same, so that a reload keeps the key set fetched
// from a URL and the tokens already verified. A change of the settings (a Secret's keys
// rendered anew, another URL) makes a new verifier. The zero value is ready; safe for
// concurrent use.
type Verifiers struct {
	// Options are every verifier's collaborators; OnToken and OnFetch are set per policy, to
	// its metrics.
	Options keys.JWTOptions

	mu       sync.Mutex
	byPolicy map[string]verifier
}

type verifier struct {
	settings string
	jwt      *keys.JWT
}

// get returns the verifier of policy name's settings cfg, made with m's series when new.
func (vs *Verifiers) get(name string, cfg *policy.JWT, m *metrics.Metrics) (*keys.JWT, error) {
	settings, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	vs.mu.Lock()
	defer vs.mu.Unlock()
	if v, ok := vs.byPolicy[name]; ok && v.settings == string(settings) {
		return v.jwt, nil
	}
	results := make([]string, len(keys.TokenResults))
	for i, r := range keys.TokenResults {
		results[i] = string(r)
	}
	series := m.ForJWT(name, results...)
	opts := vs.Options
	opts.OnToken = func(r keys.TokenResult) { series.Tokens[string(r)].Inc() }
	opts.OnFetch = series.Fetch
	j, err := keys.NewJWT(*cfg, opts)
	if err != nil {
		return nil, fmt.Errorf("jwt: %w", err)
	}
	series.Keys.Set(float64(j.Keys()))
	if vs.byPolicy == nil {
		vs.byPolicy = map[string]verifier{}
	}
	vs.byPolicy[name] = verifier{settings: string(settings), jwt: j}
	return j, nil
}

// retain forgets the verifiers of the policies c does not have.
func (vs *Verifiers) retain(c *Config) {
	keep := map[string]bool{}
	for _, p := range c.Policies {
		keep[p.Name] = true
	}
	vs.mu.Lock()
	defer vs.mu.Unlock()
	for name := range vs.byPolicy {
		if !keep[name] {
			delete(vs.byPolicy, name)
		}
	}
}
