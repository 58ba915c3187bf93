package proxy

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/limiter/redisstore"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/sidecar/breaker"
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
	// late are the charges a passed request owes once its response is known (countWhen);
	// settle makes them.
	late []lateCharge
}

// lateCharge is a countWhen rule's charge, made after the response if its status counts, on
// the store that decided the request (local is true for the local store, with this pod's
// share and cost).
type lateCharge struct {
	rule  *config.Rule
	key   string
	lim   limiter.Limit
	n     int64
	local bool
}

// settle makes a passed request's late charges for a response of status: those of the rules
// whose countWhen lists it. A charge Redis cannot take is lost (counted in RedisErrors): the
// request was admitted already, and the local store holds another share.
func (h *Handler) settle(d *decision, status int) {
	for i := range d.late {
		c := &d.late[i]
		if !policy.Counts(c.rule.CountWhen, status) {
			continue
		}
		now := h.opts.Clock.Now()
		if c.local {
			_, _ = h.opts.Local.Charge(context.Background(), c.key, c.lim, c.n, now)
			continue
		}
		if _, err := h.opts.Remote.Charge(context.Background(), c.key, c.lim, c.n, now); err != nil {
			h.opts.Metrics.RedisErrors.WithLabelValues("late_charge").Inc()
		}
	}
	d.late = nil
}

// Store is what the request path needs of a store: single takes, whole requests and late
// charges.
type Store interface {
	limiter.Store
	limiter.RequestStore
	limiter.Charger
}

// maxInline is how many matching rules a request decides without allocating its scratch.
const maxInline = 8

// request is one request's scratch: the matching rules and their takes, in the same order.
type request struct {
	rules [maxInline]*config.Rule
	pols  [maxInline]*config.Policy
	takes [maxInline]limiter.Take
	res   [maxInline]limiter.Result
}

var requestPool = sync.Pool{New: func() any { return new(request) }}

