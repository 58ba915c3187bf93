package engine

import (
	"context"
	"net"
	"net/http"
	"time"
)

// Serving is a front end to serve beside the admin endpoints (Engine.Serve).
type Serving struct {
	// Key names the front end's address in the "Serving" log line ("listen", "grpc"); Addr is
	// the address it listens on.
	Key, Addr string
	// Serve serves the front end on its listener until it fails or is shut down.
	Serve func(net.Listener) error
	// Ready answers /readyz: nil when the front end may take traffic.
	Ready func() error
	// Attrs are logged after the addresses in the "Serving" line.
	Attrs []any
}

// Serve listens at s.Addr and at the metrics address of the engine's flags, serves the front end
// there and the admin endpoints (/metrics, /healthz, /readyz with s.Ready, /debug/pprof/ when
// --pprof), and waits until ctx ends (nil) or either server fails (its error). It returns the
// admin server, for the caller to shut down while draining.
func (e *Engine) Serve(ctx context.Context, s Serving) (*http.Server, error) {
	f := e.flags
	admin := &http.Server{Addr: f.MetricsListen, Handler: e.metrics.AdminHandler(s.Ready, f.Pprof), ReadHeaderTimeout: 5 * time.Second}
	ln, err := net.Listen("tcp", s.Addr)
	if err != nil {
		return admin, err
	}
	aln, err := net.Listen("tcp", f.MetricsListen)
	if err != nil {
		_ = ln.Close()
		return admin, err
	}
	errc := make(chan error, 2)
	go func() { errc <- s.Serve(ln) }()
	go func() { errc <- admin.Serve(aln) }()
	e.log.Info("Serving", append([]any{s.Key, ln.Addr().String(), "metrics", aln.Addr().String()}, s.Attrs...)...)
	select {
	case err := <-errc:
		return admin, err
	case <-ctx.Done():
		return admin, nil
	}
}
