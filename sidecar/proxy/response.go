package proxy

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/sidecar/config"
)

// Header names in canonical form, assigned directly to the header map.
const (
	hRateLimitPolicy = "Ratelimit-Policy"
	hRateLimit       = "Ratelimit"
	hLegacyLimit     = "X-Ratelimit-Limit"
	hLegacyRemaining = "X-Ratelimit-Remaining"
	hLegacyReset     = "X-Ratelimit-Reset"
	hRetryAfter      = "Retry-After"
)

// ceilSeconds is d in whole seconds, rounded up; 0 for d <= 0.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// retryAfter is the Retry-After of a denial in seconds: RetryAfter rounded up and at least 1.
// A request that can never pass (cost above capacity) gets the time to a full reset.
func retryAfter(res limiter.Result) int64 {
	d := res.RetryAfter
	if d < 0 {
		d = res.ResetAfter
	}
	return max(ceilSeconds(d), 1)
}

// setHeaders writes the rate-limit headers of rule's decision res in the rule's policy's
// styles: the IETF draft's RateLimit-Policy and RateLimit structured fields, and the legacy
// X-RateLimit-Limit/-Remaining/-Reset (Reset in seconds, rounded up). The quota is the one that
// decided: the shared limit, or this pod's share when decided locally.
func setHeaders(h http.Header, rule *config.Rule, res limiter.Result) {
	p := rule.Policy
	if !p.Draft && !p.Legacy {
		return
	}
	var b [24]byte
	reset := ceilSeconds(res.ResetAfter)
	if p.Draft {
		if res.Limit == rule.Limit.Capacity() {
			h[hRateLimitPolicy] = []string{rule.DraftPolicy}
		} else { // decided locally with this pod's share
			h[hRateLimitPolicy] = []string{rule.Quoted + ";q=" + strconv.FormatInt(res.Limit, 10) + ";w=" +
				strconv.FormatInt(max(ceilSeconds(rule.Limit.Window), 1), 10)}
		}
		v := make([]byte, 0, len(rule.Quoted)+32)
		v = append(v, rule.Quoted...)
		v = append(v, ";r="...)
		v = strconv.AppendInt(v, res.Remaining, 10)
		v = append(v, ";t="...)
		v = strconv.AppendInt(v, reset, 10)
		h[hRateLimit] = []string{string(v)}
	}
	if p.Legacy {
		if res.Limit == rule.Limit.Capacity() {
			h[hLegacyLimit] = []string{rule.LimitValue}
		} else {
			h[hLegacyLimit] = []string{strconv.FormatInt(res.Limit, 10)}
		}
		h[hLegacyRemaining] = []string{string(strconv.AppendInt(b[:0], res.Remaining, 10))}
		h[hLegacyReset] = []string{string(strconv.AppendInt(b[:0], reset, 10))}
	}
}

// deniedBody is the JSON body of a limited request; the field order is the contract's.
type deniedBody struct {
	Error      string `json:"error"`
	Message    string `json:"message"`
	RetryAfter int64  `json:"retry_after"`
	Limit      int64  `json:"limit"`
	Remaining  int64  `json:"remaining"`
	ResetAt    string `json:"reset_at"`
	Policy     string `json:"policy"`
	Rule       string `json:"rule"`
}

// writeDenied answers a request rule denied.
func (h *Handler) writeDenied(w http.ResponseWriter, rule *config.Rule, res limiter.Result, now time.Time) {
	retry := retryAfter(res)
	body, _ := json.Marshal(deniedBody{
		Error: "rate_limit_exceeded",
		Message: "Rate limit exceeded: rule " + strconv.Quote(rule.Name) + " of policy " + strconv.Quote(rule.Policy.Name) +
			" allows " + strconv.FormatInt(res.Limit, 10) + " per " + rule.Limit.Window.String() +
			"; retry in " + strconv.FormatInt(retry, 10) + "s.",
		RetryAfter: retry,
		Limit:      res.Limit,
		Remaining:  0,
		ResetAt:    now.Add(time.Duration(ceilSeconds(res.ResetAfter)) * time.Second).UTC().Truncate(time.Second).Format(time.RFC3339),
		Policy:     rule.Policy.Name,
		Rule:       rule.Name,
	})
	hd := w.Header()
	setHeaders(hd, rule, res)
	hd[hRetryAfter] = []string{strconv.FormatInt(retry, 10)}
	hd["Content-Type"] = []string{"application/json"}
	hd["Content-Length"] = []string{strconv.Itoa(len(body))}
	hd["Cache-Control"] = []string{"no-store"}
	w.WriteHeader(rule.Policy.StatusCode)
	_, _ = w.Write(body)
}

var unavailableBody = []byte(`{"error":"rate_limiter_unavailable","message":"The rate limiter cannot decide and the policy fails closed; retry later."}`)

// writeUnavailable answers 503 for policy p, whose failure mode is Closed, while Redis cannot
// decide.
func writeUnavailable(w http.ResponseWriter, _ *config.Policy) {
	hd := w.Header()
	hd[hRetryAfter] = []string{"1"}
	hd["Content-Type"] = []string{"application/json"}
	hd["Content-Length"] = []string{strconv.Itoa(len(unavailableBody))}
	hd["Cache-Control"] = []string{"no-store"}
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = w.Write(unavailableBody)
}
