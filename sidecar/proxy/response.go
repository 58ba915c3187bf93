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

// retryAfter is the Retry-After of a denial in seconds: RetryAfter rounded up and at least 1.
// A request that can never pass (cost above capacity) gets the time to a full reset.
func retryAfter(res limiter.Result) int64 {
	d := res.RetryAfter
	if d < 0 {
		d = res.ResetAfter
	}
	return max(config.CeilSeconds(d), 1)
}

// setHeaders writes the rate-limit headers of rule's decision res in the rule's policy's
// styles: the IETF draft's RateLimit-Policy and RateLimit structured fields, and the legacy
// X-RateLimit-Limit/-Remaining/-Reset (Reset in seconds, rounded up). The quota is the one that
// decided: the shared limit, or this pod's share when decided locally.
//
// It runs on every limited request, so it allocates twice whatever the styles: the values
// formatted here are appended to one buffer and become one string, sliced per header, and
// every header's value slice is a one-element window of one array (capacity 1, so a later Add
// to one header reallocates rather than overwrite its neighbour).
func setHeaders(h http.Header, rule *config.Rule, res limiter.Result) {
	p := rule.Policy
	if !p.Draft && !p.Legacy {
		return
	}
	reset := config.CeilSeconds(res.ResetAfter)
	shared := res.Limit == rule.Limit.Capacity()

	var scratch [160]byte
	buf := scratch[:0]
	var policyV, rateV, limitV, remainingV, resetV span
	if p.Draft {
		if !shared { // decided locally with this pod's share
			policyV.start = len(buf)
			buf = append(buf, rule.Quoted...)
			buf = append(buf, ";q="...)
			buf = strconv.AppendInt(buf, res.Limit, 10)
			buf = append(buf, ";w="...)
			buf = strconv.AppendInt(buf, max(config.CeilSeconds(rule.Limit.Window), 1), 10)
			policyV.end = len(buf)
		}
		rateV.start = len(buf)
		buf = append(buf, rule.Quoted...)
		buf = append(buf, ";r="...)
		buf = strconv.AppendInt(buf, res.Remaining, 10)
		buf = append(buf, ";t="...)
		buf = strconv.AppendInt(buf, reset, 10)
		rateV.end = len(buf)
	}
	if p.Legacy {
		if !shared {
			limitV.start = len(buf)
			buf = strconv.AppendInt(buf, res.Limit, 10)
			limitV.end = len(buf)
		}
		remainingV.start = len(buf)
		buf = strconv.AppendInt(buf, res.Remaining, 10)
		remainingV.end = len(buf)
		resetV.start = len(buf)
		buf = strconv.AppendInt(buf, reset, 10)
		resetV.end = len(buf)
	}
	s := string(buf)
	hs := headerSetter{h: h, vals: make([]string, 5)}
	if p.Draft {
		if shared {
			hs.set(hRateLimitPolicy, rule.DraftPolicy)
		} else {
			hs.set(hRateLimitPolicy, policyV.of(s))
		}
		hs.set(hRateLimit, rateV.of(s))
	}
	if p.Legacy {
		if shared {
			hs.set(hLegacyLimit, rule.LimitValue)
		} else {
			hs.set(hLegacyLimit, limitV.of(s))
		}
		hs.set(hLegacyRemaining, remainingV.of(s))
		hs.set(hLegacyReset, resetV.of(s))
	}
}

// span is a value's bounds in setHeaders' buffer.
type span struct{ start, end int }

func (sp span) of(s string) string { return s[sp.start:sp.end] }

// headerSetter assigns single-valued headers, their value slices carved from vals.
type headerSetter struct {
	h    http.Header
	vals []string
}

func (hs *headerSetter) set(name, v string) {
	hs.vals[0] = v
	hs.h[name] = hs.vals[:1:1]
	hs.vals = hs.vals[1:]
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
		ResetAt:    now.Add(time.Duration(config.CeilSeconds(res.ResetAfter)) * time.Second).UTC().Truncate(time.Second).Format(time.RFC3339),
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
