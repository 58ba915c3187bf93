package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"sync"
	"time"
	"unsafe"

	"github.com/valyala/fasthttp"

	"github.com/sluice-dev/sluice/internal/dataplane/keys"
)

// This file is the HTTP/1.x request path on fasthttp: request view, hop-by-hop and
// X-Forwarded-For handling, forwarding through a HostClient, and Upgrade tunnels.

// upstreamDialTimeout bounds a connection attempt to the application.
const upstreamDialTimeout = 5 * time.Second

// newHostClient returns the HTTP/1.1 client to the upstream at addr: a keep-alive pool sized
// for a busy pod, header names and paths passed as received, response bodies streamed.
func newHostClient(addr string, isTLS bool) *fasthttp.HostClient {
	c := &fasthttp.HostClient{
		Addr:                          addr,
		IsTLS:                         isTLS,
		MaxConns:                      1024,
		MaxIdleConnDuration:           90 * time.Second,
		NoDefaultUserAgentHeader:      true,
		DisableHeaderNamesNormalizing: true,
		DisablePathNormalizing:        true,
		StreamResponseBody:            true,
		ReadBufferSize:                16 << 10, // the largest response head
		WriteBufferSize:               16 << 10,
		// Retried once, as net/http's Transport does: an idempotent request without a body
		// whose pooled connection the application had closed.
		RetryIfErr: func(req *fasthttp.Request, attempts int, err error) (bool, bool) {
			return false, attempts < 2 && !req.IsBodyStream() && idempotent(&req.Header) &&
				(errors.Is(err, fasthttp.ErrConnectionClosed) || errors.Is(err, io.EOF))
		},
		Dial: func(addr string) (net.Conn, error) {
			return fasthttp.DialTimeout(addr, upstreamDialTimeout)
		},
	}
	if isTLS {
		c.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	return c
}

func idempotent(h *fasthttp.RequestHeader) bool {
	return h.IsGet() || h.IsHead() || h.IsOptions() || h.IsPut() || h.IsDelete() || h.IsTrace()
}

// s2b is s as bytes without copying, for fasthttp calls that only read (and copy) them.
func s2b(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) } //nolint:gosec // read-only views of constants, copied by fasthttp

// b2s is b as a string without copying; valid while b is unchanged (the request's lifetime).
func b2s(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) } //nolint:gosec // the request's bytes, read while it is served

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

func badRequest(ctx *fasthttp.RequestCtx, msg string) {
	ctx.SetConnectionClose()
	ctx.Response.Header.SetContentType("text/plain; charset=utf-8")
	ctx.SetStatusCode(http.StatusBadRequest)
	ctx.SetBodyString(msg)
}

// admitted is a request that passed admit: its header scan, peer and decision.
type admitted struct {
	scan requestScan
	peer netip.Addr // invalid when the peer is not an IP address
	d    decision
	// up, br and bw are the upstream connection an Expect: 100-continue request's head
	// was sent on (nil when the body goes through the HostClient as usual).
	up net.Conn
	br *bufio.Reader
	bw *bufio.Writer
}

// admittedKey is the user value under which expect leaves its admitted for Serve.
const admittedKey = "sluice.admitted"

// Serve is the fasthttp request path: the HTTP/1.x twin of ServeHTTP.
func (h *Handler) Serve(ctx *fasthttp.RequestCtx) {
	defer served(ctx.Conn())
	if a, ok := ctx.UserValue(admittedKey).(*admitted); ok {
		// Admitted by expect before its body was read.
		ctx.RemoveUserValue(admittedKey)
		if a.up != nil {
			h.forwardExpect(ctx, a)
			return
		}
		h.pass(ctx, a)
		return
	}
	var a admitted
	if !h.admit(ctx, &a) {
		return
	}
	h.pass(ctx, &a)
}

func (h *Handler) pass(ctx *fasthttp.RequestCtx, a *admitted) {
	if a.scan.isUpgrade() {
		h.tunnel(ctx, &a.scan, a.peer, &a.d)
		return
	}
	h.forward(ctx, &a.scan, a.peer, &a.d)
}

