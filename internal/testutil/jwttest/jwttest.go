// Package jwttest mints JSON Web Tokens and serves key sets for tests: keys of every
// algorithm Sluice accepts, tokens signed with go-jose, the forgeries a verifier must refuse
// (alg none, HS256 keyed with the public key, a claim changed after signing), and an https
// key set server whose self-signed certificate a test trusts.
package jwttest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// TB is what the helpers need of a test: testing.TB's, or Ginkgo's GinkgoT().
type TB interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	TempDir() string
	Cleanup(func())
}

// Key is a signing key pair with its key id and algorithm.
type Key struct {
	KID     string
	Alg     jose.SignatureAlgorithm
	Private crypto.Signer
}

// NewKey makes a key of alg (RS256, ES256 or EdDSA) named kid.
func NewKey(t TB, alg jose.SignatureAlgorithm, kid string) Key {
	t.Helper()
	var (
		priv crypto.Signer
		err  error
	)
	switch alg {
	case jose.RS256, jose.RS384, jose.RS512, jose.PS256:
		priv, err = rsa.GenerateKey(rand.Reader, 2048)
	case jose.ES256:
		priv, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case jose.EdDSA:
		_, priv, err = ed25519.GenerateKey(rand.Reader)
	default:
		t.Fatalf("jwttest: no key for %s", alg)
	}
	if err != nil {
		t.Fatal(err)
	}
	return Key{KID: kid, Alg: alg, Private: priv}
}

// JWK is the key's public half as a JSON Web Key (with kid, alg and use sig).
func (k Key) JWK() jose.JSONWebKey {
	return jose.JSONWebKey{Key: k.Private.Public(), KeyID: k.KID, Algorithm: string(k.Alg), Use: "sig"}
}

// PrivateJWK is the key's private half as a JSON Web Key.
func (k Key) PrivateJWK() jose.JSONWebKey {
	return jose.JSONWebKey{Key: k.Private, KeyID: k.KID, Algorithm: string(k.Alg), Use: "sig"}
}

// JWKS is the key set of the keys' public halves.
func JWKS(t TB, keys ...Key) []byte {
	t.Helper()
	set := jose.JSONWebKeySet{Keys: []jose.JSONWebKey{}}
	for _, k := range keys {
		set.Keys = append(set.Keys, k.JWK())
	}
	b, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Claims are a token's claims: the registered ones and any others.
type Claims map[string]any

// Valid returns claims for sub, issued by iss for aud, valid from an hour before now to an
// hour after.
func Valid(sub, iss, aud string, now time.Time) Claims {
	return Claims{"sub": sub, "iss": iss, "aud": aud,
		"iat": now.Add(-time.Hour).Unix(), "nbf": now.Add(-time.Hour).Unix(), "exp": now.Add(time.Hour).Unix()}
}

// With returns a copy of c with the claims kv (name, value, name, value...); a nil value
// removes the claim.
func (c Claims) With(kv ...any) Claims {
	out := Claims{}
	for k, v := range c {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		name, _ := kv[i].(string)
		if kv[i+1] == nil {
			delete(out, name)
		} else {
			out[name] = kv[i+1]
		}
	}
	return out
}

// Sign signs claims with k, its kid in the header.
func (k Key) Sign(t TB, c Claims) string {
	t.Helper()
	opts := (&jose.SignerOptions{}).WithType("JWT").WithHeader(jose.HeaderKey("kid"), k.KID)
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: k.Alg, Key: k.Private}, opts)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jwt.Signed(s).Claims(map[string]any(c)).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func segment(t TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// None is an unsigned token, alg none, naming kid.
func None(t TB, kid string, c Claims) string {
	return segment(t, map[string]string{"alg": "none", "typ": "JWT", "kid": kid}) + "." + segment(t, c) + "."
}

// HS256WithPublicKey is the algorithm confusion forgery: a token with alg HS256 whose HMAC key
// is k's public key, in PEM (as a verifier that takes the key's bytes as the secret would
// check it) when pemKey is true, else its JWK JSON.
func (k Key) HS256WithPublicKey(t TB, c Claims, pemKey bool) string {
	t.Helper()
	var secret []byte
	if pemKey {
		der, err := x509.MarshalPKIXPublicKey(k.Private.Public())
		if err != nil {
			t.Fatal(err)
		}
		secret = pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	} else {
		var err error
		if secret, err = json.Marshal(k.JWK()); err != nil {
			t.Fatal(err)
		}
	}
	signing := segment(t, map[string]string{"alg": "HS256", "typ": "JWT", "kid": k.KID}) + "." + segment(t, c)
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(signing))
	return signing + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// Forge returns token with its claims replaced by c and its header and signature kept: what a
// caller who changes sub in a real token sends.
func Forge(t TB, token string, c Claims) string {
	t.Helper()
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		t.Fatalf("jwttest: %q is not a compact JWS", token)
	}
	return parts[0] + "." + segment(t, c) + "." + parts[2]
}

// Server is an https server of a key set that can be replaced, with a self-signed certificate
// (for 127.0.0.1) a test trusts through Client or the PEM file CAFile.
type Server struct {
	*httptest.Server
	jwks    atomic.Pointer[[]byte]
	status  atomic.Int32
	fetches atomic.Int64
	caFile  string
}

// NewServer serves jwks over https until the test ends.
func NewServer(t TB, jwks []byte) *Server {
	t.Helper()
	s := &Server{}
	s.Set(jwks)
	s.status.Store(http.StatusOK)
	s.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		s.fetches.Add(1)
		if code := int(s.status.Load()); code != http.StatusOK {
			http.Error(w, "unavailable", code)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(*s.jwks.Load())
	}))
	t.Cleanup(s.Close)
	dir := t.TempDir()
	s.caFile = filepath.Join(dir, "ca.pem")
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw})
	if err := os.WriteFile(s.caFile, ca, 0o600); err != nil {
		t.Fatal(err)
	}
	return s
}

// Set replaces the key set served (a rotation).
func (s *Server) Set(jwks []byte) { s.jwks.Store(&jwks) }

// Fail makes the server answer status (503, say) until Fail(200).
func (s *Server) Fail(status int) { s.status.Store(int32(status)) }

// Fetches is how many requests the server has had.
func (s *Server) Fetches() int64 { return s.fetches.Load() }

// CAFile is the PEM file of the server's certificate, for SSL_CERT_FILE.
func (s *Server) CAFile() string { return s.caFile }
