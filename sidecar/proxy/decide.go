package proxy

import (
	"context"
	"time"

	"github.com/sluice-dev/sluice/internal/dataplane/config"
	"github.com/sluice-dev/sluice/internal/dataplane/decide"
	"github.com/sluice-dev/sluice/internal/dataplane/keys"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/policy"
)

// This file is the request path's decision, written once for both servers (fasthttp's for
// HTTP/1.1, net/http's for h2c): they fill a keys.Request view, call decide, and render
// the decision in their own response type.

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
	// v is the decision whose numbers the response carries; v.Show is nil when no rule
	// decided the request.
	v decide.Verdict
	// delay is how long a passed request waits (LeakyBucket Queue) before it is proxied.
	delay time.Duration
	// late are the charges a passed request owes once its response is known (countWhen);
	// settle makes them.
	late []lateCharge
	// cost are the passed request's responseCost charges, n being what was charged at
	// admission: settleCost charges the rest once the response has ended, and settle counts
	// them missing when no response was watched.
	cost []lateCharge
	// adaptive are the adaptive limits' places the request holds (nil: none), whose latency
	// forward and tunnel record.
	adaptive *places
}

// lateCharge is a countWhen or responseCost rule's charge, made after the response, on the
// store that decided the request (local is true for the local store, with this pod's share
// and cost).
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
//
// Responses no costScan watched (the sidecar's own 502, an upgrade) report no cost: d's
// responseCost charges stay at what admission charged, and count as missing.
func (h *Handler) settle(d *decision, status int) {
	for i := range d.late {
		c := &d.late[i]
		if policy.Counts(c.rule.CountWhen, status) {
			h.charge(c, c.n)
		}
	}
	d.late = nil
	if len(d.cost) > 0 {
		h.settleCost(d.cost, nil)
		d.cost = nil
	}
}

// charge makes n units of c's late charge on the store that decided the request. A charge
// on the local share is kept for Redis too, as the admissions of the outage are.
func (h *Handler) charge(c *lateCharge, n int64) {
	now := h.opts.Clock.Now()
	if c.local {
		_, _ = h.decider.Local().Charge(context.Background(), c.key, c.lim, n, now)
		h.decider.KeepLate(c.key, c.rule.Limit, n, now)
		return
	}
	if _, err := h.decider.Remote().Charge(context.Background(), c.key, c.lim, n, now); err != nil {
		h.opts.Metrics.RedisErrors.WithLabelValues("late_charge").Inc()
	}
}

// decide decides req against every matching rule of every policy of cfg, as one unit: the
// request is admitted only when every enforced rule admits it, and only then is any rule
// charged (limiter.RequestStore). ctx bounds the Redis calls (its cancellation is the client
// going away). It records the rule and decision metrics.
func (h *Handler) decide(ctx context.Context, cfg *config.Config, req *keys.Request) decision {
	now := h.opts.Clock.Now()
	rq := decide.NewRequest()
	defer rq.Release()
	for _, p := range cfg.Policies {
		for _, rule := range p.Rules {
			if !rule.Match.MatchesRequest(req) {
				continue
			}
			// Each key is appended after the previous ones and copied into its own string,
			// so no key is overwritten by the next.
			start := len(rq.Key)
			rq.Key = rule.Key.Append(rq.Key, req)
			key := string(rq.Key[start:])
			rule := rule.ForKey(key) // the key's tenant's limit, when the rule has a table
			rq.Add(p, rule, key, rule.CostFrom(req.Header), len(rule.CountWhen) > 0)
		}
	}
	v := h.decider.Decide(ctx, rq, now)
	switch v.Outcome {
	case decide.Unavailable:
		h.opts.Metrics.DecisionSeconds.Observe(h.opts.Clock.Since(now).Seconds())
		return decision{action: refuse}
	case decide.Canceled:
		return decision{action: abandon}
	}
	d := decision{action: pass, v: v, delay: v.Delay}
	if v.Denied {
		d.action = deny
	} else if v.Outcome == decide.Decided {
		rules, takes, res := rq.Decided()
		for i := range takes {
			switch {
			case takes[i].Check:
				d.late = append(d.late, lateCharge{rule: rules[i], key: takes[i].Key, lim: takes[i].Limit, n: takes[i].N, local: v.Local})
			case rules[i].ResponseCost != nil && res[i].Allowed:
				d.cost = append(d.cost, lateCharge{rule: rules[i], key: takes[i].Key, lim: takes[i].Limit, n: takes[i].N, local: v.Local})
			}
		}
	}
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
