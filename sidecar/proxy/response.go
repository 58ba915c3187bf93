package proxy

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluice-dev/sluice/internal/dataplane/config"
	"github.com/sluice-dev/sluice/internal/dataplane/decide"
	"github.com/sluice-dev/sluice/internal/limiter"
)

// hRetryAfter is Retry-After in canonical form, assigned directly to the header map.
const hRetryAfter = decide.HeaderRetryAfter

// setHeaders writes the rate-limit headers of rule's decision res (see decide.Fields.Compute)
// into an http.Header.
//
// It runs on every limited h2c request, so it allocates twice whatever the styles: the values
// formatted are one string, sliced per header, and every header's value slice is a
// one-element window of one array (capacity 1, so a later Add to one header reallocates
// rather than overwrite its neighbour).
func setHeaders(h http.Header, rule *config.Rule, res limiter.Result) {
	var rf decide.Fields
	var scratch [160]byte
	buf := rf.Compute(scratch[:0], rule, res)
	if rf.N == 0 {
		return
	}
	s := string(buf)
	vals := make([]string, rf.N)
	for i := range rf.F[:rf.N] {
		f := &rf.F[i]
		if f.IsConst {
			vals[i] = f.Const
		} else {
			vals[i] = s[f.Start:f.End]
		}
		h[f.Name] = vals[i : i+1 : i+1]
	}
}

// setFastHeaders is setHeaders for a fasthttp response, without allocating.
func setFastHeaders(h *fasthttp.ResponseHeader, rule *config.Rule, res limiter.Result) {
	var rf decide.Fields
	var scratch [160]byte
	buf := rf.Compute(scratch[:0], rule, res)
	for i := range rf.F[:rf.N] {
		f := &rf.F[i]
		// The names are canonical constants: no normalizing, no copies (SetCanonical copies).
		if f.IsConst {
			h.SetCanonical(s2b(f.Name), s2b(f.Const))
		} else {
			h.SetCanonical(s2b(f.Name), buf[f.Start:f.End])
		}
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

// denial returns the Retry-After of rule's denial res, in seconds, and its JSON body.
func denial(rule *config.Rule, res limiter.Result, now time.Time) (int64, []byte) {
	retry := decide.RetrySeconds(res)
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
