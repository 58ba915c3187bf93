// Package decide decides one request's takes as one unit, through Redis while the breaker
// allows and by each policy's failure mode otherwise (Open: admitted undecided, Closed:
// unavailable, Local: the local store with this replica's share). The sidecar's request path
// and the RLS server both decide with it, so a failure mode means the same in both.
package decide

import (
	"context"
	"errors"
	"time"

	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/limiter/redisstore"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/sidecar/breaker"
	"github.com/sluice-dev/sluice/sidecar/config"
	"github.com/sluice-dev/sluice/sidecar/metrics"
)

// Store is what deciding needs of a store: single takes and whole requests.
type Store interface {
	limiter.Store
	limiter.RequestStore
}

// Outcome is how a request's takes were decided.
type Outcome uint8

// The outcomes.
const (
	// Decided: the results hold a decision (Redis or local) for the returned rules.
	Decided Outcome = iota
	// Skipped: nothing was decided (no take, or failure mode Open): admit.
	Skipped
	// Unavailable: a Closed policy cannot decide: refuse the request.
	Unavailable
	// Canceled: the caller went away.
	Canceled
)

// Decider decides takes. Remote nil decides everything locally with each replica's share;
// Breaker is required when Remote is set. Safe for concurrent use.
type Decider struct {
	Remote  Store
	Breaker *breaker.Breaker
	Local   Store
	Metrics *metrics.Metrics
}

// TakeRequest decides takes (rules[i]'s take, of policy pols[i]) into res: through Redis when
// the breaker allows, else by each policy's failure mode: Open rules are dropped (admitted
// without a decision), a Closed rule makes the request Unavailable, Local rules are decided
// together with the local store and this replica's shares. It returns the rules and takes that
// were decided (res holds their results, in order) and Skipped when none was. A Redis error
// never reaches the caller except as Unavailable. ctx bounds the Redis call.
func (d *Decider) TakeRequest(ctx context.Context, pols []*config.Policy, rules []*config.Rule, takes []limiter.Take, now time.Time, res []limiter.Result) ([]*config.Rule, []limiter.Take, Outcome) {
	if len(takes) == 0 {
		return nil, nil, Skipped
	}
	if d.Remote == nil {
		return d.takeLocal(ctx, rules, takes, now, res)
	}
	if d.Breaker.Allow() {
		err := d.remote(ctx, takes, now, res)
		if err == nil {
			d.Breaker.Success()
			return rules, takes, Decided
		}
		if ctx.Err() != nil && !errors.Is(err, redisstore.ErrUnavailable) {
			d.Breaker.Release()
			return nil, nil, Canceled
		}
		if errors.Is(err, redisstore.ErrTimeout) {
			d.Metrics.RedisErrors.WithLabelValues("timeout").Inc()
		} else {
			d.Metrics.RedisErrors.WithLabelValues("unavailable").Inc()
		}
		d.Breaker.Failure()
		if ctx.Err() != nil {
			return nil, nil, Canceled
		}
	}
	// Without Redis: keep the Local policies' rules, in order, in place.
	kept := 0
	for i, rule := range rules {
		p := pols[i]
		switch p.FailureMode {
		case policy.FailureOpen:
			p.Fallback.Open.Inc()
			continue
		case policy.FailureClosed:
			p.Fallback.Closed.Inc()
			return nil, nil, Unavailable
		}
		p.Fallback.Local.Inc()
		rules[kept], takes[kept] = rule, takes[i]
		kept++
	}
	if kept == 0 {
		return nil, nil, Skipped
	}
	return d.takeLocal(ctx, rules[:kept], takes[:kept], now, res[:kept])
}

// remote decides takes with Redis: a single take with Take (the store's cheapest path, the
// same decision), several with one TakeRequest.
func (d *Decider) remote(ctx context.Context, takes []limiter.Take, now time.Time, res []limiter.Result) error {
	if len(takes) == 1 {
		r, err := d.Remote.Take(ctx, takes[0].Key, takes[0].Limit, takes[0].N, now)
		res[0] = r
		return err
	}
	_, err := d.Remote.TakeRequest(ctx, takes, now, res)
	return err
}

// takeLocal decides takes with the local store and this replica's share of each rule's
// limit. It rewrites takes' limits and costs to the shares.
func (d *Decider) takeLocal(ctx context.Context, rules []*config.Rule, takes []limiter.Take, now time.Time, res []limiter.Result) ([]*config.Rule, []limiter.Take, Outcome) {
	for i, rule := range rules {
		takes[i].Limit = rule.Local
		takes[i].N = rule.LocalCost(takes[i].N)
	}
	var err error
	if len(takes) == 1 {
		res[0], err = d.Local.Take(ctx, takes[0].Key, takes[0].Limit, takes[0].N, now)
	} else {
		_, err = d.Local.TakeRequest(ctx, takes, now, res)
	}
	if err != nil {
		// Only an invalid limit or time can fail a memory Take; the configuration was
		// validated, so this is a clock before 1970. Admit rather than fail the request.
		return nil, nil, Skipped
	}
	return rules, takes, Decided
}

// Count records each decided rule's outcome in its metrics: not_charged for a rule that did
// not deny a request another rule denied (nothing was charged, and a shadow rule's would-be
// denial counts only in an admitted request), else allowed, shadow_denied or denied.
// It returns whether the request was admitted.
func Count(rules []*config.Rule, takes []limiter.Take, res []limiter.Result) bool {
	admitted := limiter.Admitted(takes, res)
	for i, rule := range rules {
		r := res[i]
		switch {
		case !admitted && (r.Allowed || rule.Shadow):
			rule.Metrics.NotCharged.Inc()
		case r.Allowed:
			rule.Metrics.Allowed.Inc()
		case rule.Shadow:
			rule.Metrics.ShadowDenied.Inc()
		default:
			rule.Metrics.Denied.Inc()
		}
	}
	return admitted
}
