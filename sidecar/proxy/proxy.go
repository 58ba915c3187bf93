// Package proxy is the sidecar's request path: it decides each request against the selected
// policies (Redis behind a circuit breaker, the local share as fallback) and either answers it
// (limited, or 503 under failureMode Closed) or passes it to the upstream, keeping connections
// alive and streaming bodies, upgrades included.
//
// HTTP/1.1 is served by fasthttp's server and forwarded by its HostClient, which cost a
// third of net/http's server and httputil.ReverseProxy per request; connections that open
// with the HTTP/2 preface (h2c) go to net/http's server and a ReverseProxy. Both fill the
// same keys.Request view and call the same decide (decide.go), which matches the request's
// rules and has the data plane's core (package decide) decide them.
package proxy

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
	"k8s.io/utils/clock"

	"github.com/sluice-dev/sluice/internal/dataplane/config"
	"github.com/sluice-dev/sluice/internal/dataplane/decide"
	"github.com/sluice-dev/sluice/internal/dataplane/keys"
	"github.com/sluice-dev/sluice/internal/dataplane/metrics"
)

// Options configures a Handler.
type Options struct {
	// Upstream is the application, e.g. http://127.0.0.1:8080.
	Upstream *url.URL
	// Config returns the configuration in use; called once per request.
	Config func() *config.Config
	// Decider decides each request's matched rules: Redis behind its breakers, the failure
	// modes, this pod's share, leases (engine.Open wires it); its stores take the late
	// charges (countWhen, responseCost).
	Decider *decide.Decider
	Metrics *metrics.Metrics
	Log     *slog.Logger
	// Transport overrides the h2c path's upstream transport (NewTransport by default).
	Transport http.RoundTripper
	// FastTransport overrides the HTTP/1.x path's (fasthttp's DefaultTransport by default).
	FastTransport fasthttp.RoundTripper
	// Clock gives each request its decision time (for the local store, explicit-time Redis
	// and reset_at), times a queued request's delay and the decision latency; nil means the
	// real clock.
	Clock clock.Clock
}

// Handler is the sidecar's request path: an http.Handler for h2c and a fasthttp handler
// (Serve, through a Server) for HTTP/1.x. Safe for concurrent use.
type Handler struct {
	opts    Options
	decider *decide.Decider
	proxy   *httputil.ReverseProxy
	// grpc is proxy over h2c to the upstream, for gRPC calls arriving over h2c.
	grpc *httputil.ReverseProxy
	// fast forwards HTTP/1.x requests; upAddr is its host:port, dialled for upgrades.
	fast   *fasthttp.HostClient
	upAddr string
	upTLS  bool
}

// NewTransport returns the upstream transport: HTTP/1.1 keep-alive with a pool sized for a
// busy pod, no transparent compression (the client's Accept-Encoding passes through as is).
func NewTransport() *http.Transport {
	return &http.Transport{
		Proxy: nil,
		DialContext: (&net.Dialer{
			Timeout:   5 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true,
		ForceAttemptHTTP2:     false,
		WriteBufferSize:       32 << 10,
		ReadBufferSize:        32 << 10,
	}
}

// bufferPool is httputil.ReverseProxy's body copy buffers, reused across requests.
type bufferPool struct{ p sync.Pool }

func (b *bufferPool) Get() []byte  { return *(b.p.Get().(*[]byte)) }
func (b *bufferPool) Put(v []byte) { b.p.Put(&v) }

func newBufferPool() *bufferPool {
	return &bufferPool{p: sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}}
}

// New returns a Handler.
func New(opts Options) *Handler {
	h := &Handler{}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Transport == nil {
		opts.Transport = NewTransport()
	}
	h.opts = opts
	h.decider = opts.Decider
	target := opts.Upstream
	h.upAddr, h.upTLS = HostPort(target), target.Scheme == "https"
	h.fast = newHostClient(h.upAddr, h.upTLS)
	h.fast.Transport = opts.FastTransport
	h.proxy = &httputil.ReverseProxy{
		// Director (not Rewrite) keeps the incoming Host and appends the peer to
		// X-Forwarded-For, as the application would see it without the sidecar in front.
		Director: func(r *http.Request) { //nolint:staticcheck // see above: Rewrite would replace Host and X-Forwarded-For
			r.URL.Scheme = target.Scheme
			r.URL.Host = target.Host
			if tb, ok := r.Context().Value(trailerKey{}).(*trailerBody); ok {
				if r.Trailer == nil {
					r.Trailer = http.Header{}
				}
				tb.dst = r.Trailer
			}
			if _, ok := r.Header["User-Agent"]; !ok {
				r.Header["User-Agent"] = []string{""} // do not let the transport add Go's
			}
		},
		Transport:  opts.Transport,
		BufferPool: newBufferPool(),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, _ error) {
			if r.Context().Err() != nil {
				return // the client went away; nobody reads an answer
			}
			opts.Metrics.UpstreamErrors.Inc()
			w.WriteHeader(http.StatusBadGateway)
		},
		ErrorLog: slog.NewLogLogger(opts.Log.Handler(), slog.LevelDebug),
	}
	grpc := *h.proxy
	if _, ok := opts.Transport.(*http.Transport); ok { // not a test's canned RoundTripper
		grpc.Transport = newH2CTransport()
	}
	h.grpc = &grpc
	return h
}

