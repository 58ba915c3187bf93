package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"
	"unsafe"

	"github.com/valyala/fasthttp"

	"github.com/sluice-dev/sluice/internal/dataplane/decide"
	"github.com/sluice-dev/sluice/internal/dataplane/keys"
)

// This file is the HTTP/1.x request path on fasthttp: Serve admits a request (header scan,
// decision) and forwards it through a HostClient. Its header handling is in headers.go,
// Expect: 100-continue in expect.go, Upgrade tunnels in tunnel.go.

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
		pl, ok := admitAdaptive(cfg, &view)
		if !ok {
			writeShedFast(ctx)
			return false
		}
		if pl != nil {
			// Given back once the response is finished, as a Concurrency slot is.
			ctx.SetUserValue(placesKey, pl)
		}
		a.d = h.decide(context.Background(), cfg, &view)
		a.d.adaptive = pl
		if hold := a.d.v.Hold; hold != nil {
			// fasthttp closes a request's user values once its response is finished: the
			// last body byte written, the client gone, an Upgrade tunnel closed (the
			// hijacked connection's handler returned).
			ctx.SetUserValue(holdKey, holdCloser{hold})
		}
		switch a.d.action {
		case deny:
			writeDeniedFast(ctx, &a.d.v)
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

// holdKey is the user value under which a request's Concurrency slots wait for its end.
const holdKey = "sluice.hold"

// holdCloser releases a request's Concurrency slots when fasthttp closes its user values.
type holdCloser struct{ h *decide.Holding }

func (c holdCloser) Close() error {
	c.h.Release()
	return nil
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
	var start time.Time
	if d.adaptive != nil {
		start = h.opts.Clock.Now()
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
	if d.adaptive != nil {
		d.adaptive.observe(h.opts.Clock.Since(start))
	}
	switch {
	case up != resp:
		h.watchFast(resp, up, d)
	case len(d.cost) > 0: // header sources only: the head tells
		h.settleWhole(d, &resp.Header, nil)
	}
	stripResponse(&resp.Header, false)
	if d.v.Show != nil {
		setFastHeaders(&resp.Header, &d.v)
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