// admit validates and decides the request of ctx; false when it is answered already (400,
// a denial, 503, or the client left while it was queued).
func (h *Handler) admit(ctx *fasthttp.RequestCtx, a *admitted) bool {
	req := &ctx.Request
	s := &a.scan
	if !s.scan(&req.Header) {
		badRequest(ctx, "400 Bad Request: conflicting or repeated message framing, or an invalid field name\n")
		return false
	}
	path := req.URI().PathOriginal()
	if !validPath(path) {
		badRequest(ctx, "400 Bad Request: invalid escape in path\n")
		return false
	}
	if cl := req.Header.ContentLength(); s.isUpgrade() || cl > 0 || cl == -1 {
		// The read-header timeout ran from the request's first byte; a body or a tunnel
		// may take as long as it takes, as with net/http's ReadHeaderTimeout.
		_ = ctx.Conn().SetReadDeadline(time.Time{})
	}
	peer, peerOK := peerAddr(ctx)
	if peerOK {
		a.peer = peer
	}
	if cfg := h.opts.Config(); len(cfg.Policies) > 0 {
		view := keys.Request{
			Method:   b2s(req.Header.Method()),
			Path:     unescapePath(path),
			RawQuery: b2s(req.URI().QueryString()),
			Header:   (*fastHeader)(&req.Header),
		}
		if peerOK {
			view.SetPeer(peer)
		} else {
			view.SetRemoteAddr(ctx.RemoteAddr().String())
		}
		a.d = h.decide(context.Background(), cfg, &view)
		switch a.d.action {
		case deny:
			writeDeniedFast(ctx, a.d.show, a.d.res, a.d.now)
			return false
		case refuse:
			writeUnavailableFast(ctx)
			return false
		case abandon:
			ctx.SetConnectionClose()
			return false
		}
		if a.d.delay > 0 && !h.queueFast(ctx, a.d.delay) {
			ctx.SetConnectionClose()
			return false
		}
	}
	return true
}

// expectContinueTimeout is how long an Expect: 100-continue request waits for the upstream's
// 100 (or final answer) before its body is sent anyway, as NewTransport's.
const expectContinueTimeout = time.Second

// expect is fasthttp's ExpectHandler: a request with Expect: 100-continue is admitted, then
// its head goes to the upstream, whose answer decides: 100 Continue (or no answer within
// expectContinueTimeout) tells the client to send the body, which Serve then forwards on the
// same connection; a final answer is the client's, and its body is never read. A denial
// likewise comes without a 100.
func (h *Handler) expect(ctx *fasthttp.RequestCtx) (code int) {
	a := &admitted{}
	if !h.admit(ctx, a) {
		return ctx.Response.StatusCode()
	}
	defer func() {
		if code != fasthttp.StatusContinue { // a final answer: the request is done
			h.settle(&a.d, code)
		}
	}()
	if a.scan.isUpgrade() {
		ctx.SetUserValue(admittedKey, a)
		return fasthttp.StatusContinue
	}
	up, err := h.dialUpstream()
	if err != nil {
		h.opts.Metrics.UpstreamErrors.Inc()
		ctx.SetStatusCode(http.StatusBadGateway)
		return http.StatusBadGateway
	}
	req := &ctx.Request
	a.scan.prepare(&req.Header, a.peer, false)
	req.Header.Set("Expect", "100-continue")
	req.Header.ResetConnectionClose()
	req.Header.SetConnectionClose() // this connection serves this request only
	if !req.Header.IsHTTP11() {
		req.Header.SetProtocol("HTTP/1.1")
	}
	a.up, a.br, a.bw = up, bufio.NewReader(up), bufio.NewWriterSize(up, 32<<10)
	if err := req.Header.Write(a.bw); err != nil || a.bw.Flush() != nil {
		_ = up.Close()
		h.opts.Metrics.UpstreamErrors.Inc()
		ctx.SetStatusCode(http.StatusBadGateway)
		return http.StatusBadGateway
	}
	_ = up.SetReadDeadline(time.Now().Add(expectContinueTimeout))
	resp := &ctx.Response
	resp.Header.DisableNormalizing()
	for {
		if err := resp.Header.Read(a.br); err != nil {
			var ne net.Error
			if errors.Is(err, fasthttp.ErrTimeout) || (errors.As(err, &ne) && ne.Timeout()) {
				break // no word from the upstream: send the body anyway
			}
			_ = up.Close()
			h.opts.Metrics.UpstreamErrors.Inc()
			resp.Reset()
			ctx.SetStatusCode(http.StatusBadGateway)
			return http.StatusBadGateway
		}
		code := resp.StatusCode()
		if code == http.StatusContinue {
			break
		}
		if code > 100 && code < 200 {
			continue // 102, 103: informational, not an answer
		}
		// A final answer before the body: the client's, its body unread.
		_ = up.SetReadDeadline(time.Time{})
		err := resp.ReadBody(a.br, 1<<20)
		_ = up.Close()
		if err != nil {
			h.opts.Metrics.UpstreamErrors.Inc()
			resp.Reset()
			ctx.SetStatusCode(http.StatusBadGateway)
			return http.StatusBadGateway
		}
		if len(a.d.cost) > 0 {
			h.settleWhole(&a.d, &resp.Header, resp.Body())
		}
		stripResponse(&resp.Header, false)
		if a.d.show != nil {
			setFastHeaders(&resp.Header, a.d.show, a.d.res)
		}
		return code
	}
	_ = up.SetReadDeadline(time.Time{})
	resp.Reset()
	ctx.SetUserValue(admittedKey, a)
	return fasthttp.StatusContinue
}

