package keys

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"k8s.io/utils/clock"

	"github.com/sluice-dev/sluice/internal/policy"
)

// This file verifies the JSON Web Tokens whose claims a rule keys on (policy.SourceJWTClaim)
// or matches (policy.Match.JWT). go-jose parses and verifies every token; this file only
// chooses the keys, the algorithms and the claims a token must have, and caches the outcome.

// Token verification's fixed settings.
const (
	// Leeway is how far a token's exp, nbf and iat may be off the sidecar's clock.
	Leeway = 30 * time.Second
	// RefreshEvery is how old a fetched key set gets before the next token starts a fetch in
	// the background (the key set in use stays until a fetch succeeds).
	RefreshEvery = 5 * time.Minute
	// MinFetchInterval is the least time between two fetches of one key set: a token naming
	// a key the set lacks starts a fetch (and waits for it) only this long after the last.
	MinFetchInterval = 5 * time.Second
	// FetchTimeout bounds one fetch of a key set.
	FetchTimeout = 5 * time.Second
	// DefaultTokenCache is how many verified tokens a policy remembers (JWTOptions.CacheSize).
	DefaultTokenCache = 10_000
	// MaxTokenBytes is the longest token verified; a longer one is malformed.
	MaxTokenBytes = 16 << 10
)

// TokenResult is the outcome of one token's verification, a metric label.
type TokenResult string

// The token results.
const (
	// TokenVerified: the token verified now; TokenCached: it had verified before (and has
	// not expired since).
	TokenVerified TokenResult = "verified"
	TokenCached   TokenResult = "cached"
	// The failures: the request carries no token; it does not parse (or is too long); its
	// algorithm is not allowed; no key of the set has its kid (or fits its algorithm); no key
	// verifies its signature; it has no exp; it expired; it is not valid yet (nbf, iat); its
	// iss or aud is not the policy's.
	TokenMissing     TokenResult = "missing"
	TokenMalformed   TokenResult = "malformed"
	TokenAlgorithm   TokenResult = "algorithm"
	TokenUnknownKey  TokenResult = "unknown_key"
	TokenSignature   TokenResult = "signature"
	TokenNoExpiry    TokenResult = "no_expiry" //nolint:gosec // a metric label, not a credential
	TokenExpired     TokenResult = "expired"
	TokenNotYetValid TokenResult = "not_yet_valid"
	TokenIssuer      TokenResult = "issuer"
	TokenAudience    TokenResult = "audience"
)

// TokenResults are every TokenResult.
var TokenResults = []TokenResult{TokenVerified, TokenCached, TokenMissing, TokenMalformed, TokenAlgorithm,
	TokenUnknownKey, TokenSignature, TokenNoExpiry, TokenExpired, TokenNotYetValid, TokenIssuer, TokenAudience}

// JWTOptions are a JWT's collaborators; the zero value is the production setting.
type JWTOptions struct {
	// Clock reads the time tokens are checked at; nil is the real clock.
	Clock clock.PassiveClock
	// Client fetches a key set URL; nil is a client with the system's roots and FetchTimeout.
	Client *http.Client
	// CacheSize bounds the verified tokens remembered; 0 is DefaultTokenCache.
	CacheSize int
	// OnToken, when set, is told each verification's result.
	OnToken func(TokenResult)
	// OnFetch, when set, is told each fetch's outcome: the number of usable keys, or err.
	OnFetch func(keys int, err error)
	// Log receives fetch failures and skipped keys; nil discards them.
	Log *slog.Logger
}

// JWT verifies the tokens of one policy (policy.JWT): the signature against the policy's key
// set with an allowed algorithm, exp (required) and nbf within Leeway, iss and aud when the
// policy sets them. A key set from a URL is fetched in the background when the JWT is made,
// when it is older than RefreshEvery, and when a token names a key it lacks (then waited for,
// at most once per MinFetchInterval); a failed fetch keeps the keys in use. Verified tokens are
// remembered, up to CacheSize, by their SHA-256, until they expire or the key set changes.
// Safe for concurrent use.
type JWT struct {
	cfg   policy.JWT
	algs  []jose.SignatureAlgorithm
	opts  JWTOptions
	clock clock.PassiveClock
	keys  atomic.Pointer[keySet]
	cache *tokenCache

	mu        sync.Mutex
	inflight  chan struct{}
	lastFetch time.Time
}

