package decide

import (
	"time"

	"github.com/sluice-dev/sluice/internal/dataplane/config"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/policy"
)

// Verdict is a request's decision as a front end renders it: whether it was decided, whether an
// enforced rule denied it, the rule and result whose numbers the response reports, and how long
// an admitted request waits (LeakyBucket Queue) before it is passed on.
//
// Its numbers tell the truth whichever store decided: a denied result reports no remaining
// units; RetryAfter is a time at which the denied request passes if nothing else arrives, or
// none when no wait lets it pass (its cost exceeds the capacity, or this replica holds no share
// while Redis cannot decide); ResetAfter is how long until the next request can pass (see
// ResetAfter).
type Verdict struct {
	// Outcome is how the request's takes were decided; the fields below are set only when it
	// is Decided.
	Outcome Outcome
	// Local is true when the local store decided (Redis could not), with this replica's share.
	Local bool
	// At is when the request was decided (a Unix-time reset is counted from it).
	At time.Time
	// Show is the rule whose numbers the response carries: the enforced rule that denies with
	// the longest retry (one that never passes before any other) when one denies, else the
	// decided rule with the least remaining (at a tie an enforced rule before a shadow one,
	// then the one with the latest reset); nil when no rule decided the request.
	Show *config.Rule
	// Lim is the limit that decided Show: its shared limit, or this replica's share of it.
	Lim limiter.Limit
	// Res is Show's result; its Remaining is 0 when it denied.
	Res limiter.Result
	// Denied is true when an enforced rule denied the request.
	Denied bool
	// Delay is how long an admitted request waits before it is passed on: the longest delay of
	// its enforced rules; zero when Denied.
	Delay time.Duration
	// Hold is the Concurrency slots an admitted request holds, which its front end releases
	// (Holding.Release) once the response is finished; nil when it holds none.
	Hold *Holding
	// The rules the headers show, picked as Show is among some of the rules: std among those
	// whose style is Draft, Legacy, Both or Draft7, req and tok among the OpenAI-style rules
	// counting requests and tokens (Rule.Tokens). A rule of style None is in none.
	std, req, tok Pick
}

// Pick is one rule's decision: the rule, the limit that decided (its shared limit or this
// replica's share) and the result.
type Pick struct {
	Rule *config.Rule
	Lim  limiter.Limit
	Res  limiter.Result
}

// add folds a decision into p, p keeping the one a response reports (see Verdict.Show).
func (p *Pick) add(rule *config.Rule, lim limiter.Limit, res limiter.Result) {
	deny := !res.Allowed && !rule.Shadow
	curDeny := p.Rule != nil && !p.Res.Allowed && !p.Rule.Shadow
	switch {
	case deny:
		if !curDeny || later(res, p.Res) {
			*p = Pick{rule, lim, res}
		}
	case curDeny:
	case p.Rule == nil || res.Remaining < p.Res.Remaining ||
		(res.Remaining == p.Res.Remaining && p.Rule.Shadow && !rule.Shadow) ||
		(res.Remaining == p.Res.Remaining && p.Rule.Shadow == rule.Shadow && lastReset(resetOf(lim, res), resetOf(p.Lim, p.Res))):
		// At a tie the latest reset: the request's remaining grows only when every rule's
		// that has that few has grown.
		*p = Pick{rule, lim, res}
	}
}

// Add folds rule's decision res, made under lim (the rule's limit or this replica's share of
// it), into v (see Verdict.Show). Front ends use it for every decided rule of a request (Decide
// does), and the RLS server also once per descriptor.
func (v *Verdict) Add(rule *config.Rule, lim limiter.Limit, res limiter.Result) {
	if !res.Allowed {
		res.Remaining = 0 // what this request may still spend: nothing
	}
	show := Pick{v.Show, v.Lim, v.Res}
	show.add(rule, lim, res)
	v.Show, v.Lim, v.Res = show.Rule, show.Lim, show.Res
	if !res.Allowed && !rule.Shadow {
		v.Denied = true
		v.Delay = 0
	}
	if !v.Denied && res.Allowed && !rule.Shadow && res.Delay > v.Delay {
		v.Delay = res.Delay
	}
	switch {
	case rule.Style == policy.HeadersNone:
	case rule.Style == policy.HeadersOpenAI && rule.Tokens:
		v.tok.add(rule, lim, res)
	case rule.Style == policy.HeadersOpenAI:
		v.req.add(rule, lim, res)
	default:
		v.std.add(rule, lim, res)
	}
}