// decide decides req against every matching rule of every policy of cfg, as one unit: the
// request is admitted only when every enforced rule admits it, and only then is any rule
// charged (limiter.RequestStore). ctx bounds the Redis calls (its cancellation is the client
// going away). It records the rule and decision metrics.
func (h *Handler) decide(ctx context.Context, cfg *config.Config, req *keys.Request) decision {
	now := h.opts.Clock.Now()
	sc := requestPool.Get().(*request)
	defer requestPool.Put(sc)
	rules, pols, takes := sc.rules[:0], sc.pols[:0], sc.takes[:0]
	var kb [256]byte
	buf := kb[:0]
	for _, p := range cfg.Policies {
		for _, rule := range p.Rules {
			if !rule.Match.MatchesRequest(req) {
				continue
			}
			// Each key is appended after the previous ones and copied into its own string,
			// so no key is overwritten by the next.
			start := len(buf)
			buf = rule.Key.Append(buf, req)
			rules = append(rules, rule)
			pols = append(pols, p)
			takes = append(takes, limiter.Take{Key: string(buf[start:]), Limit: rule.Limit,
				N: rule.CostFrom(req.Header), Shadow: rule.Shadow, Check: len(rule.CountWhen) > 0})
		}
	}
	res := sc.res[:]
	if len(takes) > len(res) {
		res = make([]limiter.Result, len(takes))
	}
	res = res[:len(takes)]
	var (
		out   outcome
		local bool
	)
	rules, takes, out, local = h.takeRequest(ctx, pols, rules, takes, now, res)
	switch out {
	case unavailable:
		h.opts.Metrics.DecisionSeconds.Observe(h.opts.Clock.Since(now).Seconds())
		sc.reset() // drop the key strings and rules
		return decision{action: refuse, now: now}
	case canceled:
		sc.reset()
		return decision{action: abandon, now: now}
	}
	var v verdict
	if out == decided {
		admitted := limiter.Admitted(takes, res)
		for i, rule := range rules {
			r := res[i]
			switch {
			case !admitted && (r.Allowed || rule.Shadow):
				// Another rule denied the request: this one was not charged, and a shadow
				// rule's would-be denial is counted only for an admitted request.
				rule.Metrics.NotCharged.Inc()
			case r.Allowed:
				rule.Metrics.Allowed.Inc()
			case rule.Shadow:
				rule.Metrics.ShadowDenied.Inc()
			default:
				rule.Metrics.Denied.Inc()
			}
			v.add(rule, r)
		}
	}
	d := decision{action: pass, show: v.show, res: v.showRes, now: now, delay: v.delay}
	if v.denied {
		d.action = deny
		d.delay = 0
	} else if out == decided {
		for i := range takes {
			if takes[i].Check {
				d.late = append(d.late, lateCharge{rule: rules[i], key: takes[i].Key, lim: takes[i].Limit, n: takes[i].N, local: local})
			}
		}
	}
	sc.reset()
	h.opts.Metrics.DecisionSeconds.Observe(h.opts.Clock.Since(now).Seconds())
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

// takeRequest decides takes (rules[i]'s take, of policy pols[i]) into res: through Redis when
// the breaker allows, else by each policy's failure mode: Open rules are dropped (admitted
// without a decision), a Closed rule makes the request unavailable, Local rules are decided
// together with the local store and this pod's shares. It returns the rules and takes that
// were decided (res holds their results, in order) and skipped when none was. A Redis error
// never reaches the client except as Closed's 503.
func (h *Handler) takeRequest(ctx context.Context, pols []*config.Policy, rules []*config.Rule, takes []limiter.Take, now time.Time, res []limiter.Result) ([]*config.Rule, []limiter.Take, outcome, bool) {
	if len(takes) == 0 {
		return nil, nil, skipped, false
	}
	if h.opts.Remote == nil {
		r, t, o := h.takeLocal(ctx, rules, takes, now, res)
		return r, t, o, true
	}
	// A request whose one rule is leased spends the key's live lease without Redis, and
	// without asking the breaker (a local spend is no sign of Redis's health); a request with
	// several rules is decided as one unit in Redis, leased rules included.
	leased := h.opts.Leases != nil && len(takes) == 1 && rules[0].Lease != nil
	if leased {
		if r, ok := h.opts.Leases.Spend(takes[0].Key, takes[0].Limit, *rules[0].Lease, takes[0].N, now); ok {
			res[0] = r
			return rules, takes, decided, false // leased rules have no countWhen (CEL)
		}
	}
	var bbuf [maxInline]*breaker.Breaker
	brks := h.breakers(ctx, takes, bbuf[:0])
	if allow(brks) {
		var err error
		if leased {
			res[0], err = h.opts.Leases.Take(ctx, takes[0].Key, takes[0].Limit, *rules[0].Lease, takes[0].N, now)
		} else {
			err = h.remote(ctx, takes, now, res)
		}
		if err == nil {
			for _, b := range brks {
				b.Success()
			}
			if b := h.backlog; b != nil && b.due(now) {
				go h.flushBacklog()
			}
			return rules, takes, decided, false
		}
		if ctx.Err() != nil && !errors.Is(err, redisstore.ErrUnavailable) {
			for _, b := range brks {
				b.Release()
			}
			return nil, nil, canceled, false
		}
		if errors.Is(err, redisstore.ErrTimeout) {
			h.opts.Metrics.RedisErrors.WithLabelValues("timeout").Inc()
		} else {
			h.opts.Metrics.RedisErrors.WithLabelValues("unavailable").Inc()
		}
		// The request's call failed; which of its masters did not answer is not known.
		for _, b := range brks {
			b.Failure()
		}
		if ctx.Err() != nil {
			return nil, nil, canceled, false
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
			return nil, nil, unavailable, false
		}
		p.Fallback.Local.Inc()
		rules[kept], takes[kept] = rule, takes[i]
		kept++
	}
	if kept == 0 {
		return nil, nil, skipped, false
	}
	r, t, o := h.takeLocal(ctx, rules[:kept], takes[:kept], now, res[:kept])
	return r, t, o, true
}

// remote decides takes with Redis: a single take with Take (the store's cheapest path, the
// same decision), several with one TakeRequest.
func (h *Handler) remote(ctx context.Context, takes []limiter.Take, now time.Time, res []limiter.Result) error {
	if len(takes) == 1 && !takes[0].Check { // Take charges; a check goes as a request
		r, err := h.opts.Remote.Take(ctx, takes[0].Key, takes[0].Limit, takes[0].N, now)
		res[0] = r
		return err
	}
	_, err := h.opts.Remote.TakeRequest(ctx, takes, now, res)
	return err
}

// takeLocal decides takes with the local store and this pod's share of each rule's limit. It
// rewrites takes' limits and costs to the shares. With a backlog (Redis could not decide), an
// admitted request's allowed takes are kept in it at their cost under the shared limit.
func (h *Handler) takeLocal(ctx context.Context, rules []*config.Rule, takes []limiter.Take, now time.Time, res []limiter.Result) ([]*config.Rule, []limiter.Take, outcome) {
	var costBuf [maxInline]int64
	var costs []int64
	if h.backlog != nil {
		costs = costBuf[:0]
		for i := range takes {
			costs = append(costs, takes[i].N)
		}
	}
	for i, rule := range rules {
		takes[i].Limit = rule.Local
		takes[i].N = rule.LocalCost(takes[i].N)
	}
	var err error
	if len(takes) == 1 && !takes[0].Check {
		res[0], err = h.opts.Local.Take(ctx, takes[0].Key, takes[0].Limit, takes[0].N, now)
	} else {
		_, err = h.opts.Local.TakeRequest(ctx, takes, now, res)
	}
	if err != nil {
		// Only an invalid limit or time can fail a memory Take; the configuration was
		// validated, so this is a clock before 1970. Admit rather than fail the request.
		return nil, nil, skipped
	}
	if costs != nil && limiter.Admitted(takes, res) {
		nowMs := now.UnixMilli()
		for i, rule := range rules {
			if res[i].Allowed {
				h.backlog.add(takes[i].Key, rule.Limit, costs[i], nowMs)
			}
		}
	}
	return rules, takes, decided
}

// flushBacklog charges the usage admitted locally to Remote, which just answered.
func (h *Handler) flushBacklog() {
	start := h.opts.Clock.Now()
	charged, err := h.backlog.flush(start)
	if err != nil {
		h.opts.Log.Warn("Could not charge all the usage admitted locally to Redis; retrying with an answer at least 1 s from now",
			"keys", charged, "error", err.Error())
		return
	}
	if charged > 0 {
		// Debug: on Redis Cluster with one master down, the others' answers flush every few
		// requests; sluice_outage_units_total counts what was charged.
		h.opts.Log.Debug("Charged the usage admitted locally to Redis", "keys", charged,
			"duration", h.opts.Clock.Since(start))
	}
}

// reset drops what sc refers to, so that a pooled scratch keeps no key or configuration alive.
func (sc *request) reset() {
	clear(sc.rules[:])
	clear(sc.pols[:])
	clear(sc.takes[:])
}
