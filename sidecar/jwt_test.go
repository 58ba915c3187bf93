package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/testutil/jwttest"
	"github.com/sluice-dev/sluice/internal/testutil/redisserver"
	"github.com/sluice-dev/sluice/internal/testutil/rendertest"
	st "github.com/sluice-dev/sluice/internal/testutil/sidecartest"
)

const (
	jwtIssuer   = "https://idp.test"
	jwtAudience = "orders"
	// perUser is each identity's limit, and the unverified callers' together.
	perUser = 2
)

// jwtPolicies are two policies keyed on the verified sub, 2 a day per user (a bucket that
// refills one unit in 12 hours: no window ends during a test): one whose keys
// come from the https URL jwksURL (under /url/), one whose keys come from the Secret idp-keys
// (under /secret/). Both fail closed, so that every answer is Redis's (counts exact).
func jwtPolicies(jwksURL string) string {
	return fmt.Sprintf(`
apiVersion: sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: from-url}
spec:
  podSelector: {matchLabels: {app: behaviour}}
  failureMode: Closed
  jwt:
    jwks: {url: %q}
    issuer: %s
    audiences: [%s]
  rules:
  - name: per-user-url
    match: {pathPrefix: /url/}
    key: [{jwtClaim: {claim: sub}}]
    algorithm: TokenBucket
    limit: %d
    window: 24h
---
apiVersion: sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: from-secret}
spec:
  podSelector: {matchLabels: {app: behaviour}}
  failureMode: Closed
  jwt:
    jwks: {secretRef: {name: idp-keys}}
    issuer: %s
    audiences: [%s]
  rules:
  - name: per-user-secret
    match: {pathPrefix: /secret/}
    key: [{jwtClaim: {claim: sub}}]
    algorithm: TokenBucket
    limit: %d
    window: 24h
`, jwksURL, jwtIssuer, jwtAudience, perUser, jwtIssuer, jwtAudience, perUser)
}

// jwtSidecar is a real sidecar on a real redis-server enforcing jwtPolicies, its key sets
// served at first by an https server (whose certificate it trusts through SSL_CERT_FILE) and
// held in the Secret's rendered form, each of RS256, ES256 and EdDSA keys.
type jwtSidecar struct {
	*sidecar
	server *jwttest.Server
	dir    *st.AtomicDir
	keys   []jwttest.Key
}

func startJWTSidecar(t *testing.T) *jwtSidecar {
	t.Helper()
	keys := []jwttest.Key{jwttest.NewKey(t, jose.RS256, "rsa"), jwttest.NewKey(t, jose.ES256, "ec"), jwttest.NewKey(t, jose.EdDSA, "ed")}
	srv := jwttest.NewServer(t, jwttest.JWKS(t, keys...))
	t.Setenv("SSL_CERT_FILE", srv.CAFile())
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }))
	t.Cleanup(up.Close)
	redis := redisserver.StartTest(t)
	s := &jwtSidecar{server: srv, dir: st.NewAtomicDir(t), keys: keys}
	s.render(t, jwttest.JWKS(t, keys...))
	s.sidecar = launchSidecar(t, up.URL, s.dir.Path(policy.DataKey), "--redis-url", redis.URL(), "--redis-timeout", "5s")
	return s
}

// render writes the policies with the Secret holding jwks, as a kubelet updates a volume.
func (s *jwtSidecar) render(t *testing.T, jwks []byte) {
	t.Helper()
	doc := rendertest.Render(t, jwtPolicies(s.server.URL), 1, rendertest.Secrets{"idp-keys": jwks})
	s.dir.Write(t, map[string][]byte{policy.DataKey: doc})
}

// get sends GET path with the Authorization header auth (none when empty) and returns the
// status.
func (s *jwtSidecar) get(t *testing.T, path, auth string) int {
	t.Helper()
	header := map[string]string{}
	if auth != "" {
		header["Authorization"] = auth
	}
	return getStatus(t, s.URL()+path, header)
}

// admitted sends each request and counts the 200s; any status but 200 and 429 fails.
func (s *jwtSidecar) admitted(t *testing.T, path string, auths ...string) int {
	t.Helper()
	n := 0
	for _, a := range auths {
		switch code := s.get(t, path, a); code {
		case http.StatusOK:
			n++
		case http.StatusTooManyRequests:
		default:
			t.Fatalf("GET %s: %d", path, code)
		}
	}
	return n
}

