// Package upstream is the small application the demo and the end-to-end tests put behind the
// sidecar: it answers every request with 200 and a line naming itself, and counts what it saw,
// so a test can tell what the sidecar let through.
package upstream

import (
	"io"
	"net/http"
	"sync/atomic"
)

// Handler answers every request with 200 and "served by <name>\n".
type Handler struct {
	// Name identifies the instance in responses.
	Name   string
	served atomic.Int64
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	h.served.Add(1)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, "served by "+h.Name+"\n")
}

// Served is the number of requests answered so far.
func (h *Handler) Served() int64 { return h.served.Load() }
