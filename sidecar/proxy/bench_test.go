package proxy_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluice-dev/sluice/internal/dataplane/config"
	"github.com/sluice-dev/sluice/internal/dataplane/decide"
	"github.com/sluice-dev/sluice/internal/dataplane/metrics"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/policy"
	st "github.com/sluice-dev/sluice/internal/testutil/sidecartest"
	"github.com/sluice-dev/sluice/sidecar/proxy"
)

// cannedTransport answers every request with the same small response, so that a benchmark
// measures the sidecar and the reverse proxy rather than a network.
type cannedTransport struct{}

var cannedBody = []byte("ok\n")

func (cannedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{
		StatusCode:    200,
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        http.Header{"Content-Type": {"text/plain"}},
		Body:          io.NopCloser(bytes.NewReader(cannedBody)),
		ContentLength: int64(len(cannedBody)),
		Request:       r,
	}, nil
}

// benchWriter is a minimal http.ResponseWriter whose header map is cleared between requests.
type benchWriter struct {
	h    http.Header
	code int
}

func (w *benchWriter) Header() http.Header         { return w.h }
func (w *benchWriter) WriteHeader(code int)        { w.code = code }
func (w *benchWriter) Write(p []byte) (int, error) { return len(p), nil }

// BenchmarkServeHTTP is one request through the handler in local mode: no policy, and one
// TokenBucket rule keyed by client IP that never denies (as bench/proxy.sh's).
func BenchmarkServeHTTP(b *testing.B) {
	never := st.Rule("per-client", 100_000_000, time.Second)
	for _, bc := range []struct {
		name     string
		policies []policy.Policy
	}{
		{"nopolicy", nil},
		{"local", []policy.Policy{st.Policy("bench", []policy.Rule{never})}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			m := metrics.New()
			doc, err := policy.Parse(st.Doc(b, bc.policies...))
			if err != nil {
				b.Fatal(err)
			}
			cfg, err := config.Compile(doc, map[string]string{"app": "test"}, m)
			if err != nil {
				b.Fatal(err)
			}
			up, _ := url.Parse("http://127.0.0.1:1")
			h := proxy.New(proxy.Options{
				Upstream:  up,
				Config:    func() *config.Config { return cfg },
				Decider:   decide.New(decide.Options{Local: limiter.NewMemoryStore(limiter.MemoryStoreOptions{}), Metrics: m}),
				Metrics:   m,
				Log:       slog.New(slog.NewJSONHandler(io.Discard, nil)),
				Transport: cannedTransport{},
			})
			r, _ := http.NewRequest("GET", "http://sidecar/api/items?id=7", nil)
			r.RemoteAddr = "10.1.2.3:40000"
			r.Header.Set("User-Agent", "wrk")
			w := &benchWriter{h: http.Header{}}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				clear(w.h)
				w.code = 0
				h.ServeHTTP(w, r)
				if w.code != 200 {
					b.Fatalf("status %d", w.code)
				}
			}
		})
	}
}

// cannedFast is cannedTransport for the fasthttp path.
type cannedFast struct{}

func (cannedFast) RoundTrip(_ *fasthttp.HostClient, _ *fasthttp.Request, resp *fasthttp.Response) (bool, error) {
	resp.Header.SetContentType("text/plain")
	resp.SetBodyRaw(cannedBody)
	return false, nil
}

// BenchmarkServeFast is BenchmarkServeHTTP on the HTTP/1.x path: the request parsed from its
// bytes, decided, its headers rewritten for the upstream and the canned response's for the
// client. local-tenants is local with a table of 10,000 tenants on the client address, the
// request's among them: what a tenant's limit costs a request.
func BenchmarkServeFast(b *testing.B) {
	never := st.Rule("per-client", 100_000_000, time.Second)
	tenants := never
	tenants.Tenants = &policy.Tenants{}
	for i := range 10_000 {
		tenants.Tenants.Limits = append(tenants.Tenants.Limits, policy.TenantLimit{Value: fmt.Sprintf("10.1.%d.%d", i/256, i%256), Limit: 90_000_000 + int64(i%7), Burst: 90_000_000})
	}
	slices.SortFunc(tenants.Tenants.Limits, func(a, b policy.TenantLimit) int { return strings.Compare(a.Value, b.Value) })
	raw := []byte("GET /api/items?id=7 HTTP/1.1\r\nHost: sidecar\r\nUser-Agent: wrk\r\nAccept: */*\r\n\r\n")
	for _, bc := range []struct {
		name     string
		policies []policy.Policy
	}{
		{"nopolicy", nil},
		{"local", []policy.Policy{st.Policy("bench", []policy.Rule{never})}},
		{"local-tenants", []policy.Policy{st.Policy("bench", []policy.Rule{tenants})}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			m := metrics.New()
			doc, err := policy.Parse(st.Doc(b, bc.policies...))
			if err != nil {
				b.Fatal(err)
			}
			cfg, err := config.Compile(doc, map[string]string{"app": "test"}, m)
			if err != nil {
				b.Fatal(err)
			}
			up, _ := url.Parse("http://127.0.0.1:1")
			h := proxy.New(proxy.Options{
				Upstream:      up,
				Config:        func() *config.Config { return cfg },
				Decider:       decide.New(decide.Options{Local: limiter.NewMemoryStore(limiter.MemoryStoreOptions{}), Metrics: m}),
				Metrics:       m,
				Log:           slog.New(slog.NewJSONHandler(io.Discard, nil)),
				FastTransport: cannedFast{},
			})
			var ctx fasthttp.RequestCtx
			ctx.Init(&fasthttp.Request{}, &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 40000}, nil)
			rd := bytes.NewReader(raw)
			br := bufio.NewReader(rd)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				ctx.Request.Reset()
				ctx.Response.Reset()
				rd.Reset(raw)
				br.Reset(rd)
				ctx.Request.Header.DisableNormalizing()
				if err := ctx.Request.Read(br); err != nil {
					b.Fatal(err)
				}
				h.Serve(&ctx)
				if ctx.Response.StatusCode() != 200 {
					b.Fatalf("status %d", ctx.Response.StatusCode())
				}
			}
		})
	}
}
