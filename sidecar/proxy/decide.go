package proxy

import (
	"context"
	"errors"
	"time"

	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/limiter/redisstore"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/sidecar/config"
	"github.com/sluice-dev/sluice/sidecar/keys"
)

// This file is the request path's decision, written once for both servers (fasthttp's for
// HTTP/1.1, net/http's for h2c): they fill a keys.Request view, call decide, and render
// the decision in their own response type.

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

// action is what the server does with a request once decided.
type action uint8

const (
	pass    action = iota // proxy it, after Delay, with show's headers when show is set
	deny                  // answer show's denial
	refuse                // answer 503: a Closed policy cannot decide
	abandon               // answer nothing: the client went away
)

// decision is the outcome of decide.
type decision struct {
	action action
	// show and res are the rule and result whose numbers the response carries; show is nil
	// when no rule decided the request.
	show *config.Rule
	res  limiter.Result
	// now is the instant the request was decided at (reset_at of a denial).
	now time.Time
	// delay is how long a passed request waits (LeakyBucket Queue) before it is proxied.
	delay time.Duration
}

// decide decides req against every matching rule of every policy of cfg. ctx bounds the Redis
// calls (its cancellation is the client going away). It records the rule and decision metrics.
func (h *Handler) decide(ctx context.Context, cfg *config.Config, req *keys.Request) decision {
	now := h.opts.Clock.Now()
	var kb [256]byte
	var v verdict
	for _, p := range cfg.Policies {
		for _, rule := range p.Rules {
			if !rule.Match.MatchesRequest(req) {
				continue
			}
			key := rule.Key.Append(kb[:0], req)
			res, out := h.take(ctx, p, rule, key, rule.CostFrom(req.Header), now)
			switch out {
			case skipped:
				continue
			case unavailable:
				h.opts.Metrics.DecisionSeconds.Observe(h.opts.Clock.Since(now).Seconds())
				return decision{action: refuse, now: now}
			case canceled:
				return decision{action: abandon, now: now}
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
	d := decision{action: pass, show: v.show, res: v.showRes, now: now, delay: v.delay}
	if v.denied {
		d.action = deny
	}
	return d
}

// queue waits out a passed request's delay; false when gone is closed first (the client went
// away), and the request must then not reach the upstream.
func (h *Handler) queue(delay time.Duration, gone <-chan struct{}) bool {
	h.opts.Metrics.QueueDelaySeconds.Observe(delay.Seconds())
	t := h.opts.Clock.NewTimer(delay)
	select {
	case <-t.C():
		return true
	case <-gone:
		t.Stop()
		h.opts.Metrics.QueueAbandoned.Inc()
		return false
	}
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