// later reports whether denial a passes later than denial b: one that never passes is the
// latest.
func later(a, b limiter.Result) bool {
	switch {
	case b.RetryAfter < 0:
		return false
	case a.RetryAfter < 0:
		return true
	}
	return a.RetryAfter > b.RetryAfter
}

// RetryAfter is how long a Denied request waits before the same request passes if nothing
// else arrives, exact to the millisecond; ok is false when no wait lets it pass (Res.Reason
// says why) or the request was not denied.
func (v *Verdict) RetryAfter() (d time.Duration, ok bool) {
	if !v.Denied || v.Res.RetryAfter < 0 {
		return 0, false
	}
	return v.Res.RetryAfter, true
}

// ResetAfter is the reset every header style, the denial body and the RLS server's
// duration_until_reset report, one meaning throughout: how long until the quota gives back
// what the response's remaining lacks, so that the next request can pass. After a denial
// (Show's result denied) it is RetryAfter's time, when the denied request passes. After an
// admission it is how long until remaining next grows: when it is 0, until a request of one
// unit passes; for the fixed windows (and calendar quotas) the end of the window; for the
// buckets the next unit; 0 when nothing is used. ok is false when there is no such time (a
// denial no wait lets pass) or no rule decided.
//
// For the buckets and the fixed windows the time is exact to the millisecond (the buckets'
// can be 1 ms late); for the sliding windows it is when the window has emptied, a time by
// which remaining has surely grown.
func (v *Verdict) ResetAfter() (d time.Duration, ok bool) {
	if v.Show == nil {
		return 0, false
	}
	return Pick{v.Show, v.Lim, v.Res}.ResetAfter()
}

// ResetAfter is Verdict.ResetAfter of one rule's decision.
func (p Pick) ResetAfter() (d time.Duration, ok bool) {
	d = resetOf(p.Lim, p.Res)
	return d, d >= 0
}

// lastReset reports whether reset a comes after b; -1 (no time) is the last.
func lastReset(a, b time.Duration) bool {
	return b >= 0 && (a < 0 || a > b)
}

// resetOf is ResetAfter of one rule's decision res under lim: -1 for a denial no wait lets
// pass.
func resetOf(lim limiter.Limit, res limiter.Result) time.Duration {
	if !res.Allowed {
		return res.RetryAfter
	}
	return untilMore(lim, res)
}

// untilMore is how long after an admission res under lim until res.Remaining grows, if nothing
// else arrives. The windows' ResetAfter is when the window has emptied (for the fixed windows,
// when it ends). The buckets derive it from ResetAfter, the time until full (empty): with
// rem = res.Remaining, rem+1 units are short of full by (cap-rem-1)*W scaled units of refill
// (for LeakyBucket Queue, whose remaining counts requests MaxDelay lets start, by the level
// T1 - rem*W, T1 = min(full - W, MaxDelay*L)); taking the floor of that over L keeps the result
// at or after the exact instant, by under 1 ms.
func untilMore(lim limiter.Limit, res limiter.Result) time.Duration {
	if lim.Algorithm != limiter.TokenBucket && lim.Algorithm != limiter.LeakyBucket {
		return res.ResetAfter
	}
	W, L, rem := lim.WindowMs(), lim.Limit, res.Remaining
	capacity := lim.Capacity()
	short := max(capacity-rem-1, 0) * W // scaled units; <= 8.64e15
	if lim.Algorithm == limiter.LeakyBucket && lim.Mode == limiter.Queue {
		t1 := min((capacity-1)*W, lim.MaxDelay.Milliseconds()*L)
		short = max(t1-min(rem, capacity)*W, 0)
	}
	return limiter.DurationFromMs(max(res.ResetAfter.Milliseconds()-short/L, 0))
}
