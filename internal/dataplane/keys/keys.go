// Package keys turns an HTTP request into what a rule needs: whether the rule matches it, the
// client address (X-Forwarded-For believed only from trusted proxies), the limiter key, and the
// request's cost. Everything is compiled once per configuration so that a request costs no
// parsing beyond its own bytes and, for the key, one buffer the caller provides.
package keys

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/sluice-dev/sluice/internal/policy"
)

// MaxPartLen is the longest key part value kept verbatim; longer values are replaced by a hash,
// so a limiter key stays short whatever a client sends.
const MaxPartLen = 64

// Trusted is the set of networks whose X-Forwarded-For a policy believes. The zero value trusts
// nobody. It is immutable and safe for concurrent use.
type Trusted struct {
	prefixes []netip.Prefix
}

// ParseTrusted parses CIDRs (policy.Policy.TrustedProxies).
func ParseTrusted(cidrs []string) (Trusted, error) {
	var t Trusted
	for _, c := range cidrs {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return Trusted{}, err
		}
		t.prefixes = append(t.prefixes, p.Masked())
	}
	return t, nil
}

// Empty reports whether t trusts nobody.
func (t Trusted) Empty() bool { return len(t.prefixes) == 0 }

// Contains reports whether a is inside one of the trusted networks. IPv4-mapped IPv6 addresses
// are compared as IPv4.
func (t Trusted) Contains(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range t.prefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// ParseRemoteAddr parses http.Request.RemoteAddr ("ip:port", "[ipv6]:port") into an address
// without zone or IPv4 mapping. ok is false when it is not an IP address (e.g. a unix socket).
func ParseRemoteAddr(s string) (netip.Addr, bool) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap().WithZone(""), true
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap().WithZone(""), true
	}
	return netip.Addr{}, false
}

// parseHop parses one X-Forwarded-For element: an address, optionally with a port
// ("1.2.3.4:5", "[::1]:5") or in brackets, surrounded by optional whitespace.
func parseHop(s string) (netip.Addr, bool) {
	s = strings.TrimSpace(s)
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap().WithZone(""), true
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap().WithZone(""), true
	}
	if len(s) > 2 && s[0] == '[' && s[len(s)-1] == ']' {
		if a, err := netip.ParseAddr(s[1 : len(s)-1]); err == nil {
			return a.Unmap().WithZone(""), true
		}
	}
	return netip.Addr{}, false
}

// ClientIP returns the address a request is keyed by. It is peer (the TCP peer) unless peer is
// trusted; then X-Forwarded-For (xff, the header's lines in order, each a comma-separated list)
// is walked from the right, skipping trusted addresses, and the first untrusted address is the
// client. The walk stops at an element that is not an address: everything left of it was
// written by someone we cannot vouch for, so the last trusted hop seen is used. When every
// element is trusted, the left-most is used.
//
// A client that is not a trusted proxy can therefore not change its key by sending the header,
// and one behind a trusted proxy can only prepend entries, which the walk never reaches.
func ClientIP(peer netip.Addr, xff []string, t Trusted) netip.Addr {
	if t.Empty() || !t.Contains(peer) {
		return peer
	}
	client := peer
	for i := len(xff) - 1; i >= 0; i-- {
		line := xff[i]
		for {
			var elem string
			if j := strings.LastIndexByte(line, ','); j >= 0 {
				elem, line = line[j+1:], line[:j]
			} else {
				elem, line = line, ""
			}
			if strings.TrimSpace(elem) == "" {
				if line == "" {
					break
				}
				continue // tolerate "a,,b" and trailing commas
			}
			a, ok := parseHop(elem)
			if !ok {
				return client
			}
			if !t.Contains(a) {
				return a
			}
			client = a
			if line == "" {
				break
			}
		}
	}
	return client
}

// Match is a compiled policy.Match. The zero value matches every request.
type Match struct {
	pathPrefix string
	methods    []string
	headers    []policy.HeaderMatch
	routes     []policy.RouteMatch
	// jwt is policy.JWTVerified or JWTUnverified, judged by verifier; "" for no condition.
	jwt      string
	verifier *JWT
}

// CompileMatch compiles m; nil matches every request. A condition on the token (m.JWT) judges
// every request unverified until WithJWT gives the policy's verifier.
func CompileMatch(m *policy.Match) Match {
	if m == nil {
		return Match{}
	}
	return Match{pathPrefix: m.PathPrefix, methods: m.Methods, headers: m.Headers, routes: m.Routes, jwt: m.JWT}
}

// WithJWT returns m judging its condition on the token with j, its policy's verifier.
func (m Match) WithJWT(j *JWT) Match {
	m.verifier = j
	return m
}

// Matches reports whether r satisfies every condition.
func (m *Match) Matches(r *http.Request) bool {
	req := NewRequest(r)
	return m.MatchesRequest(&req)
}

