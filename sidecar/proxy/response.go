package proxy

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

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

// rateFields are the rate-limit header fields of one decision, computed once and written into
// either server's header type: each value is a constant of the rule or a span of buf.
type rateFields struct {
	n int
	f [5]rateField
}

type rateField struct {
	name     string
	constant string // the value when isConst
	isConst  bool
	sp       span
}

func (rf *rateFields) addConst(name, v string) {
	rf.f[rf.n] = rateField{name: name, constant: v, isConst: true}
	rf.n++
}

func (rf *rateFields) addSpan(name string, sp span) {
	rf.f[rf.n] = rateField{name: name, sp: sp}
	rf.n++
}

// compute appends the values of rule's decision res to buf and returns it, and fills rf in the rule's policy's styles: the IETF draft's
// RateLimit-Policy and RateLimit structured fields, and the legacy X-RateLimit-Limit/
// -Remaining/-Reset (Reset in seconds, rounded up). The quota is the one that decided: the
// shared limit, or this pod's share when decided locally.
func (rf *rateFields) compute(buf []byte, rule *config.Rule, res limiter.Result) []byte {
	p := rule.Policy
	rf.n = 0
	if !p.Draft && !p.Legacy {
		return buf
	}
	reset := config.CeilSeconds(res.ResetAfter)
	shared := res.Limit == rule.Limit.Capacity()
	if p.Draft {
		if shared {
			rf.addConst(hRateLimitPolicy, rule.DraftPolicy)
		} else { // decided locally with this pod's share
			sp := span{start: len(buf)}
			buf = append(buf, rule.Quoted...)
			buf = append(buf, ";q="...)
			buf = strconv.AppendInt(buf, res.Limit, 10)
			buf = append(buf, ";w="...)
			buf = strconv.AppendInt(buf, max(config.CeilSeconds(rule.Limit.Window), 1), 10)
			sp.end = len(buf)
			rf.addSpan(hRateLimitPolicy, sp)
		}
		sp := span{start: len(buf)}
		buf = append(buf, rule.Quoted...)
		buf = append(buf, ";r="...)
		buf = strconv.AppendInt(buf, res.Remaining, 10)
		buf = append(buf, ";t="...)
		buf = strconv.AppendInt(buf, reset, 10)
		sp.end = len(buf)
		rf.addSpan(hRateLimit, sp)
	}
	if p.Legacy {
		if shared {
			rf.addConst(hLegacyLimit, rule.LimitValue)
		} else {
			sp := span{start: len(buf)}
			buf = strconv.AppendInt(buf, res.Limit, 10)
			sp.end = len(buf)
			rf.addSpan(hLegacyLimit, sp)
		}
		sp := span{start: len(buf)}
		buf = strconv.AppendInt(buf, res.Remaining, 10)
		sp.end = len(buf)
		rf.addSpan(hLegacyRemaining, sp)
		sp = span{start: len(buf)}
		buf = strconv.AppendInt(buf, reset, 10)
		sp.end = len(buf)
		rf.addSpan(hLegacyReset, sp)
	}
	return buf
}

// setHeaders writes the rate-limit headers of rule's decision res (see rateFields.compute)
// into an http.Header.
//
// It runs on every limited h2c request, so it allocates twice whatever the styles: the values
// formatted are one string, sliced per header, and every header's value slice is a
// one-element window of one array (capacity 1, so a later Add to one header reallocates
// rather than overwrite its neighbour).
func setHeaders(h http.Header, rule *config.Rule, res limiter.Result) {
	var rf rateFields
	var scratch [160]byte
	buf := rf.compute(scratch[:0], rule, res)
	if rf.n == 0 {
		return
	}
	s := string(buf)
	vals := make([]string, rf.n)
	for i, f := range rf.f[:rf.n] {
		if f.isConst {
			vals[i] = f.constant
		} else {
			vals[i] = f.sp.of(s)
		}
		h[f.name] = vals[i : i+1 : i+1]
	}
}

// setFastHeaders is setHeaders for a fasthttp response, without allocating.
func setFastHeaders(h *fasthttp.ResponseHeader, rule *config.Rule, res limiter.Result) {
	var rf rateFields
	var scratch [160]byte
	buf := rf.compute(scratch[:0], rule, res)
	for _, f := range rf.f[:rf.n] {
		// The names are canonical constants: no normalizing, no copies (SetCanonical copies).
		if f.isConst {
			h.SetCanonical(s2b(f.name), s2b(f.constant))
		} else {
			h.SetCanonical(s2b(f.name), buf[f.sp.start:f.sp.end])
		}
	}
}