// forwardExpect sends the body of a request whose head expect sent, and makes the upstream's
// final answer ctx's, body streamed.
func (h *Handler) forwardExpect(ctx *fasthttp.RequestCtx, a *admitted) {
	defer h.settleFast(ctx, &a.d)
	req := &ctx.Request
	var err error
	if body := req.BodyStream(); body != nil {
		if cl := req.Header.ContentLength(); cl >= 0 {
			_, err = io.CopyN(a.bw, body, int64(cl))
		} else {
			cw := httputil.NewChunkedWriter(a.bw)
			if _, err = io.Copy(cw, body); err == nil {
				err = cw.Close()
			}
			if err == nil {
				_, err = a.bw.WriteString("\r\n") // no trailers
			}
		}
	}
	if err == nil {
		err = a.bw.Flush()
	}
	up := &upstreamResponse{conn: a.up}
	r := &up.resp
	r.StreamBody = true
	r.Header.DisableNormalizing()
	r.SkipBody = req.Header.IsHead()
	if err == nil {
		err = r.Read(a.br) // skips a late 100 Continue
	}
	if err != nil {
		_ = a.up.Close()
		h.opts.Metrics.UpstreamErrors.Inc()
		ctx.SetStatusCode(http.StatusBadGateway)
		return
	}
	resp := &ctx.Response
	r.Header.CopyTo(&resp.Header)
	stream := r.BodyStream()
	var cost *costScan // a streamed body's; a whole one is settled by settleWhole below
	if len(a.d.cost) > 0 && stream != nil {
		cost = newCostScan(a.d.cost)
		a.d.cost = nil
		cost.head(fastHeaderGet(&r.Header))
	}
	stripResponse(&resp.Header, false)
	if a.d.show != nil {
		setFastHeaders(&resp.Header, a.d.show, a.d.res)
	}
	if cost != nil && !cost.needBody {
		h.settleCost(cost.charges, cost)
		cost = nil
	}
	if stream != nil {
		up.body = stream
		if cost != nil {
			up.cost = &costBody{h: h, scan: cost, r: stream, left: -1}
			if cl := r.Header.ContentLength(); cl >= 0 {
				up.cost.left = int64(cl)
			}
			up.body = up.cost
		}
		n := r.Header.ContentLength()
		if n < 0 {
			n = -1
		}
		resp.SetBodyStream(up, n)
	} else {
		if len(a.d.cost) > 0 {
			h.settleWhole(&a.d, &r.Header, r.Body())
		}
		resp.SetBody(r.Body())
		_ = up.Close()
	}
}

