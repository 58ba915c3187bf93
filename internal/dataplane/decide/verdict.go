package decide

import (
	"time"

	"github.com/sluice-dev/sluice/internal/dataplane/config"
	"github.com/sluice-dev/sluice/internal/limiter"
)

// Verdict is a request's decision as a front end renders it: whether it was decided, whether an
// enforced rule denied it, the rule and result whose numbers the response reports, and how long
// an admitted request waits (LeakyBucket Queue) before it is passed on.
type Verdict struct {
	// Outcome is how the request's takes were decided; the fields below are set only when it
	// is Decided.
	Outcome Outcome
	// Local is true when the local store decided (Redis could not), with this replica's share.
	Local bool
	// Show is the rule whose numbers the response carries: the enforced rule that denies with
	// the longest retry when one denies, else the decided rule with the least remaining (an
	// enforced rule before a shadow one at a tie); nil when no rule decided the request.
	Show *config.Rule
	// Res is Show's result.
	Res limiter.Result
	// Denied is true when an enforced rule denied the request.
	Denied bool
	// Delay is how long an admitted request waits before it is passed on: the longest delay of
	// its enforced rules; zero when Denied.
	Delay time.Duration
}

// Add folds rule's decision res into v (see Verdict.Show). Front ends use it for every decided
// rule of a request (Decide does), and the RLS server also once per descriptor.
func (v *Verdict) Add(rule *config.Rule, res limiter.Result) {
	enforcedDeny := !res.Allowed && !rule.Shadow
	switch {
	case enforcedDeny:
		if !v.Denied || Retry(res) > Retry(v.Res) {
			v.Show, v.Res = rule, res
		}
		v.Denied = true
		v.Delay = 0
	case v.Denied:
	case v.Show == nil || res.Remaining < v.Res.Remaining ||
		(res.Remaining == v.Res.Remaining && v.Show.Shadow && !rule.Shadow):
		v.Show, v.Res = rule, res
	}
	if !v.Denied && res.Allowed && !rule.Shadow && res.Delay > v.Delay {
		v.Delay = res.Delay
	}
}

// Retry is how long a denied request should wait before it may pass: res.RetryAfter, or the
// time to a full reset for a request that can never pass (cost above capacity).
func Retry(res limiter.Result) time.Duration {
	if res.RetryAfter < 0 {
		return res.ResetAfter
	}
	return res.RetryAfter
}

// RetrySeconds is Retry in whole seconds, rounded up and at least 1: the Retry-After header's
// value and the denial body's retry_after.
func RetrySeconds(res limiter.Result) int64 {
	return max(config.CeilSeconds(Retry(res)), 1)
}