// span is a value's bounds in rateFields' buffer.
type span struct{ start, end int }

func (sp span) of(s string) string { return s[sp.start:sp.end] }

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

// denial returns the Retry-After of rule's denial res, in seconds, and its JSON body.
func denial(rule *config.Rule, res limiter.Result, now time.Time) (int64, []byte) {
	retry := retryAfter(res)
	body, _ := json.Marshal(deniedBody{
		Error: "rate_limit_exceeded",
		Message: "Rate limit exceeded: rule " + strconv.Quote(rule.Name) + " of policy " + strconv.Quote(rule.Policy.Name) +
			" allows " + strconv.FormatInt(res.Limit, 10) + " per " + rule.Limit.Per() +
			"; retry in " + strconv.FormatInt(retry, 10) + "s.",
		RetryAfter: retry,
		Limit:      res.Limit,
		Remaining:  0,
		ResetAt:    now.Add(time.Duration(config.CeilSeconds(res.ResetAfter)) * time.Second).UTC().Truncate(time.Second).Format(time.RFC3339),
		Policy:     rule.Policy.Name,
		Rule:       rule.Name,
	})
	return retry, body
}

// writeDenied answers a request rule denied.
func writeDenied(w http.ResponseWriter, rule *config.Rule, res limiter.Result, now time.Time) {
	retry, body := denial(rule, res, now)
	hd := w.Header()
	setHeaders(hd, rule, res)
	hd[hRetryAfter] = []string{strconv.FormatInt(retry, 10)}
	hd["Content-Type"] = []string{"application/json"}
	hd["Content-Length"] = []string{strconv.Itoa(len(body))}
	hd["Cache-Control"] = []string{"no-store"}
	w.WriteHeader(rule.Policy.StatusCode)
	_, _ = w.Write(body)
}

// writeDeniedFast is writeDenied for a fasthttp request.
func writeDeniedFast(ctx *fasthttp.RequestCtx, rule *config.Rule, res limiter.Result, now time.Time) {
	retry, body := denial(rule, res, now)
	hd := &ctx.Response.Header
	setFastHeaders(hd, rule, res)
	var b [20]byte
	hd.SetBytesV(hRetryAfter, strconv.AppendInt(b[:0], retry, 10))
	hd.SetContentType("application/json")
	hd.Set("Cache-Control", "no-store")
	ctx.SetStatusCode(rule.Policy.StatusCode)
	ctx.SetBody(body)
}

var unavailableBody = []byte(`{"error":"rate_limiter_unavailable","message":"The rate limiter cannot decide and the policy fails closed; retry later."}`)

// writeUnavailable answers 503 while a policy whose failure mode is Closed cannot decide.
func writeUnavailable(w http.ResponseWriter) {
	hd := w.Header()
	hd[hRetryAfter] = []string{"1"}
	hd["Content-Type"] = []string{"application/json"}
	hd["Content-Length"] = []string{strconv.Itoa(len(unavailableBody))}
	hd["Cache-Control"] = []string{"no-store"}
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = w.Write(unavailableBody)
}

// writeUnavailableFast is writeUnavailable for a fasthttp request.
func writeUnavailableFast(ctx *fasthttp.RequestCtx) {
	hd := &ctx.Response.Header
	hd.Set(hRetryAfter, "1")
	hd.SetContentType("application/json")
	hd.Set("Cache-Control", "no-store")
	ctx.SetStatusCode(http.StatusServiceUnavailable)
	ctx.SetBody(unavailableBody)
}

// RateLimitHeaders calls add with each rate-limit header of rule's decision res, in the
// rule's policy's styles, as the sidecar writes them on its responses, and with Retry-After
// (seconds, rounded up, at least 1) when denied: the RLS server's response_headers_to_add.
func RateLimitHeaders(rule *config.Rule, res limiter.Result, denied bool, add func(name, value string)) {
	var rf rateFields
	var scratch [160]byte
	buf := rf.compute(scratch[:0], rule, res)
	for _, f := range rf.f[:rf.n] {
		if f.isConst {
			add(f.name, f.constant)
		} else {
			add(f.name, string(buf[f.sp.start:f.sp.end]))
		}
	}
	if denied {
		add(hRetryAfter, strconv.FormatInt(retryAfter(res), 10))
	}
}
