// Package proxy is the sidecar's request path: it decides each request against the selected
// policies (Redis behind a circuit breaker, the local share as fallback) and either answers it
// (limited, or 503 under failureMode Closed) or passes it to the upstream through a reverse
// proxy that keeps connections alive and streams bodies, upgrades included.
package proxy

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/limiter/redisstore"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/sidecar/breaker"
	"github.com/sluice-dev/sluice/sidecar/config"
	"github.com/sluice-dev/sluice/sidecar/keys"
	"github.com/sluice-dev/sluice/sidecar/metrics"
)

// Options configures a Handler.
type Options struct {
	// Upstream is the application, e.g. http://127.0.0.1:8080.
	Upstream *url.URL
	// Config returns the configuration in use; called once per request.
	Config func() *config.Config
	// Remote is the shared store (Redis); nil decides everything locally with each pod's share.
	Remote limiter.Store
	// Breaker guards Remote; required when Remote is set.
	Breaker *breaker.Breaker
	// Local is the fallback store.
	Local   limiter.Store
	Metrics *metrics.Metrics
	Log     *slog.Logger
	// Transport overrides the upstream transport (NewTransport by default).
	Transport http.RoundTripper
	// Clock gives each request its decision time (for the local store, explicit-time Redis
	// and reset_at), times a queued request's delay and the decision latency; nil means the
	// real clock.
	Clock clock.Clock
}

// Handler is the sidecar's http.Handler. Safe for concurrent use.
type Handler struct {
	opts  Options
	proxy *httputil.ReverseProxy
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
	target := opts.Upstream
	h.proxy = &httputil.ReverseProxy{
		// Director (not Rewrite) keeps the incoming Host and appends the peer to
		// X-Forwarded-For, as the application would see it without the sidecar in front.
		Director: func(r *http.Request) { //nolint:staticcheck // see above: Rewrite would replace Host and X-Forwarded-For
			r.URL.Scheme = target.Scheme
			r.URL.Host = target.Host
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
	return h
}

// outcome is how one rule was decided.
type outcome uint8

const (
	decided     outcome = iota // res holds a decision (Redis or local)
	skipped                    // failure mode Open: admitted without a decision
	unavailable                // failure mode Closed: answer 503
	canceled                   // the client went away
)

// verdict accumulates the decisions of one request.
type verdict struct {
	// show is the rule whose numbers go into the headers: the denying rule with the longest
	// RetryAfter when denied, else the decided rule with the least Remaining.
	show    *config.Rule
	showRes limiter.Result
	denied  bool
	delay   time.Duration
}

func (v *verdict) add(rule *config.Rule, res limiter.Result) {
	enforcedDeny := !res.Allowed && !rule.Shadow
	switch {
	case enforcedDeny:
		if !v.denied || retryAfter(res) > retryAfter(v.showRes) {
			v.show, v.showRes = rule, res
		}
		v.denied = true
	case v.denied:
	case v.show == nil || res.Remaining < v.showRes.Remaining ||
		(res.Remaining == v.showRes.Remaining && v.show.Shadow && !rule.Shadow):
		v.show, v.showRes = rule, res
	}
	if res.Allowed && !rule.Shadow && res.Delay > v.delay {
		v.delay = res.Delay
	}
}

// ServeHTTP decides r against every matching rule of every selected policy, then answers it
// or proxies it.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	cfg := h.opts.Config()
	if len(cfg.Policies) == 0 {
		h.proxy.ServeHTTP(w, r)
		return
	}
	now := h.opts.Clock.Now()
	ctx := r.Context()
	req := keys.NewRequest(r)
	var kb [256]byte
	var v verdict
	for _, p := range cfg.Policies {
		for _, rule := range p.Rules {
			if !rule.Match.Matches(r) {
				continue
			}
			key := rule.Key.Append(kb[:0], &req)
			res, out := h.take(ctx, p, rule, key, rule.CostOf(r.Header), now)
			switch out {
			case skipped:
				continue
			case unavailable:
				h.opts.Metrics.DecisionSeconds.Observe(h.opts.Clock.Since(now).Seconds())
				writeUnavailable(w, p)
				return
			case canceled:
				return
			}
			switch {
			case res.Allowed:
				rule.Metrics.Allowed.Inc()
			case rule.Shadow:
				rule.Metrics.ShadowDenied.Inc()
			default:
				rule.Metrics.Denied.Inc()
			}
			v.add(rule, res)
		}
	}
	h.opts.Metrics.DecisionSeconds.Observe(h.opts.Clock.Since(now).Seconds())
	if v.denied {
		h.writeDenied(w, v.show, v.showRes, now)
		return
	}
	if v.delay > 0 {
		h.opts.Metrics.QueueDelaySeconds.Observe(v.delay.Seconds())
		t := h.opts.Clock.NewTimer(v.delay)
		select {
		case <-t.C():
		case <-ctx.Done():
			t.Stop()
			h.opts.Metrics.QueueAbandoned.Inc()
			return
		}
	}
	if v.show != nil {
		setHeaders(w.Header(), v.show, v.showRes)
	}
	h.proxy.ServeHTTP(w, r)
}

// take decides one rule: through Redis when the breaker allows, else by the policy's failure
// mode. A Redis error never reaches the client except as Closed's 503.
func (h *Handler) take(ctx context.Context, p *config.Policy, rule *config.Rule, key []byte, cost int64, now time.Time) (limiter.Result, outcome) {
	if h.opts.Remote == nil {
		return h.takeLocal(ctx, rule, key, cost, now)
	}
	if h.opts.Breaker.Allow() {
		res, err := h.opts.Remote.Take(ctx, string(key), rule.Limit, cost, now)
		if err == nil {
			h.opts.Breaker.Success()
			return res, decided
		}
		if ctx.Err() != nil && !errors.Is(err, redisstore.ErrUnavailable) {
			h.opts.Breaker.Release()
			return limiter.Result{}, canceled
		}
		if errors.Is(err, redisstore.ErrTimeout) {
			h.opts.Metrics.RedisErrors.WithLabelValues("timeout").Inc()
		} else {
			h.opts.Metrics.RedisErrors.WithLabelValues("unavailable").Inc()
		}
		h.opts.Breaker.Failure()
		if ctx.Err() != nil {
			return limiter.Result{}, canceled
		}
	}
	switch p.FailureMode {
	case policy.FailureOpen:
		p.Fallback.Open.Inc()
		return limiter.Result{}, skipped
	case policy.FailureClosed:
		p.Fallback.Closed.Inc()
		return limiter.Result{}, unavailable
	}
	p.Fallback.Local.Inc()
	return h.takeLocal(ctx, rule, key, cost, now)
}

// takeLocal decides rule with the local store and this pod's share of the limit.
func (h *Handler) takeLocal(ctx context.Context, rule *config.Rule, key []byte, cost int64, now time.Time) (limiter.Result, outcome) {
	res, err := h.opts.Local.Take(ctx, string(key), rule.Local, rule.LocalCost(cost), now)
	if err != nil {
		// Only an invalid limit or time can fail a memory Take; the configuration was
		// validated, so this is a clock before 1970. Admit rather than fail the request.
		return limiter.Result{}, skipped
	}
	return res, decided
}