// MatchesRequest reports whether req satisfies every condition. Header names are canonical
// already (the rendered format guarantees it).
func (m *Match) MatchesRequest(req *Request) bool {
	if m.pathPrefix != "" && !strings.HasPrefix(req.Path, m.pathPrefix) {
		return false
	}
	if len(m.methods) > 0 {
		found := false
		for _, meth := range m.methods {
			if meth == req.Method {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	for _, h := range m.headers {
		v, ok := req.Header.Get(h.Name)
		switch {
		case h.Absent:
			if ok {
				return false
			}
		case len(h.NotIn) > 0:
			if ok && slices.Contains(h.NotIn, v) {
				return false
			}
		case !ok || v != h.Value:
			return false
		}
	}
	if len(m.routes) > 0 && !slices.ContainsFunc(m.routes, func(r policy.RouteMatch) bool { return routeMatches(&r, req) }) {
		return false
	}
	// Last: the only condition that may verify a token.
	return m.jwt == "" || (m.jwt == policy.JWTVerified) == (req.Identity(m.verifier) != nil)
}

// routeMatches reports whether req meets every condition of one HTTPRoute match.
func routeMatches(r *policy.RouteMatch, req *Request) bool {
	switch {
	case r.PathExact != "" && req.Path != r.PathExact,
		r.PathPrefix != "" && !policy.PathHasPrefix(req.Path, r.PathPrefix),
		r.Method != "" && req.Method != r.Method:
		return false
	}
	for _, h := range r.Headers {
		if v, ok := req.Header.Get(h.Name); !ok || v != h.Value {
			return false
		}
	}
	return true
}

// Header is what rules read of a request's header fields, whatever HTTP library parsed them.
// Names passed to it are in canonical form (X-Api-Key); an implementation finds a field
// whatever the case the client sent it in.
type Header interface {
	// Get returns the first value of the field name; ok is false when it is absent.
	Get(name string) (v string, ok bool)
	// Values returns every value of the field name in the order received, one element per
	// field line; nil when absent. Only trusted-proxy walks call it, so it may allocate.
	Values(name string) []string
}

// HTTPHeader is an http.Header as a Header, for names already canonical.
type HTTPHeader map[string][]string

// Get implements Header.
func (h HTTPHeader) Get(name string) (string, bool) {
	if vs := h[name]; len(vs) > 0 {
		return vs[0], true
	}
	return "", false
}

// Values implements Header.
func (h HTTPHeader) Values(name string) []string { return h[name] }

// Request is the view of one request that matching and keys read. Whichever server parsed
// the request fills it (net/http's for h2c, fasthttp's for HTTP/1.1) without copying its
// bytes, so it is valid only while that request is being served. The peer address is parsed
// once (SetPeer, SetRemoteAddr); without one, the clientIP key part is RemoteAddr verbatim.
type Request struct {
	Method string
	// Path is the percent-decoded path, as url.URL.Path.
	Path string
	// RawQuery is the query without '?', undecoded.
	RawQuery string
	Header   Header
	// RemoteAddr is the peer as text, the key part when it is not an IP address.
	RemoteAddr string
	peer       netip.Addr
	peerOK     bool
	// identity is the request's token verified by jwtFor (nil: it has none, or it failed),
	// when identified is set, so that the rules of one policy verify it once.
	jwtFor     *JWT
	identity   *Identity
	identified bool
}

// Identity returns the request's token verified by j, nil when it carries none, its token
// fails, or j is nil. The outcome is remembered for the next call with the same j.
func (r *Request) Identity(j *JWT) *Identity {
	if r.identified && r.jwtFor == j {
		return r.identity
	}
	if j == nil {
		return nil
	}
	r.jwtFor, r.identity, r.identified = j, j.Identify(r.Header), true
	return r.identity
}

// NewRequest wraps r.
func NewRequest(r *http.Request) Request {
	req := Request{Method: r.Method, Path: r.URL.Path, RawQuery: r.URL.RawQuery, Header: HTTPHeader(r.Header)}
	req.SetRemoteAddr(r.RemoteAddr)
	return req
}

// SetRemoteAddr sets the peer from text ("ip:port", "[ipv6]:port"), as http.Request.RemoteAddr.
func (r *Request) SetRemoteAddr(s string) {
	r.RemoteAddr = s
	r.peer, r.peerOK = ParseRemoteAddr(s)
}

// SetPeer sets the peer's IP address.
func (r *Request) SetPeer(a netip.Addr) {
	r.peer, r.peerOK = a.Unmap().WithZone(""), a.IsValid()
}

// Key builds the limiter keys of one rule. It is immutable and safe for concurrent use.
//
// A key is the policy and rule names and each part's value, every one written as
// <decimal length>:<bytes>, so no two different inputs give the same key whatever bytes they
// contain. A value longer than MaxPartLen is written as #<32 hex digits of its SHA-256>
// instead (the '#' cannot start a length). When a header or query parameter the key needs is
// absent or empty, the key is the rule's one shared "missing" key, <prefix>?, which is limited
// like any other: leaving a header out is not a way around the limit. When the key reads a
// token's claim (policy.SourceJWTClaim) and the request has no token its policy's verifier
// (WithJWT) verifies, the key is the rule's one shared "unverified" key, <prefix>!, whatever
// the token claims: no caller picks another's counter by forging a token.
type Key struct {
	prefix  string
	parts   []policy.KeyPart
	trusted Trusted
	// jwt verifies the token of the jwtClaim parts (claims); nil leaves every request
	// unverified.
	jwt    *JWT
	claims bool
}

// CompileKey compiles the key of rule in policyName, with the policy's trusted proxies.
func CompileKey(policyName, rule string, parts []policy.KeyPart, trusted Trusted) Key {
	var b []byte
	b = appendPart(b, policyName)
	b = appendPart(b, rule)
	claims := slices.ContainsFunc(parts, func(p policy.KeyPart) bool { return p.Source == policy.SourceJWTClaim })
	return Key{prefix: string(b), parts: parts, trusted: trusted, claims: claims}
}

// WithJWT returns k reading its jwtClaim parts from tokens j verifies, its policy's verifier.
func (k Key) WithJWT(j *JWT) Key {
	k.jwt = j
	return k
}

// Missing is the rule's shared key for requests lacking a part.
func (k *Key) Missing() string { return k.prefix + "?" }

// Unverified is the rule's shared key for requests whose token does not verify (or that carry
// none), when the key reads a claim.
func (k *Key) Unverified() string { return k.prefix + "!" }

// Append appends the key of req to dst and returns it.
func (k *Key) Append(dst []byte, req *Request) []byte {
	start := len(dst)
	var id *Identity
	if k.claims {
		if id = req.Identity(k.jwt); id == nil {
			return append(dst, k.Unverified()...)
		}
	}
	dst = append(dst, k.prefix...)
	for _, p := range k.parts {
		switch p.Source {
		case policy.SourceJWTClaim:
			v, ok := id.Claim(p.Name)
			if !ok || v == "" {
				return append(dst[:start], k.Missing()...)
			}
			dst = appendPart(dst, v)
		case policy.SourceClientIP:
			if !req.peerOK {
				dst = appendPart(dst, req.RemoteAddr)
				continue
			}
			a := req.peer
			if !k.trusted.Empty() && k.trusted.Contains(a) {
				a = ClientIP(a, req.Header.Values("X-Forwarded-For"), k.trusted)
			}
			dst = appendAddr(dst, a)
		case policy.SourceHeader:
			v, _ := req.Header.Get(p.Name)
			if v == "" {
				return append(dst[:start], k.Missing()...)
			}
			dst = appendPart(dst, v)
		case policy.SourceQuery:
			v, ok := QueryValue(req.RawQuery, p.Name)
			if !ok || v == "" {
				return append(dst[:start], k.Missing()...)
			}
			dst = appendPart(dst, v)
		case policy.SourcePath:
			dst = appendPart(dst, req.Path)
		case policy.SourceMethod:
			dst = appendPart(dst, req.Method)
		}
	}
	return dst
}

// AppendDescriptor appends the key of a descriptor rule to dst, its descriptor parts
// (policy.SourceDescriptor) read with value, which returns the value of the descriptor's
// entry of that key. Other sources add nothing: a descriptor rule has none. An empty value
// gives the rule's shared Missing key, as a missing header does.
func (k *Key) AppendDescriptor(dst []byte, value func(key string) string) []byte {
	start := len(dst)
	dst = append(dst, k.prefix...)
	for _, p := range k.parts {
		if p.Source != policy.SourceDescriptor {
			continue
		}
		v := value(p.Name)
		if v == "" {
			return append(dst[:start], k.Missing()...)
		}
		dst = appendPart(dst, v)
	}
	return dst
}

// Parts is how many values the key is built from, one per key part.
func (k *Key) Parts() int { return len(k.parts) }

// FromValues returns the key a request carrying these values gets, one per key part in order
// (a client address, a header's or query parameter's value, a path, a method): the request is
// built and keyed by Append, the sidecar's own code, so the two cannot disagree. A client
// address that is not an IP address is keyed verbatim, like a peer that is not one; an empty
// header or query value gives the rule's Missing key. A claim's value (policy.SourceJWTClaim)
// is taken as a verified token's.
func (k *Key) FromValues(values []string) (string, error) {
	if len(values) != len(k.parts) {
		return "", fmt.Errorf("the key has %d parts, %d values given", len(k.parts), len(values))
	}
	req := Request{Header: HTTPHeader{}}
	query := url.Values{}
	if k.claims {
		// A token verified by the key's verifier, carrying the values as its claims.
		req.jwtFor, req.identity, req.identified = k.jwt, &Identity{claims: map[string]any{}}, true
	}
	for i, p := range k.parts {
		v := values[i] //nolint:gosec // len(values) == len(k.parts), checked above
		switch p.Source {
		case policy.SourceClientIP:
			if a, err := netip.ParseAddr(v); err == nil {
				req.SetPeer(a)
			} else {
				req.RemoteAddr = v
			}
		case policy.SourceHeader:
			req.Header.(HTTPHeader)[p.Name] = []string{v}
		case policy.SourceQuery:
			query.Set(p.Name, v)
		case policy.SourcePath:
			req.Path = v
		case policy.SourceMethod:
			req.Method = v
		case policy.SourceJWTClaim:
			req.identity.claims[p.Name] = v
		}
	}
	req.RawQuery = query.Encode()
	return string(k.Append(nil, &req)), nil
}

// appendAddr appends a client address as a key part: its two-digit length, ':', its text.
func appendAddr(dst []byte, a netip.Addr) []byte {
	n := len(dst)
	dst = append(dst, "00:"...) // an address is at most 39 bytes (IPv6)
	dst = a.AppendTo(dst)
	l := len(dst) - n - 3
	dst[n], dst[n+1] = byte('0'+l/10), byte('0'+l%10)
	return dst
}

// PartOf returns part i of key, a key of this rule that Append or AppendDescriptor wrote, as
// it is written there (see Key); ok is false for the rule's Missing key, which has no parts,
// and for a key that is not the rule's. It does not allocate: the part is a substring of key.
func (k *Key) PartOf(key string, i int) (part string, ok bool) {
	s, found := strings.CutPrefix(key, k.prefix)
	if !found || i < 0 || i >= len(k.parts) || s == "?" {
		return "", false
	}
	for j := 0; ; j++ {
		n := 0
		if s != "" && s[0] == '#' {
			n = 1 + 32 // '#' and the hex of 16 bytes of SHA-256
		} else {
			colon := strings.IndexByte(s, ':')
			if colon <= 0 {
				return "", false
			}
			l, err := strconv.Atoi(s[:colon])
			if err != nil || l < 0 {
				return "", false
			}
			n = colon + 1 + l
		}
		if n > len(s) {
			return "", false
		}
		if j == i {
			return s[:n], true
		}
		s = s[n:]
	}
}

// EncodePart returns value v of part i as Append writes it into a key (PartOf returns it from
// a request's key): a client address in its canonical text (an IPv4-mapped IPv6 address as
// IPv4), any other value as it is, hashed when longer than MaxPartLen.
func (k *Key) EncodePart(i int, v string) string {
	if k.parts[i].Source == policy.SourceClientIP {
		if a, err := netip.ParseAddr(v); err == nil {
			return string(appendAddr(nil, a.Unmap().WithZone("")))
		}
	}
	return string(appendPart(nil, v))
}

func appendPart(dst []byte, v string) []byte {
	if len(v) > MaxPartLen {
		sum := sha256.Sum256([]byte(v))
		dst = append(dst, '#')
		return hex.AppendEncode(dst, sum[:16])
	}
	dst = strconv.AppendInt(dst, int64(len(v)), 10)
	dst = append(dst, ':')
	return append(dst, v...)
}

// QueryValue returns the first value of query parameter name in a raw query string, decoded
// as url.ParseQuery would, without building the whole map. ok is false when the parameter is
// absent or the query does not decode.
func QueryValue(raw, name string) (string, bool) {
	for raw != "" {
		var pair string
		pair, raw, _ = strings.Cut(raw, "&")
		if pair == "" {
			continue
		}
		k, v, _ := strings.Cut(pair, "=")
		if strings.ContainsAny(k, "%+") {
			var err error
			if k, err = url.QueryUnescape(k); err != nil {
				continue
			}
		}
		if k != name {
			continue
		}
		if strings.ContainsAny(v, "%+") {
			dv, err := url.QueryUnescape(v)
			if err != nil {
				return "", false
			}
			return dv, true
		}
		return v, true
	}
	return "", false
}

// ParseCost parses a cost header value: a positive decimal integer no larger than capacity,
// with optional surrounding whitespace and nothing else (no sign, no exponent, no second
// value). ok is false for anything else; the caller then uses the rule's cost.
func ParseCost(v string, capacity int64) (int64, bool) {
	v = strings.Trim(v, " \t")
	if v == "" || len(v) > 19 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
		if n > capacity {
			return 0, false
		}
	}
	if n < 1 {
		return 0, false
	}
	return n, true
}
