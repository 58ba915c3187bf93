package keys_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/sluice-dev/sluice/internal/dataplane/keys"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/testutil/jwttest"
)

const (
	issuer   = "https://idp.test"
	audience = "api"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func staticJWT(t *testing.T, clk *clocktesting.FakeClock, jwks []byte) *keys.JWT {
	t.Helper()
	j, err := keys.NewJWT(policy.JWT{Header: "Authorization", Algorithms: policy.JWTAlgorithms, Issuer: issuer,
		Audiences: []string{audience}, JWKS: jwks}, keys.JWTOptions{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// Every algorithm family, and every way a token can fail: only a valid token verifies, and it
// verifies to its own claims.
func TestVerifyTokens(t *testing.T) {
	for _, alg := range []jose.SignatureAlgorithm{jose.RS256, jose.ES256, jose.EdDSA} {
		t.Run(string(alg), func(t *testing.T) {
			key := jwttest.NewKey(t, alg, "k1")
			other := jwttest.NewKey(t, alg, "k1") // same kid, another key
			clk := clocktesting.NewFakeClock(t0)
			j := staticJWT(t, clk, jwttest.JWKS(t, key))
			valid := jwttest.Valid("alice", issuer, audience, t0)
			aliceToken := key.Sign(t, valid)
			for name, tc := range map[string]struct {
				token string
				want  keys.TokenResult
			}{
				"valid":             {aliceToken, keys.TokenVerified},
				"expired":           {key.Sign(t, valid.With("exp", t0.Add(-time.Minute).Unix())), keys.TokenExpired},
				"expired in leeway": {key.Sign(t, valid.With("exp", t0.Add(-keys.Leeway/2).Unix())), keys.TokenVerified},
				"not yet valid":     {key.Sign(t, valid.With("nbf", t0.Add(time.Minute).Unix())), keys.TokenNotYetValid},
				"issued in future":  {key.Sign(t, valid.With("iat", t0.Add(time.Minute).Unix())), keys.TokenNotYetValid},
				"no exp":            {key.Sign(t, valid.With("exp", nil)), keys.TokenNoExpiry},
				"wrong audience":    {key.Sign(t, valid.With("aud", "other")), keys.TokenAudience},
				"wrong issuer":      {key.Sign(t, valid.With("iss", "https://evil.test")), keys.TokenIssuer},
				"wrong key":         {other.Sign(t, valid), keys.TokenSignature},
				"unknown kid":       {jwttest.NewKey(t, alg, "k9").Sign(t, valid), keys.TokenUnknownKey},
				"alg none":          {jwttest.None(t, "k1", valid), keys.TokenAlgorithm},
				"HS256, PEM key":    {key.HS256WithPublicKey(t, valid, true), keys.TokenAlgorithm},
				"HS256, JWK key":    {key.HS256WithPublicKey(t, valid, false), keys.TokenAlgorithm},
				"forged sub":        {jwttest.Forge(t, aliceToken, valid.With("sub", "bob")), keys.TokenSignature},
				"garbage":           {"not.a.token", keys.TokenMalformed},
				"too long":          {strings.Repeat("a", keys.MaxTokenBytes+1), keys.TokenMalformed},
			} {
				t.Run(name, func(t *testing.T) {
					id, got := j.Verify(tc.token)
					if got == keys.TokenCached {
						got = keys.TokenVerified
					}
					if got != tc.want {
						t.Fatalf("result %s, want %s", got, tc.want)
					}
					if (id != nil) != (tc.want == keys.TokenVerified) {
						t.Fatalf("identity %v with result %s", id, got)
					}
					if id != nil {
						if sub, _ := id.Claim("sub"); sub != "alice" {
							t.Errorf("sub %q, want alice", sub)
						}
					}
				})
			}
		})
	}
}

// An HS256 token is refused even when the policy's algorithms would be asked to allow it, and
// a symmetric key in the key set is never used.
func TestNoHMACEvenWithASymmetricKey(t *testing.T) {
	if _, err := policy.ParseJWKS([]byte(`{"keys":[{"kty":"oct","k":"c2VjcmV0","kid":"s"}]}`)); err == nil ||
		!strings.Contains(err.Error(), "symmetric") {
		t.Fatalf("a key set of one oct key: %v, want an error naming the symmetric key", err)
	}
	doc := policy.Policy{Name: "p", Selector: nil, Domain: "d", FailureMode: policy.FailureLocal,
		Response: policy.Response{StatusCode: 429, Headers: policy.HeadersBoth},
		JWT:      &policy.JWT{Header: "Authorization", Algorithms: []string{"HS256"}, JWKS: policy.EmptyJWKS},
		Rules: []policy.Rule{{Name: "r", Algorithm: "FixedWindow", Limit: 1, WindowMs: 1000, Cost: 1, Mode: policy.Enforce,
			Key: []policy.KeyPart{{Source: policy.SourceJWTClaim, Name: "sub"}}}}}
	if err := doc.Validate(); err == nil || !strings.Contains(err.Error(), `"HS256" is not one of`) {
		t.Fatalf("a policy allowing HS256: %v, want refused", err)
	}
}

// A verified token is remembered until it expires: the same token later is cached, and after
// its exp (plus the leeway) it no longer verifies.
func TestVerifiedTokensAreCachedUntilTheyExpire(t *testing.T) {
	key := jwttest.NewKey(t, jose.ES256, "k1")
	clk := clocktesting.NewFakeClock(t0)
	var results []keys.TokenResult
	j, err := keys.NewJWT(policy.JWT{Header: "Authorization", Algorithms: policy.JWTAlgorithms, JWKS: jwttest.JWKS(t, key)},
		keys.JWTOptions{Clock: clk, OnToken: func(r keys.TokenResult) { results = append(results, r) }})
	if err != nil {
		t.Fatal(err)
	}
	tok := key.Sign(t, jwttest.Claims{"sub": "alice", "exp": t0.Add(time.Minute).Unix()})
	h := keys.HTTPHeader{"Authorization": {"Bearer " + tok}}
	for _, step := range []struct {
		at   time.Duration
		want keys.TokenResult
	}{
		{0, keys.TokenVerified},
		{time.Second, keys.TokenCached},
		{time.Minute + keys.Leeway - time.Second, keys.TokenCached},
		{time.Minute + keys.Leeway + time.Second, keys.TokenExpired},
	} {
		clk.SetTime(t0.Add(step.at))
		results = results[:0]
		j.Identify(h)
		if len(results) != 1 || results[0] != step.want {
			t.Fatalf("at +%s: %v, want %s", step.at, results, step.want)
		}
	}
}

// The token comes from Authorization only with the Bearer scheme, from another header with or
// without it.
func TestTokenHeader(t *testing.T) {
	auth, _ := keys.NewJWT(policy.JWT{Header: "Authorization", Algorithms: policy.JWTAlgorithms, JWKS: policy.EmptyJWKS}, keys.JWTOptions{})
	named, _ := keys.NewJWT(policy.JWT{Header: "X-Token", Algorithms: policy.JWTAlgorithms, JWKS: policy.EmptyJWKS}, keys.JWTOptions{})
	for _, tc := range []struct {
		j      *keys.JWT
		h      keys.HTTPHeader
		want   string
		wantOK bool
	}{
		{auth, keys.HTTPHeader{"Authorization": {"Bearer abc"}}, "abc", true},
		{auth, keys.HTTPHeader{"Authorization": {"bearer   abc "}}, "abc", true},
		{auth, keys.HTTPHeader{"Authorization": {"Basic abc"}}, "", false},
		{auth, keys.HTTPHeader{"Authorization": {"abc"}}, "", false},
		{auth, keys.HTTPHeader{"Authorization": {"Bearer "}}, "", false},
		{auth, keys.HTTPHeader{}, "", false},
		{named, keys.HTTPHeader{"X-Token": {"abc"}}, "abc", true},
		{named, keys.HTTPHeader{"X-Token": {"Bearer abc"}}, "abc", true},
		{named, keys.HTTPHeader{"Authorization": {"Bearer abc"}}, "", false},
	} {
		got, ok := tc.j.Token(tc.h)
		if got != tc.want || ok != tc.wantOK {
			t.Errorf("%v from %s: %q %t, want %q %t", tc.h, tc.j.Config().Header, got, ok, tc.want, tc.wantOK)
		}
	}
}

func TestClaimPaths(t *testing.T) {
	key := jwttest.NewKey(t, jose.EdDSA, "k1")
	j := staticJWT(t, clocktesting.NewFakeClock(t0), jwttest.JWKS(t, key))
	id, res := j.Verify(key.Sign(t, jwttest.Valid("alice", issuer, audience, t0).With(
		"org", map[string]any{"id": "acme", "seats": 12345678901234567, "paid": true, "tags": []string{"a"}},
		"https://example.com/tenant", "t-1", "n", nil, "empty", "")))
	if id == nil {
		t.Fatalf("not verified: %s", res)
	}
	for name, want := range map[string]string{
		"sub": "alice", "org.id": "acme", "org.seats": "12345678901234567", "org.paid": "true",
		"https://example.com/tenant": "t-1", "empty": "",
	} {
		if got, ok := id.Claim(name); !ok || got != want {
			t.Errorf("claim %s: %q %t, want %q", name, got, ok, want)
		}
	}
	for _, name := range []string{"org", "org.tags", "org.id.x", "nope", "org.nope", "n"} {
		if got, ok := id.Claim(name); ok {
			t.Errorf("claim %s: %q, want none", name, got)
		}
	}
}

// A key set from an https URL: fetched at start, again when a token names a key it lacks (a
// rotation) but at most once per MinFetchInterval, kept while the URL fails, and refreshed in
// the background once older than RefreshEvery, which also drops a key that is gone.
func TestKeySetURL(t *testing.T) {
	k1 := jwttest.NewKey(t, jose.RS256, "k1")
	k2 := jwttest.NewKey(t, jose.ES256, "k2")
	srv := jwttest.NewServer(t, jwttest.JWKS(t, k1))
	clk := clocktesting.NewFakeClock(t0)
	var fetchErrs, fetchOKs int
	fetched := make(chan struct{}, 16)
	j, err := keys.NewJWT(policy.JWT{Header: "Authorization", Algorithms: policy.JWTAlgorithms, JWKSURL: srv.URL},
		keys.JWTOptions{Clock: clk, Client: srv.Client(), OnFetch: func(_ int, err error) {
			if err != nil {
				fetchErrs++
			} else {
				fetchOKs++
			}
			fetched <- struct{}{}
		}})
	if err != nil {
		t.Fatal(err)
	}
	verify := func(k jwttest.Key, sub string) keys.TokenResult {
		t.Helper()
		_, r := j.Verify(k.Sign(t, jwttest.Valid(sub, "", "", clk.Now())))
		return r
	}
	if r := verify(k1, "alice"); r != keys.TokenVerified {
		t.Fatalf("a k1 token after the first fetch: %s", r)
	}
	<-fetched
	if srv.Fetches() != 1 {
		t.Fatalf("fetches %d, want 1", srv.Fetches())
	}

	// Rotation: k2 added. Within MinFetchInterval of the last fetch, no fetch: unknown key.
	srv.Set(jwttest.JWKS(t, k2))
	clk.Step(keys.MinFetchInterval - time.Millisecond)
	if r := verify(k2, "bob"); r != keys.TokenUnknownKey {
		t.Fatalf("a k2 token before the fetch interval passed: %s", r)
	}
	if srv.Fetches() != 1 {
		t.Fatalf("fetches %d, want 1: fetches are bounded", srv.Fetches())
	}
	clk.Step(time.Millisecond)
	if r := verify(k2, "bob"); r != keys.TokenVerified {
		t.Fatalf("a k2 token after the rotation: %s", r)
	}
	<-fetched
	// k1 is gone from the set: its tokens, even one verified before, no longer verify.
	if r := verify(k1, "alice"); r != keys.TokenUnknownKey {
		t.Fatalf("a k1 token after k1 left the set: %s", r)
	}

	// The URL fails: the keys in use stay.
	srv.Fail(http.StatusServiceUnavailable)
	clk.Step(keys.RefreshEvery)
	if r := verify(k2, "bob"); r != keys.TokenVerified {
		t.Fatalf("a k2 token while the URL fails: %s", r)
	}
	<-fetched // the background refresh, failed
	if fetchErrs != 1 || j.Keys() != 1 {
		t.Fatalf("fetch errors %d, keys %d: want 1 and the key kept", fetchErrs, j.Keys())
	}
	srv.Fail(http.StatusOK)
	srv.Set([]byte(`{"keys": "not a list"}`))
	clk.Step(keys.MinFetchInterval)
	if r := verify(k2, "carol"); r != keys.TokenVerified {
		t.Fatalf("a k2 token while the URL serves garbage: %s", r)
	}
	<-fetched
	if fetchErrs != 2 || fetchOKs != 2 || j.Keys() != 1 {
		t.Fatalf("fetch errors %d, ok %d, keys %d: want 2, 2 and the key kept", fetchErrs, fetchOKs, j.Keys())
	}
}

// Through a rule's key and match: a verified token reaches its own counter, every other
// request the rule's one unverified counter, whatever its token claims; a verified token
// without the claim the missing counter.
func TestClaimKeys(t *testing.T) {
	key := jwttest.NewKey(t, jose.RS256, "k1")
	clk := clocktesting.NewFakeClock(t0)
	j := staticJWT(t, clk, jwttest.JWKS(t, key))
	k := keys.CompileKey("p", "per-user", []policy.KeyPart{{Source: policy.SourceJWTClaim, Name: "sub"}, {Source: policy.SourceMethod}}, keys.Trusted{}).WithJWT(j)
	unchecked := keys.CompileKey("p", "per-user", []policy.KeyPart{{Source: policy.SourceJWTClaim, Name: "sub"}}, keys.Trusted{})
	verified := keys.CompileMatch(&policy.Match{JWT: policy.JWTVerified}).WithJWT(j)
	unverified := keys.CompileMatch(&policy.Match{JWT: policy.JWTUnverified}).WithJWT(j)
	valid := jwttest.Valid("alice", issuer, audience, t0)
	alice := key.Sign(t, valid)
	own, err := k.FromValues([]string{"alice", "GET"})
	if err != nil {
		t.Fatal(err)
	}
	// sluicectl quota names a user's counter by its claim, with no verifier: the key the
	// sidecar gives that user's verified token.
	verifiedReq := keys.Request{Header: keys.HTTPHeader{"Authorization": {"Bearer " + alice}}}
	checked := unchecked.WithJWT(j)
	if got, _ := unchecked.FromValues([]string{"alice"}); got != string(checked.Append(nil, &verifiedReq)) {
		t.Errorf("FromValues without a verifier: %q, want the verified request's key", got)
	}
	for name, tc := range map[string]struct {
		auth string
		want string
	}{
		"valid":      {"Bearer " + alice, own},
		"none":       {"", k.Unverified()},
		"forged sub": {"Bearer " + jwttest.Forge(t, alice, valid.With("sub", "bob")), k.Unverified()},
		"alg none":   {"Bearer " + jwttest.None(t, "k1", valid.With("sub", "bob")), k.Unverified()},
		"expired":    {"Bearer " + key.Sign(t, valid.With("exp", t0.Add(-time.Hour).Unix())), k.Unverified()},
		"no sub":     {"Bearer " + key.Sign(t, valid.With("sub", nil)), k.Missing()},
	} {
		t.Run(name, func(t *testing.T) {
			h := keys.HTTPHeader{}
			if tc.auth != "" {
				h["Authorization"] = []string{tc.auth}
			}
			req := keys.Request{Method: "GET", Header: h}
			if got := string(k.Append(nil, &req)); got != tc.want {
				t.Errorf("key %q, want %q", got, tc.want)
			}
			isVerified := tc.want != k.Unverified()
			if verified.MatchesRequest(&req) != isVerified || unverified.MatchesRequest(&req) == isVerified {
				t.Errorf("match Verified %t, Unverified %t; verified: %t", verified.MatchesRequest(&req), unverified.MatchesRequest(&req), isVerified)
			}
			// A key without the policy's verifier never reads a claim.
			if got := string(unchecked.Append(nil, &keys.Request{Method: "GET", Header: h})); got != unchecked.Unverified() {
				t.Errorf("key without a verifier %q, want the unverified key", got)
			}
		})
	}
}

// BenchmarkClaimKey is a key from a verified token's sub (verified once, then cached) beside
// the same key from a header, on the same request.
func BenchmarkClaimKey(b *testing.B) {
	key := jwttest.NewKey(b, jose.ES256, "k1")
	j, err := keys.NewJWT(policy.JWT{Header: "Authorization", Algorithms: policy.JWTAlgorithms, JWKS: jwttest.JWKS(b, key)}, keys.JWTOptions{})
	if err != nil {
		b.Fatal(err)
	}
	h := keys.HTTPHeader{"Authorization": {"Bearer " + key.Sign(b, jwttest.Valid("alice", "", "", time.Now()))}, "X-User": {"alice"}}
	for name, k := range map[string]keys.Key{
		"header": keys.CompileKey("p", "r", []policy.KeyPart{{Source: policy.SourceHeader, Name: "X-User"}}, keys.Trusted{}),
		"jwt":    keys.CompileKey("p", "r", []policy.KeyPart{{Source: policy.SourceJWTClaim, Name: "sub"}}, keys.Trusted{}).WithJWT(j),
	} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			buf := make([]byte, 0, 128)
			for b.Loop() {
				req := keys.Request{Method: "GET", Header: h}
				buf = k.Append(buf[:0], &req)
			}
			if string(buf) != "1:p1:r5:alice" {
				b.Fatalf("key %q", buf)
			}
		})
	}
}

// FuzzClaimKeyUnforgeable: whatever token a request carries, its key is the unverified key or
// the key of a token the key's owner signed (alice's): no string reaches another user's key.
func FuzzClaimKeyUnforgeable(f *testing.F) {
	key := jwttest.NewKey(f, jose.ES256, "k1")
	clk := clocktesting.NewFakeClock(t0)
	j, err := keys.NewJWT(policy.JWT{Header: "Authorization", Algorithms: policy.JWTAlgorithms, JWKS: jwttest.JWKS(f, key)}, keys.JWTOptions{Clock: clk})
	if err != nil {
		f.Fatal(err)
	}
	k := keys.CompileKey("p", "r", []policy.KeyPart{{Source: policy.SourceJWTClaim, Name: "sub"}}, keys.Trusted{}).WithJWT(j)
	valid := jwttest.Valid("alice", "", "", t0)
	alice := key.Sign(f, valid)
	for _, s := range []string{alice, jwttest.Forge(f, alice, valid.With("sub", "bob")), jwttest.None(f, "k1", valid.With("sub", "bob")),
		key.HS256WithPublicKey(f, valid.With("sub", "bob"), true), alice + "x", "a.b.c", ""} {
		f.Add(s)
	}
	own, _ := k.FromValues([]string{"alice"})
	f.Fuzz(func(t *testing.T, token string) {
		req := keys.Request{Header: keys.HTTPHeader{"Authorization": {"Bearer " + token}}}
		if got := string(k.Append(nil, &req)); got != own && got != k.Unverified() {
			t.Fatalf("token %q reached key %q", token, got)
		}
	})
}
