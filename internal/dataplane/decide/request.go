package decide

import (
	"context"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/internal/dataplane/config"
	"github.com/sluice-dev/sluice/internal/limiter"
)

// Request is one request's matched rules and their takes, in the order the front end matched
// them: the scratch a front end fills with Add and Decide decides. Get one with NewRequest and
// give it back with Release; not safe for concurrent use.
type Request struct {
	// Key is a buffer for the rules' keys: a front end appends a rule's key to it and passes
	// the appended part, as a string, to Add. It is kept across requests.
	Key []byte

	rules []*config.Rule
	pols  []*config.Policy
	takes []limiter.Take
	res   []limiter.Result
	// n is how many takes were added (Decide compacts the slices in place).
	n int
	// What Decide decided (Decided).
	dRules []*config.Rule
	dTakes []limiter.Take
	dRes   []limiter.Result

	inRules [maxInline]*config.Rule
	inPols  [maxInline]*config.Policy
	inTakes [maxInline]limiter.Take
	inRes   [maxInline]limiter.Result
}

var requestPool = sync.Pool{New: func() any {
	r := new(Request)
	r.rules, r.pols, r.takes, r.res = r.inRules[:0], r.inPols[:0], r.inTakes[:0], r.inRes[:0]
	r.Key = make([]byte, 0, 256)
	return r
}}

// NewRequest returns an empty Request from a pool.
func NewRequest() *Request { return requestPool.Get().(*Request) }

// Release drops what r refers to (keys, rules, configuration) and returns it to the pool; r
// must not be used after.
func (r *Request) Release() {
	clear(r.rules[:r.n])
	clear(r.pols[:r.n])
	clear(r.takes[:r.n])
	r.rules, r.pols, r.takes, r.res, r.Key, r.n = r.rules[:0], r.pols[:0], r.takes[:0], r.res[:0], r.Key[:0], 0
	r.dRules, r.dTakes, r.dRes = nil, nil, nil
	requestPool.Put(r)
}

// Add adds rule of policy p, matched by the request: a take of n units on key. check is a take
// that charges nothing at admission (a countWhen rule, charged once its response is known).
//
// A Blocked rule's take costs more than its one-unit stand-in holds, whatever n is, so that
// either store denies it (and, all-or-nothing, charges none of the request's rules).
func (r *Request) Add(p *config.Policy, rule *config.Rule, key string, n int64, check bool) {
	if rule.Blocked {
		n = rule.Limit.Capacity() + 1
	}
	r.rules = append(r.rules, rule)
	r.pols = append(r.pols, p)
	r.takes = append(r.takes, limiter.Take{Key: key, Limit: rule.Limit, N: n, Shadow: rule.Shadow, Check: check})
	r.n++
}

// Len is how many rules were added.
func (r *Request) Len() int { return r.n }

// Decided returns, after Decide, the rules that were decided, their takes (at the limits and
// costs that decided: this replica's share when Verdict.Local) and their results, in the order
// they were added; the rules of Open policies skipped while Redis could not decide are not in
// them.
func (r *Request) Decided() ([]*config.Rule, []limiter.Take, []limiter.Result) {
	return r.dRules, r.dTakes, r.dRes
}

// Decide decides r's takes as one unit (TakeRequest): the request is admitted only when every
// enforced rule admits it, and only then is any rule charged. ctx bounds the Redis calls (its
// cancellation is the client going away). It counts each decided rule's outcome in its metrics
// (Count) and returns the Verdict a front end renders; r.Decided holds what was decided.
func (d *Decider) Decide(ctx context.Context, r *Request, now time.Time) Verdict {
	if r.n > cap(r.res) {
		r.res = make([]limiter.Result, r.n)
	}
	r.res = r.res[:r.n]
	d.numberSlots(r.takes)
	rules, takes, out, local := d.TakeRequest(ctx, r.pols, r.rules, r.takes, now, r.res)
	v := Verdict{Outcome: out, At: now}
	if out != Decided {
		return v
	}
	r.dRules, r.dTakes, r.dRes = rules, takes, r.res[:len(takes)]
	for i, rule := range rules {
		if rule.Blocked { // the store denied the stand-in; report the rule's own limit: 0
			r.dRes[i] = limiter.Result{RetryAfter: limiter.NeverRetry, Reason: limiter.ReasonCostExceedsCapacity}
		}
	}
	v.Local = local
	if Count(rules, takes, r.dRes) {
		v.Hold = d.hold(rules, takes, r.dRes, local, now)
	}
	for i, rule := range rules {
		v.Add(rule, takes[i].Limit, r.dRes[i])
	}
	return v
}
