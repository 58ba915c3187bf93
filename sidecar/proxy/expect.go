package proxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"time"

	"github.com/valyala/fasthttp"
)

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
		if a.d.v.Show != nil {
			setFastHeaders(&resp.Header, &a.d.v)
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
	if a.d.v.Show != nil {
		setFastHeaders(&resp.Header, &a.d.v)
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