// tokenResults is sluice_jwt_tokens_total of a policy and result.
func (s *jwtSidecar) tokenResults(t *testing.T, policyName, result string) int {
	t.Helper()
	re := regexp.MustCompile(`(?m)^sluice_jwt_tokens_total\{policy="` + policyName + `",result="` + result + `"\} (\d+)$`)
	m := re.FindStringSubmatch(scrape(t, "http://"+s.Admin+"/metrics"))
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

func repeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// Through the real sidecar on a real Redis, for keys from an https URL and from a Secret and
// for RS256, ES256 and EdDSA: each valid token reaches its own counter; expired, not yet
// valid, wrong audience, wrong key, alg none, HS256 keyed with the public key, a forged sub
// and no token at all share the one unverified counter, so together they get one user's
// limit, and the user a forgery names keeps all of its own.
func TestJWTClaimKeysThroughTheSidecar(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	s := startJWTSidecar(t)
	now := time.Now()
	for _, path := range []string{"/url/orders", "/secret/orders"} {
		t.Run(path, func(t *testing.T) {
			var bad []string
			for _, k := range s.keys {
				valid := jwttest.Valid("user-"+k.KID, jwtIssuer, jwtAudience, now)
				own := "Bearer " + k.Sign(t, valid)
				if got := s.admitted(t, path, repeat(own, perUser+1)...); got != perUser {
					t.Fatalf("%s: a valid token's %d requests: %d admitted, want its own %d", k.Alg, perUser+1, got, perUser)
				}
				victim := valid.With("sub", "victim")
				other := jwttest.NewKey(t, k.Alg, k.KID) // the same kid, another key
				bad = append(bad,
					"Bearer "+k.Sign(t, victim.With("exp", now.Add(-time.Hour).Unix())),
					"Bearer "+k.Sign(t, victim.With("nbf", now.Add(time.Hour).Unix())),
					"Bearer "+k.Sign(t, victim.With("aud", "billing")),
					"Bearer "+k.Sign(t, victim.With("iss", "https://evil.test")),
					"Bearer "+other.Sign(t, victim),
					"Bearer "+jwttest.None(t, k.KID, victim),
					"Bearer "+k.HS256WithPublicKey(t, victim, true),
					"Bearer "+k.HS256WithPublicKey(t, victim, false),
					"Bearer "+jwttest.Forge(t, k.Sign(t, valid), victim),
					"Bearer not-a-token",
				)
			}
			bad = append(bad, "", "Basic dmljdGltOg==")
			if got := s.admitted(t, path, bad...); got != perUser {
				t.Fatalf("%d requests without a valid token: %d admitted, want %d (one shared unverified counter)", len(bad), got, perUser)
			}
			victim := "Bearer " + s.keys[0].Sign(t, jwttest.Valid("victim", jwtIssuer, jwtAudience, now))
			if got := s.admitted(t, path, repeat(victim, perUser+1)...); got != perUser {
				t.Fatalf("the forged user's own token: %d admitted, want %d: forgeries spent its quota", got, perUser)
			}
		})
	}
	if n := s.tokenResults(t, "from-url", "signature"); n == 0 {
		t.Errorf("no signature failure counted for from-url")
	}
}

// A key rotation reaches the sidecar without a restart: for the URL, a token naming the new
// key makes the sidecar fetch the key set again; for the Secret, the controller's next render
// (here written as kubelet writes it) does. The retired key verifies nothing after either.
func TestJWTKeyRotationWithoutARestart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	s := startJWTSidecar(t)
	now := time.Now()
	retired := s.keys[0]
	next := jwttest.NewKey(t, jose.ES256, "ec-next")
	rotated := jwttest.JWKS(t, append([]jwttest.Key{next}, s.keys[1:]...)...)
	token := func(k jwttest.Key, sub string) string {
		return "Bearer " + k.Sign(t, jwttest.Valid(sub, jwtIssuer, jwtAudience, now))
	}
	// Both paths' unverified counters spent, so that a request passes only when verified.
	for _, path := range []string{"/url/orders", "/secret/orders"} {
		if got := s.admitted(t, path, repeat("", perUser+1)...); got != perUser {
			t.Fatalf("%s: %d anonymous requests admitted, want %d", path, got, perUser)
		}
		if got := s.admitted(t, path, token(retired, "before")); got != 1 {
			t.Fatalf("%s: the first key's token before the rotation: %d admitted, want 1", path, got)
		}
		if got := s.admitted(t, path, token(next, "early")); got != 0 {
			t.Fatalf("%s: the next key's token before the rotation: %d admitted, want 0", path, got)
		}
	}

	s.server.Set(rotated)
	// The sidecar fetches again at most every keys.MinFetchInterval: each request with the new
	// key asks, the first after the interval gets it.
	st.Eventually(t, func() error {
		if s.get(t, "/url/orders", token(next, "after-url")) != http.StatusOK {
			return fmt.Errorf("the rotated key's token is not verified yet (fetches: %d)", s.server.Fetches())
		}
		return nil
	})
	s.render(t, rotated)
	st.Eventually(t, func() error {
		if s.get(t, "/secret/orders", token(next, "after-secret")) != http.StatusOK {
			return fmt.Errorf("the rotated Secret's key does not verify yet")
		}
		return nil
	})
	for _, path := range []string{"/url/orders", "/secret/orders"} {
		if got := s.admitted(t, path, token(retired, "after-"+path)); got != 0 {
			t.Errorf("%s: the retired key's token after the rotation: %d admitted, want 0 (unverified)", path, got)
		}
	}
	if s.tokenResults(t, "from-url", "unknown_key") == 0 || s.tokenResults(t, "from-secret", "unknown_key") == 0 {
		t.Errorf("no unknown_key counted:\n%s", grepLines(scrape(t, "http://"+s.Admin+"/metrics"), "sluice_jwt"))
	}
}