// upstreamResponse is a response read on a connection of its own, closed with its body.
type upstreamResponse struct {
	resp fasthttp.Response
	body io.Reader
	conn net.Conn
	// cost, when set, is body: the stream watched for responseCost.
	cost *costBody
}

func (u *upstreamResponse) Read(p []byte) (int, error) { return u.body.Read(p) }

func (u *upstreamResponse) Close() error {
	if u.cost != nil {
		u.cost.settle(false)
	}
	_ = u.resp.CloseBodyStream()
	return u.conn.Close()
}

// forward sends the request to the upstream and makes its response ctx's, body streamed.
func (h *Handler) forward(ctx *fasthttp.RequestCtx, s *requestScan, peer netip.Addr, d *decision) {
	defer h.settleFast(ctx, d)
	req := &ctx.Request
	clientClose := req.Header.ConnectionClose()
	s.prepare(&req.Header, peer, false)
	req.Header.ResetConnectionClose()
	if !req.Header.IsHTTP11() {
		req.Header.SetProtocol("HTTP/1.1") // keep the upstream connection alive
	}
	req.UseHostHeader = true
	var body *clientBody
	if req.IsBodyStream() {
		body = clientBodies.Get().(*clientBody)
		body.r = req.BodyStream()
		req.SetBodyStream(body, req.Header.ContentLength())
		defer body.release()
	}
	resp := &ctx.Response
	up := resp
	if len(d.cost) > 0 && needsBody(d.cost) {
		// The body is watched on its way through: it comes into a response of its own,
		// whose stream resp's wraps (SetBodyStream would close resp's own).
		up = fasthttp.AcquireResponse()
		up.Header.DisableNormalizing()
	}
	if err := h.fast.Do(req, up); err != nil {
		if up != resp {
			fasthttp.ReleaseResponse(up)
		}
		resp.Reset()
		if body != nil && body.err != nil {
			// The client's body broke off or is malformed (a bad chunk): its fault, and
			// the upstream saw at most an unterminated body it discards.
			badRequest(ctx, "400 Bad Request: malformed or truncated body\n")
			return
		}
		h.opts.Log.Debug("Upstream request failed", "error", err)
		h.opts.Metrics.UpstreamErrors.Inc()
		ctx.SetStatusCode(http.StatusBadGateway)
		return
	}
	switch {
	case up != resp:
		h.watchFast(resp, up, d)
	case len(d.cost) > 0: // header sources only: the head tells
		h.settleWhole(d, &resp.Header, nil)
	}
	stripResponse(&resp.Header, false)
	if d.show != nil {
		setFastHeaders(&resp.Header, d.show, d.res)
	}
	if clientClose {
		resp.SetConnectionClose()
	}
}

// settleFast makes d's late charges for the status ctx answers with (the upstream's, or the
// sidecar's 502 or 400), once the response head is known: countWhen needs no more.
func (h *Handler) settleFast(ctx *fasthttp.RequestCtx, d *decision) {
	if len(d.late) > 0 || len(d.cost) > 0 {
		h.settle(d, ctx.Response.StatusCode())
	}
}

// clientBody is a request's body stream that remembers whether reading it failed.
type clientBody struct {
	r   io.Reader
	err error
}

var clientBodies = sync.Pool{New: func() any { return new(clientBody) }}

func (b *clientBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil && err != io.EOF {
		b.err = err
	}
	return n, err
}

func (b *clientBody) release() {
	*b = clientBody{}
	clientBodies.Put(b)
}

