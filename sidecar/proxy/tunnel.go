package proxy

import (
	"bufio"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/valyala/fasthttp"
)

// tunnel forwards an Upgrade request on its own upstream connection; when the upstream
// switches protocols, the client's connection is hijacked and bytes are copied both ways
// until either side closes.
func (h *Handler) tunnel(ctx *fasthttp.RequestCtx, s *requestScan, peer netip.Addr, d *decision) {
	defer h.settleFast(ctx, d)
	req := &ctx.Request
	s.prepare(&req.Header, peer, true)
	req.UseHostHeader = true
	var start time.Time
	if d.adaptive != nil {
		start = h.opts.Clock.Now()
	}
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
	// The adaptive limits learn from the upgrade's answer too: a pod whose traffic is all
	// tunnels would otherwise never grow its limit past minLimit.
	if d.adaptive != nil {
		d.adaptive.observe(h.opts.Clock.Since(start))
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
		if d.v.Show != nil {
			setFastHeaders(&resp.Header, &d.v)
		}
		return
	}
	stripResponse(&resp.Header, true)
	if d.v.Show != nil {
		setFastHeaders(&resp.Header, &d.v)
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
