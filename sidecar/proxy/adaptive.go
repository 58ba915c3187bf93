package proxy

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
	"k8s.io/utils/clock"

	"github.com/sluice-dev/sluice/internal/dataplane/config"
	"github.com/sluice-dev/sluice/internal/dataplane/keys"
	"github.com/sluice-dev/sluice/internal/limiter"
)

// Adaptive protection of the pod (adaptive rules): before any other rule is decided, a request
// takes a place in the limit of every adaptive rule of the selected policies that matches it,
// or is shed with 503 and Retry-After: 1 (in mode Shadow the shed is only counted). Its places
// are given back when its response is finished, as a Concurrency slot is; the latency to the
// upstream response's head is what the limits learn from (a streamed response's length says
// nothing about the application's load).

// places are the adaptive limits a request holds a place in. Close gives them back, once.
type places struct {
	list []place
	once sync.Once
	// observed is set once the latency was recorded.
	observed bool
}

// place is a place held in an adaptive rule's limit, taken in generation gen of it.
type place struct {
	a   *config.Adaptive
	gen limiter.Generation
}

// admitAdaptive takes a place in the limit of each adaptive rule of cfg that matches req: nil,
// true when there is none; nil, false when an enforced one is full (the places already taken
// given back, the shed counted). A full Shadow rule counts the shed and takes no place.
func admitAdaptive(cfg *config.Config, req *keys.Request) (*places, bool) {
	var p *places
	for _, pol := range cfg.Policies {
		for _, a := range pol.Adaptive {
			if !a.Match.MatchesRequest(req) {
				continue
			}
			gen, ok := a.Acquire()
			if !ok {
				a.Shed.Inc()
				if a.Shadow {
					continue
				}
				if p != nil {
					_ = p.Close()
				}
				return nil, false
			}
			if p == nil {
				p = &places{}
			}
			p.list = append(p.list, place{a, gen})
		}
	}
	return p, true
}

// observe records the latency from forwarding to the upstream response's head, once.
func (p *places) observe(latency time.Duration) {
	if p == nil || p.observed {
		return
	}
	p.observed = true
	for _, pl := range p.list {
		pl.a.LimitGauge.Set(float64(pl.a.Observe(latency, pl.gen)))
	}
}

// Close gives the places back (fasthttp closes a request's user values once its response is
// finished).
func (p *places) Close() error {
	if p != nil {
		p.once.Do(func() {
			for _, pl := range p.list {
				pl.a.Release()
			}
		})
	}
	return nil
}

// placesKey is the user value under which a request's places wait for its end.
const placesKey = "sluice.places"

// shedRetryAfter is a shed request's Retry-After: a place frees as soon as any request in
// flight ends, so the advice is to come back soon (as for a Concurrency rule's denial).
const shedRetryAfter = "1"

var shedBody = []byte(`{"error":"overloaded","message":"The application has as many requests in flight as it can take now; retry soon."}`)

// writeShed answers a request the adaptive limit sheds.
func writeShed(w http.ResponseWriter) {
	hd := w.Header()
	hd["Content-Type"] = []string{jsonType}
	hd["Content-Length"] = []string{strconv.Itoa(len(shedBody))}
	hd["Cache-Control"] = []string{"no-store"}
	hd["Retry-After"] = []string{shedRetryAfter}
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = w.Write(shedBody)
}

// writeShedFast is writeShed for a fasthttp request.
func writeShedFast(ctx *fasthttp.RequestCtx) {
	hd := &ctx.Response.Header
	hd.SetContentType(jsonType)
	hd.Set("Cache-Control", "no-store")
	hd.Set("Retry-After", shedRetryAfter)
	ctx.SetStatusCode(http.StatusServiceUnavailable)
	ctx.SetBody(shedBody)
}

// headWriter records the latency from start (set when the request is forwarded) to the
// response's head for the places of an h2c request.
type headWriter struct {
	http.ResponseWriter
	p     *places
	clock clock.PassiveClock
	start time.Time
}

func (w *headWriter) WriteHeader(code int) {
	if code >= 200 && !w.start.IsZero() {
		w.p.observe(w.clock.Since(w.start))
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *headWriter) Write(b []byte) (int, error) {
	if !w.start.IsZero() {
		w.p.observe(w.clock.Since(w.start))
	}
	return w.ResponseWriter.Write(b)
}

func (w *headWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the writer underneath.
func (w *headWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