// keySet is the key set in use and when it was last fetched (Unix nanoseconds).
type keySet struct {
	keys    []jose.JSONWebKey
	raw     string
	fetched atomic.Int64
}

func newKeySet(keys []jose.JSONWebKey, raw string, now time.Time) *keySet {
	s := &keySet{keys: keys, raw: raw}
	s.fetched.Store(now.UnixNano())
	return s
}

// Identity is a verified token's claims. It is immutable.
type Identity struct {
	claims map[string]any
	// set is the key set that verified the token: it stays verified only while that set is
	// in use.
	set *keySet
	// until is when the token stops being valid (its exp plus Leeway).
	until time.Time
}

// NewJWT returns the verifier of cfg, which must be valid (policy.Validate).
func NewJWT(cfg policy.JWT, opts JWTOptions) (*JWT, error) {
	size := opts.CacheSize
	if size <= 0 {
		size = DefaultTokenCache
	}
	j := &JWT{cfg: cfg, opts: opts, clock: opts.Clock, cache: newTokenCache(size)}
	if j.clock == nil {
		j.clock = clock.RealClock{}
	}
	if j.opts.Client == nil {
		j.opts.Client = &http.Client{Timeout: FetchTimeout}
	}
	if j.opts.Log == nil {
		j.opts.Log = slog.New(slog.DiscardHandler)
	}
	for _, a := range cfg.Algorithms {
		j.algs = append(j.algs, jose.SignatureAlgorithm(a))
	}
	if len(cfg.JWKS) > 0 {
		set, err := policy.ParseJWKS(cfg.JWKS)
		if err != nil {
			return nil, fmt.Errorf("jwt.jwks: %w", err)
		}
		j.keys.Store(newKeySet(set.Keys, string(cfg.JWKS), j.clock.Now()))
		return j, nil
	}
	j.refresh(false) // the first fetch; tokens that need it wait for it
	return j, nil
}

// Config is the policy.JWT j verifies with.
func (j *JWT) Config() policy.JWT { return j.cfg }

// Token returns the token a request carries in the policy's header: after "Bearer " in
// Authorization, the whole value (less an optional "Bearer ") in any other header. ok is false
// when there is none.
func (j *JWT) Token(h Header) (string, bool) {
	v, ok := h.Get(j.cfg.Header)
	if !ok {
		return "", false
	}
	v = strings.TrimSpace(v)
	const bearer = "bearer "
	hasScheme := len(v) > len(bearer) && strings.EqualFold(v[:len(bearer)], bearer)
	switch {
	case hasScheme:
		v = strings.TrimSpace(v[len(bearer):])
	case j.cfg.Header == policy.AuthorizationHeader:
		return "", false // another scheme (Basic, ...) carries no token of ours
	}
	return v, v != ""
}

// Identify verifies the token of a request's header and returns its identity; nil when the
// request carries no token or its token fails.
func (j *JWT) Identify(h Header) *Identity {
	token, ok := j.Token(h)
	if !ok {
		j.observe(TokenMissing)
		return nil
	}
	id, res := j.Verify(token)
	j.observe(res)
	return id
}

func (j *JWT) observe(r TokenResult) {
	if j.opts.OnToken != nil {
		j.opts.OnToken(r)
	}
}

