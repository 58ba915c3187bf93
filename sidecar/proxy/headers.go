package proxy

import (
	"bytes"
	"net"
	"net/netip"

	"github.com/valyala/fasthttp"
)

// This file is the fasthttp request path's header handling: the request header as a
// keys.Header, one scan of the raw header lines (framing, hop-by-hop fields, Upgrade, Expect),
// hop-by-hop stripping and X-Forwarded-For, and the checks on the request target.

// fastHeader is a fasthttp request header as a keys.Header. The server keeps header names as
// the client sent them, so a name not found as given (canonical) is looked up ignoring case.
type fastHeader fasthttp.RequestHeader

// Get implements keys.Header.
func (h *fastHeader) Get(name string) (string, bool) {
	rh := (*fasthttp.RequestHeader)(h)
	if v := rh.Peek(name); v != nil {
		return b2s(v), true
	}
	for k, v := range rh.AllInOrder() {
		if equalFold(k, name) {
			return b2s(v), true
		}
	}
	return "", false
}

// Values implements keys.Header.
func (h *fastHeader) Values(name string) []string {
	var out []string
	for k, v := range (*fasthttp.RequestHeader)(h).AllInOrder() {
		if equalFold(k, name) {
			out = append(out, b2s(v))
		}
	}
	return out
}

// equalFold reports whether b equals s ignoring ASCII case.
func equalFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := 0; i < len(b); i++ {
		c, d := b[i], s[i]
		if c == d {
			continue
		}
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if 'A' <= d && d <= 'Z' {
			d += 'a' - 'A'
		}
		if c != d {
			return false
		}
	}
	return true
}

// hasToken reports whether the comma-separated list v holds token (ASCII case ignored).
func hasToken(v []byte, token string) bool {
	for len(v) > 0 {
		var elem []byte
		if i := bytes.IndexByte(v, ','); i >= 0 {
			elem, v = v[:i], v[i+1:]
		} else {
			elem, v = v, nil
		}
		if equalFold(bytes.Trim(elem, " \t"), token) {
			return true
		}
	}
	return false
}

// maxStrip is the most hop-by-hop fields one request may carry; more is refused (400).
const maxStrip = 16

// requestScan is what one pass over a request's raw header lines finds: the framing fields
// fasthttp folds away (to refuse smuggling attempts), the hop-by-hop fields to remove, the
// X-Forwarded-For lines to extend, and whether it asks for an Upgrade.
type requestScan struct {
	contentLength, transferEncoding int
	connUpgrade, upgrade            bool
	n                               int
	strip                           [maxStrip][]byte // exact names as received
	connection                      [4][]byte        // Connection values, for the fields they name
	nconn                           int
	xff                             [4][]byte
	nxff                            int
	moreXFF                         bool
}

// scan reads h's raw lines; false means the request is malformed and must be refused.
func (s *requestScan) scan(h *fasthttp.RequestHeader) bool {
	for k, v := range h.AllInOrder() {
		if !isToken(k) {
			return false // "Bad Name: x": a field name is a token (RFC 9110 section 5.1)
		}
		switch len(k) {
		case 2:
			if equalFold(k, "te") {
				s.add(k)
			}
		case 7:
			// (Trailer is not stripped: fasthttp keeps it and writes it again with the trailers.)
			if equalFold(k, "upgrade") {
				s.upgrade = true
				s.add(k)
			}
		case 10:
			if equalFold(k, "connection") {
				if s.nconn == len(s.connection) {
					return false
				}
				s.connection[s.nconn] = v
				s.nconn++
				if hasToken(v, "upgrade") {
					s.connUpgrade = true
				}
				s.add(k)
			} else if equalFold(k, "keep-alive") {
				s.add(k)
			}
		case 14:
			if equalFold(k, "content-length") {
				s.contentLength++
			}
		case 15:
			if equalFold(k, "x-forwarded-for") {
				if s.nxff == len(s.xff) {
					s.moreXFF = true
				} else {
					s.xff[s.nxff] = v
					s.nxff++
				}
				s.add(k)
			}
		case 16:
			if equalFold(k, "proxy-connection") {
				s.add(k)
			}
		case 17:
			if equalFold(k, "transfer-encoding") {
				s.transferEncoding++
			}
		case 19:
			if equalFold(k, "proxy-authorization") {
				s.add(k)
			}
		case 6:
			if equalFold(k, "expect") {
				s.add(k) // answered here (100 Continue); the application sees a plain request
			}
		}
	}
	if s.n > maxStrip {
		return false
	}
	// RFC 9112 section 6.1: a request with both is a smuggling attempt at a proxy; refuse it
	// rather than guess which framing the application would pick.
	return s.contentLength <= 1 && s.transferEncoding <= 1 && (s.contentLength == 0 || s.transferEncoding == 0)
}

// tchar is RFC 9110's token characters.
var tchar = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = true, true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

func isToken(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if !tchar[c] {
			return false
		}
	}
	return true
}

func (s *requestScan) add(k []byte) {
	if s.n < maxStrip {
		s.strip[s.n] = k
	}
	s.n++
}

// isUpgrade reports whether the request asks to switch protocols (WebSocket, h2c, ...).
func (s *requestScan) isUpgrade() bool { return s.upgrade && s.connUpgrade }

