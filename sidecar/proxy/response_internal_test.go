package proxy

import (
	"maps"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/dataplane/config"
	"github.com/sluice-dev/sluice/internal/dataplane/decide"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/policy"
)

// setHeadersPlain is setHeaders written the obvious way, one allocation per value: the
// reference the optimized version must match byte for byte.
func setHeadersPlain(h http.Header, v *decide.Verdict) {
	rule, res := v.Show, v.Res
	d, hasReset := v.ResetAfter()
	reset := strconv.FormatInt(config.CeilSeconds(d), 10)
	remaining := strconv.FormatInt(res.Remaining, 10)
	if rule.Style.Draft() {
		if res.Limit == rule.Limit.Capacity() {
			h.Set("RateLimit-Policy", rule.DraftPolicy)
		} else {
			h.Set("RateLimit-Policy", rule.Quoted+";q="+strconv.FormatInt(res.Limit, 10)+";w="+
				strconv.FormatInt(max(config.CeilSeconds(rule.Limit.Window), 1), 10))
		}
		if hasReset {
			h.Set("RateLimit", rule.Quoted+";r="+remaining+";t="+reset)
		}
	}
	if rule.Style.Legacy() {
		h.Set("X-RateLimit-Limit", strconv.FormatInt(res.Limit, 10))
		h.Set("X-RateLimit-Remaining", remaining)
		if hasReset {
			h.Set("X-RateLimit-Reset", reset)
		}
	}
	if retry, ok := v.RetryAfter(); ok {
		h.Set("Retry-After", strconv.FormatInt(config.CeilSeconds(retry), 10))
	}
}

func TestSetHeadersMatchesPlain(t *testing.T) {
	for _, style := range []policy.HeaderStyle{policy.HeadersBoth, policy.HeadersDraft, policy.HeadersLegacy} {
		for _, window := range []time.Duration{500 * time.Millisecond, time.Second, time.Hour} {
			lim := limiter.Limit{Algorithm: limiter.TokenBucket, Limit: 100, Burst: 100, Window: window}
			name := "a-rule-name-" + strconv.Itoa(int(window/time.Millisecond))
			quoted := strconv.Quote(name)
			p := &config.Policy{Name: "p"}
			rule := &config.Rule{
				Policy: p, Name: name, Limit: lim, Quoted: quoted, Style: style,
				DraftPolicy: quoted + ";q=100;w=" + strconv.FormatInt(max(config.CeilSeconds(window), 1), 10),
				LimitValue:  "100",
			}
			for _, res := range []limiter.Result{
				{Allowed: true, Limit: 100, Remaining: 99, ResetAfter: 10 * time.Millisecond},
				{Allowed: true, Limit: 25, Remaining: 0, ResetAfter: 0},
				{Allowed: false, Limit: 100, Remaining: 0, ResetAfter: 3601 * time.Second, RetryAfter: 1500 * time.Millisecond},
				{Allowed: false, Limit: 100, Remaining: 0, ResetAfter: 3601 * time.Second, RetryAfter: limiter.NeverRetry},
				{Allowed: true, Limit: 1, Remaining: 1234567890123, ResetAfter: -time.Second},
			} {
				var v decide.Verdict
				v.Add(rule, lim, res)
				got, want := http.Header{}, http.Header{}
				setHeaders(got, &v)
				setHeadersPlain(want, &v)
				if !maps.EqualFunc(got, want, slices.Equal) {
					t.Fatalf("style %+v window %v res %+v:\n got %q\nwant %q", style, window, res, got, want)
				}
				// Adding to one header must not touch another's value.
				for k := range want {
					got, want := http.Header{}, http.Header{}
					setHeaders(got, &v)
					setHeadersPlain(want, &v)
					got.Add(k, "x")
					want.Add(k, "x")
					if !maps.EqualFunc(got, want, slices.Equal) {
						t.Fatalf("after Add(%s): got %q, want %q", k, got, want)
					}
				}
			}
		}
	}
}

func BenchmarkSetHeaders(b *testing.B) {
	lim := limiter.Limit{Algorithm: limiter.TokenBucket, Limit: 100_000_000, Burst: 100_000_000, Window: time.Second}
	p := &config.Policy{Name: "bench"}
	rule := &config.Rule{Policy: p, Style: policy.HeadersBoth, Name: "per-client", Limit: lim, Quoted: `"per-client"`,
		DraftPolicy: `"per-client";q=100000000;w=1`, LimitValue: "100000000"}
	res := limiter.Result{Allowed: true, Limit: 100_000_000, Remaining: 99_999_999, ResetAfter: 10 * time.Nanosecond}
	var v decide.Verdict
	v.Add(rule, lim, res)
	h := http.Header{}
	b.ReportAllocs()
	for b.Loop() {
		clear(h)
		setHeaders(h, &v)
	}
}