// Verify verifies token and returns its identity and TokenVerified or TokenCached, or nil and
// why it failed.
func (j *JWT) Verify(token string) (*Identity, TokenResult) {
	if len(token) > MaxTokenBytes {
		return nil, TokenMalformed
	}
	now := j.clock.Now()
	// The token's bytes, hashed in place: a copy would cost an allocation per request.
	sum := sha256.Sum256(unsafe.Slice(unsafe.StringData(token), len(token))) //nolint:gosec // read only, while token lives
	set := j.keys.Load()
	if id := j.cache.get(sum); id != nil && now.Before(id.until) && id.set == set {
		j.keepFresh(set, now)
		return id, TokenCached
	}
	tok, err := jwt.ParseSigned(token, j.algs)
	if err != nil {
		if strings.Contains(err.Error(), "unexpected signature algorithm") {
			return nil, TokenAlgorithm
		}
		return nil, TokenMalformed
	}
	if len(tok.Headers) != 1 {
		return nil, TokenMalformed
	}
	h := tok.Headers[0]
	candidates := candidateKeys(set, h)
	if len(candidates) == 0 && j.cfg.JWKSURL != "" {
		// A key the set lacks: a rotation the set has not seen yet, or a forged kid. Fetch
		// (at most once per MinFetchInterval) and look again.
		j.refresh(true)
		set = j.keys.Load()
		candidates = candidateKeys(set, h)
	} else {
		j.keepFresh(set, now)
	}
	if len(candidates) == 0 {
		return nil, TokenUnknownKey
	}
	var (
		claims jwt.Claims
		raw    json.RawMessage
		signed bool
	)
	for _, k := range candidates {
		if tok.Claims(k.Key, &claims, &raw) == nil {
			signed = true
			break
		}
	}
	if !signed {
		return nil, TokenSignature
	}
	if claims.Expiry == nil {
		return nil, TokenNoExpiry
	}
	expected := jwt.Expected{Issuer: j.cfg.Issuer, AnyAudience: j.cfg.Audiences, Time: now}
	if err := claims.ValidateWithLeeway(expected, Leeway); err != nil {
		switch {
		case errors.Is(err, jwt.ErrExpired):
			return nil, TokenExpired
		case errors.Is(err, jwt.ErrNotValidYet), errors.Is(err, jwt.ErrIssuedInTheFuture):
			return nil, TokenNotYetValid
		case errors.Is(err, jwt.ErrInvalidIssuer):
			return nil, TokenIssuer
		case errors.Is(err, jwt.ErrInvalidAudience):
			return nil, TokenAudience
		}
		return nil, TokenMalformed
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	id := &Identity{until: claims.Expiry.Time().Add(Leeway), set: set}
	if err := dec.Decode(&id.claims); err != nil {
		return nil, TokenMalformed
	}
	j.cache.add(sum, id)
	return id, TokenVerified
}

// candidateKeys are the keys of set that may have signed a token with header h: those with
// its kid (every key when it names none) whose type fits its algorithm and whose own alg, if
// any, is its algorithm. go-jose checks the type again when it verifies.
func candidateKeys(set *keySet, h jose.Header) []jose.JSONWebKey {
	if set == nil {
		return nil
	}
	var out []jose.JSONWebKey
	for _, k := range set.keys {
		if h.KeyID != "" && k.KeyID != h.KeyID {
			continue
		}
		if k.Algorithm != "" && k.Algorithm != h.Algorithm {
			continue
		}
		out = append(out, k)
	}
	return out
}

// keepFresh starts a background fetch of a URL's key set older than RefreshEvery.
func (j *JWT) keepFresh(set *keySet, now time.Time) {
	if j.cfg.JWKSURL != "" && (set == nil || now.Sub(time.Unix(0, set.fetched.Load())) >= RefreshEvery) {
		j.refresh(false)
	}
}

// refresh fetches the key set URL unless a fetch started less than MinFetchInterval ago;
// with wait, it returns when the fetch in flight (this one or an earlier) is done.
func (j *JWT) refresh(wait bool) {
	if j.cfg.JWKSURL == "" {
		return
	}
	j.mu.Lock()
	ch := j.inflight
	if ch == nil {
		now := j.clock.Now()
		if !j.lastFetch.IsZero() && now.Sub(j.lastFetch) < MinFetchInterval {
			j.mu.Unlock()
			return
		}
		j.lastFetch = now
		ch = make(chan struct{})
		j.inflight = ch
		go func() {
			j.fetch()
			j.mu.Lock()
			j.inflight = nil
			j.mu.Unlock()
			close(ch)
		}()
	}
	j.mu.Unlock()
	if wait {
		<-ch
	}
}

// fetch fetches the key set URL once and installs it; a failure keeps the keys in use.
func (j *JWT) fetch() {
	set, err := j.get()
	if err != nil {
		j.opts.Log.Warn("Key set not fetched; keeping the keys in use", "url", j.cfg.JWKSURL, "error", err)
		if j.opts.OnFetch != nil {
			j.opts.OnFetch(0, err)
		}
		return
	}
	if len(set.Skipped) > 0 {
		j.opts.Log.Info("Key set fetched; some keys skipped", "url", j.cfg.JWKSURL, "keys", len(set.Keys), "skipped", set.Skipped)
	}
	if j.opts.OnFetch != nil {
		j.opts.OnFetch(len(set.Keys), nil)
	}
	raw, _ := json.Marshal(jose.JSONWebKeySet{Keys: set.Keys})
	now := j.clock.Now()
	if old := j.keys.Load(); old != nil && old.raw == string(raw) {
		old.fetched.Store(now.UnixNano()) // the same keys: the tokens they verified stay verified
		return
	}
	// Another key set: the tokens remembered were verified by the one before (Identity.set),
	// and a key that is gone must verify nothing more.
	j.keys.Store(newKeySet(set.Keys, string(raw), now))
	j.cache.clear()
}

func (j *JWT) get() (policy.KeySet, error) {
	ctx, cancel := context.WithTimeout(context.Background(), FetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, j.cfg.JWKSURL, nil)
	if err != nil {
		return policy.KeySet{}, err
	}
	req.Header.Set("Accept", "application/json, application/jwk-set+json")
	resp, err := j.opts.Client.Do(req)
	if err != nil {
		return policy.KeySet{}, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return policy.KeySet{}, fmt.Errorf("GET %s: %s", j.cfg.JWKSURL, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, policy.MaxJWKSBytes+1))
	if err != nil {
		return policy.KeySet{}, fmt.Errorf("GET %s: %w", j.cfg.JWKSURL, err)
	}
	return policy.ParseJWKS(body)
}

// Keys is the number of keys in use; 0 before a key set URL was first fetched.
func (j *JWT) Keys() int {
	if s := j.keys.Load(); s != nil {
		return len(s.keys)
	}
	return 0
}

// Claim returns the value of the claim name: the claim of that exact name when the token has
// one, else the dotted path name into nested objects. A string is returned as is, a number or
// a boolean as its JSON text; ok is false for an absent claim, an object, a list or null.
func (id *Identity) Claim(name string) (string, bool) {
	v, ok := id.claims[name]
	if !ok {
		obj := id.claims
		for rest := name; ; {
			seg, tail, more := strings.Cut(rest, ".")
			if v, ok = obj[seg]; !ok {
				return "", false
			}
			if !more {
				break
			}
			if obj, ok = v.(map[string]any); !ok {
				return "", false
			}
			rest = tail
		}
	}
	switch v := v.(type) {
	case string:
		return v, true
	case json.Number:
		return v.String(), true
	case bool:
		if v {
			return "true", true
		}
		return "false", true
	}
	return "", false
}

// tokenCache remembers verified tokens by their SHA-256, at most size of them: two
// generations of size/2, the older dropped whole when the newer fills, so that a hit takes a
// read lock and no bookkeeping, and a token in use moves to the newer generation when the older
// one holds it. An entry is checked by the caller (expiry, key set) when found.
type tokenCache struct {
	mu        sync.RWMutex
	cur, prev map[[sha256.Size]byte]*Identity
	half      int
}

func newTokenCache(size int) *tokenCache {
	half := max(size/2, 1)
	return &tokenCache{cur: make(map[[sha256.Size]byte]*Identity, half), prev: map[[sha256.Size]byte]*Identity{}, half: half}
}

func (c *tokenCache) get(sum [sha256.Size]byte) *Identity {
	c.mu.RLock()
	id, ok := c.cur[sum]
	if !ok {
		id = c.prev[sum]
	}
	c.mu.RUnlock()
	if !ok && id != nil {
		c.add(sum, id)
	}
	return id
}

func (c *tokenCache) add(sum [sha256.Size]byte, id *Identity) {
	c.mu.Lock()
	if len(c.cur) >= c.half {
		c.prev, c.cur = c.cur, make(map[[sha256.Size]byte]*Identity, c.half)
	}
	c.cur[sum] = id
	c.mu.Unlock()
}

func (c *tokenCache) clear() {
	c.mu.Lock()
	c.cur, c.prev = make(map[[sha256.Size]byte]*Identity, c.half), map[[sha256.Size]byte]*Identity{}
	c.mu.Unlock()
}