// prepare turns the client's request into the upstream's: hop-by-hop fields (and those the
// Connection fields name) removed, keepUpgrade keeping Connection and Upgrade for a tunnel,
// and the peer appended to X-Forwarded-For as httputil.ReverseProxy does (one field, the
// earlier lines joined with ", ").
func (s *requestScan) prepare(h *fasthttp.RequestHeader, peer netip.Addr, keepUpgrade bool) {
	var xff []byte
	if peer.IsValid() {
		var buf [256]byte
		xff = buf[:0]
		for _, v := range s.xff[:s.nxff] {
			xff = append(xff, v...)
			xff = append(xff, ", "...)
		}
		if s.moreXFF {
			xff = xff[:0]
			for _, v := range (*fastHeader)(h).Values("X-Forwarded-For") {
				xff = append(xff, v...)
				xff = append(xff, ", "...)
			}
		}
		xff = peer.AppendTo(xff)
	}
	// The names listed in Connection are removed too; they need copies, as deleting shifts
	// the header's storage.
	var named [8][]byte
	nnamed := 0
	for _, v := range s.connection[:s.nconn] {
		for len(v) > 0 && nnamed < len(named) {
			var elem []byte
			if i := bytes.IndexByte(v, ','); i >= 0 {
				elem, v = v[:i], v[i+1:]
			} else {
				elem, v = v, nil
			}
			elem = bytes.Trim(elem, " \t")
			if len(elem) == 0 || equalFold(elem, "close") || equalFold(elem, "keep-alive") ||
				(keepUpgrade && equalFold(elem, "upgrade")) {
				continue
			}
			named[nnamed] = bytes.Clone(elem)
			nnamed++
		}
	}
	for _, k := range s.strip[:min(s.n, maxStrip)] {
		if keepUpgrade && (equalFold(k, "upgrade") || equalFold(k, "connection")) {
			continue
		}
		h.DelBytes(k)
	}
	for _, k := range named[:nnamed] {
		delFold(h, k)
	}
	if keepUpgrade {
		h.Set("Connection", "Upgrade")
	}
	if xff != nil {
		h.SetBytesV("X-Forwarded-For", xff)
	}
}

// delFold deletes every field named name, whatever its case.
func delFold(h *fasthttp.RequestHeader, name []byte) {
	for {
		var found []byte
		for k := range h.AllInOrder() {
			if bytes.EqualFold(k, name) {
				found = bytes.Clone(k)
				break
			}
		}
		if found == nil {
			return
		}
		if h.PeekBytes(found) == nil {
			return // a field fasthttp holds apart (Host, Content-Length): never hop-by-hop
		}
		h.DelBytes(found)
	}
}

// stripResponse removes the hop-by-hop fields of an upstream response (fasthttp frames the
// body to the client itself).
func stripResponse(h *fasthttp.ResponseHeader, keepUpgrade bool) {
	var del [maxStrip][]byte
	n := 0
	var named [8][]byte
	nnamed := 0
	for k, v := range h.All() {
		hop := false
		switch len(k) {
		case 10:
			if equalFold(k, "connection") {
				hop = !keepUpgrade
				for len(v) > 0 && nnamed < len(named) {
					var elem []byte
					if i := bytes.IndexByte(v, ','); i >= 0 {
						elem, v = v[:i], v[i+1:]
					} else {
						elem, v = v, nil
					}
					elem = bytes.Trim(elem, " \t")
					if len(elem) > 0 && !equalFold(elem, "close") && !equalFold(elem, "keep-alive") && (!keepUpgrade || !equalFold(elem, "upgrade")) {
						named[nnamed] = elem
						nnamed++
					}
				}
			} else {
				hop = equalFold(k, "keep-alive")
			}
		case 2:
			hop = equalFold(k, "te")
		case 7:
			hop = !keepUpgrade && equalFold(k, "upgrade")
		case 16:
			hop = equalFold(k, "proxy-connection")
		case 18:
			hop = equalFold(k, "proxy-authenticate")
		}
		if hop && n < len(del) {
			del[n] = k
			n++
		}
	}
	if n == 0 && nnamed == 0 {
		return
	}
	var names [maxStrip + 8]string
	m := 0
	for _, k := range del[:n] {
		names[m] = string(k)
		m++
	}
	for _, k := range named[:nnamed] {
		names[m] = string(k)
		m++
	}
	for _, k := range names[:m] {
		for k2 := range h.All() {
			if equalFold(k2, k) {
				k = string(k2)
				break
			}
		}
		h.Del(k)
	}
}

// peerAddr is the TCP peer of ctx.
func peerAddr(ctx *fasthttp.RequestCtx) (netip.Addr, bool) {
	if a, ok := ctx.RemoteAddr().(*net.TCPAddr); ok {
		ap := a.AddrPort()
		return ap.Addr().Unmap(), ap.Addr().IsValid()
	}
	return netip.Addr{}, false
}

// validPath reports whether every '%' in p starts a valid escape, as net/http's parser
// requires.
func validPath(p []byte) bool {
	for i := 0; i < len(p); i++ {
		if p[i] != '%' {
			continue
		}
		if i+2 >= len(p) || !isHex(p[i+1]) || !isHex(p[i+2]) {
			return false
		}
		i += 2
	}
	return true
}

func isHex(c byte) bool {
	return ('0' <= c && c <= '9') || ('a' <= c && c <= 'f') || ('A' <= c && c <= 'F')
}

// unescapePath decodes %XX escapes (validPath holds); '+' stays, as in url.URL.Path.
func unescapePath(p []byte) string {
	if bytes.IndexByte(p, '%') < 0 {
		return b2s(p)
	}
	out := make([]byte, 0, len(p))
	for i := 0; i < len(p); i++ {
		if p[i] == '%' {
			out = append(out, unhex(p[i+1])<<4|unhex(p[i+2]))
			i += 2
			continue
		}
		out = append(out, p[i])
	}
	return string(out)
}

func unhex(c byte) byte {
	switch {
	case c >= 'a':
		return c - 'a' + 10
	case c >= 'A':
		return c - 'A' + 10
	}
	return c - '0'
}