// newH2CTransport is NewTransport speaking HTTP/2 with prior knowledge over cleartext.
func newH2CTransport() *http.Transport {
	t := NewTransport()
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	t.Protocols = &p
	return t
}

// HostPort is u's host with the scheme's default port when it has none.
func HostPort(u *url.URL) string {
	if u.Port() != "" {
		return u.Host
	}
	if u.Scheme == "https" {
		return net.JoinHostPort(u.Hostname(), "443")
	}
	return net.JoinHostPort(u.Hostname(), "80")
}

// ServeHTTP is the net/http (h2c) request path: it decides r against every matching rule of
// every selected policy, then answers it or proxies it.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	cfg := h.opts.Config()
	var hw *headWriter // the adaptive limits' latency, when the policies have any
	if len(cfg.Policies) > 0 {
		req := keys.NewRequest(r)
		pl, ok := admitAdaptive(cfg, &req)
		if !ok {
			writeShed(w)
			return
		}
		if pl != nil {
			defer pl.Close()
			hw = &headWriter{ResponseWriter: w, p: pl, clock: h.opts.Clock}
			w = hw
		}
		d := h.decide(r.Context(), cfg, &req)
		// The handler returns once ReverseProxy has written the response, the client has
		// gone or the upstream failed: the request's Concurrency slots are then free.
		defer d.v.Hold.Release()
		switch d.action {
		case deny:
			writeDenied(w, &d.v)
			return
		case refuse:
			writeUnavailable(w)
			return
		case abandon:
			return
		}
		if d.delay > 0 && !h.queue(d.delay, r.Context().Done()) {
			return
		}
		if d.v.Show != nil {
			setHeaders(w.Header(), &d.v)
		}
		if len(d.late) > 0 || len(d.cost) > 0 {
			sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
			if len(d.cost) > 0 {
				sw.cost = newCostScan(d.cost)
				d.cost = nil
			}
			defer func() {
				if sw.cost != nil { // the response has ended: ReverseProxy has written it all
					sw.cost.end(sw.complete())
					h.settleCost(sw.cost.charges, sw.cost)
				}
				h.settle(&d, sw.status)
			}()
			w = sw
		}
	}
	if len(r.Trailer) > 0 && r.Body != nil && r.Body != http.NoBody {
		tb := &trailerBody{ReadCloser: r.Body, src: r.Trailer}
		r.Body = tb
		r = r.WithContext(context.WithValue(r.Context(), trailerKey{}, tb))
	}
	if hw != nil {
		hw.start = h.opts.Clock.Now()
	}
	if r.ProtoMajor == 2 && isGRPC(r.Header["Content-Type"]) {
		h.grpc.ServeHTTP(w, r)
		return
	}
	h.proxy.ServeHTTP(w, r)
}

// statusWriter remembers the status a response was written with, for countWhen's late
// charges, and has cost, when set, watch the response for responseCost (the head as it is
// written, the body as it passes); Unwrap lets http.ResponseController reach the writer's
// Flush and Hijack.
type statusWriter struct {
	http.ResponseWriter
	status      int
	wroteHeader bool
	cost        *costScan
	// written counts the body bytes, for complete.
	written int64
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wroteHeader && code >= 200 {
		w.status, w.wroteHeader = code, true
		w.scanHead()
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.wroteHeader = true
		w.scanHead()
	}
	n, err := w.ResponseWriter.Write(p)
	if w.cost != nil {
		w.cost.write(p[:n])
		w.written += int64(n)
	}
	return n, err
}

func (w *statusWriter) Flush() {
	if !w.wroteHeader {
		w.wroteHeader = true
		w.scanHead()
	}
	http.NewResponseController(w.ResponseWriter).Flush() //nolint:errcheck // as http.Flusher, no error to report
}

// complete reports whether the body written is whole: as long as its Content-Length, when
// the head declared one. (A stream the upstream broke off ends the proxying early, with what
// was written; an event stream's last event counts then only if complete.)
func (w *statusWriter) complete() bool {
	cl := w.Header().Get("Content-Length")
	if cl == "" {
		return true
	}
	n, err := strconv.ParseInt(cl, 10, 64)
	return err == nil && n == w.written
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// trailerBody carries a request's trailers to the outgoing request. httputil.ReverseProxy
// clones the request's Trailer map before the body is read, when the values are still
// unknown; the Director points dst at the clone's, and the values are copied at the body's end,
// before the transport writes them. (The Director finds it in the context: the proxy wraps
// the body it sees.)
type trailerBody struct {
	io.ReadCloser
	src, dst http.Header
}

type trailerKey struct{}

func (b *trailerBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && b.dst != nil {
		for k, v := range b.src {
			b.dst[k] = v
		}
	}
	return n, err
}

// isGRPC reports whether a request is a gRPC call, which needs HTTP/2 to the upstream too
// (trailers, full-duplex streams).
func isGRPC(ct []string) bool {
	return len(ct) > 0 && strings.HasPrefix(ct[0], "application/grpc")
}