// tunnel forwards an Upgrade request on its own upstream connection; when the upstream
// switches protocols, the client's connection is hijacked and bytes are copied both ways
// until either side closes.
func (h *Handler) tunnel(ctx *fasthttp.RequestCtx, s *requestScan, peer netip.Addr, d *decision) {
	defer h.settleFast(ctx, d)
	req := &ctx.Request
	s.prepare(&req.Header, peer, true)
	req.UseHostHeader = true
	up, err := h.dialUpstream()
	if err != nil {
		h.opts.Metrics.UpstreamErrors.Inc()
		ctx.SetStatusCode(http.StatusBadGateway)
		return
	}
	bw := bufio.NewWriter(up)
	if err := req.Write(bw); err != nil || bw.Flush() != nil {
		_ = up.Close()
		h.opts.Metrics.UpstreamErrors.Inc()
		ctx.SetStatusCode(http.StatusBadGateway)
		return
	}
	br := bufio.NewReader(up)
	resp := &ctx.Response
	resp.Header.DisableNormalizing()
	if err := resp.Header.Read(br); err != nil {
		_ = up.Close()
		h.opts.Metrics.UpstreamErrors.Inc()
		resp.Reset()
		ctx.SetStatusCode(http.StatusBadGateway)
		return
	}
	if resp.StatusCode() != http.StatusSwitchingProtocols {
		// Refused: an ordinary response, read whole (refusals are short) on a connection
		// used once.
		err := resp.ReadBody(br, 1<<20)
		_ = up.Close()
		if err != nil {
			h.opts.Metrics.UpstreamErrors.Inc()
			resp.Reset()
			ctx.SetStatusCode(http.StatusBadGateway)
			return
		}
		stripResponse(&resp.Header, false)
		if d.show != nil {
			setFastHeaders(&resp.Header, d.show, d.res)
		}
		return
	}
	stripResponse(&resp.Header, true)
	if d.show != nil {
		setFastHeaders(&resp.Header, d.show, d.res)
	}
	head := switchingHead(&resp.Header)
	resp.Reset()
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(c net.Conn) {
		defer func() { _ = up.Close() }()
		_ = c.SetDeadline(time.Time{})
		if _, err := c.Write(head); err != nil {
			return
		}
		done := make(chan struct{}, 2)
		go func() {
			_, _ = br.WriteTo(c) // upstream -> client, bytes already read first
			closeWrite(c)
			done <- struct{}{}
		}()
		go func() {
			_, _ = io.Copy(up, c) // client -> upstream
			closeWrite(up)
			done <- struct{}{}
		}()
		<-done
		<-done
	})
}

// switchingHead is the 101 response head as the client receives it.
func switchingHead(h *fasthttp.ResponseHeader) []byte {
	b := []byte("HTTP/1.1 101 Switching Protocols\r\n")
	for k, v := range h.All() {
		if equalFold(k, "content-length") || equalFold(k, "content-type") && len(v) == 0 {
			continue
		}
		b = append(b, k...)
		b = append(b, ": "...)
		b = append(b, v...)
		b = append(b, "\r\n"...)
	}
	return append(b, "\r\n"...)
}

// closeWrite half-closes c so that the other side sees EOF, or closes it.
func closeWrite(c net.Conn) {
	type closeWriter interface{ CloseWrite() error }
	if u, ok := c.(interface{ NetConn() net.Conn }); ok {
		c = u.NetConn()
	}
	if cw, ok := c.(closeWriter); ok {
		_ = cw.CloseWrite()
		return
	}
	_ = c.Close()
}

func (h *Handler) dialUpstream() (net.Conn, error) {
	d := net.Dialer{Timeout: upstreamDialTimeout}
	if h.upTLS {
		return (&tls.Dialer{NetDialer: &d, Config: &tls.Config{MinVersion: tls.VersionTLS12}}).Dial("tcp", h.upAddr)
	}
	return d.Dial("tcp", h.upAddr)
}

// queueFast waits out a queued request's delay, false when the client closed its connection
// meanwhile.
func (h *Handler) queueFast(ctx *fasthttp.RequestCtx, delay time.Duration) bool {
	gone := make(chan struct{})
	stop := watchClose(ctx.Conn(), gone)
	ok := h.queue(delay, gone)
	stop()
	return ok
}

func fmtSprintf(format string, args ...any) string { return fmt.Sprintf(format, args...) }
