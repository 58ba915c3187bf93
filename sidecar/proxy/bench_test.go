package proxy_test

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/sidecar/config"
	st "github.com/sluice-dev/sluice/sidecar/internal/sidecartest"
	"github.com/sluice-dev/sluice/sidecar/metrics"
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
				Local:     limiter.NewMemoryStore(limiter.MemoryStoreOptions{}),
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
