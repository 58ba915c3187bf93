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
	"github.com/sluice-dev/sluice/internal/policy"
)

// setHeaders writes the rate-limit headers of v (see decide.Fields.Compute) into an
// http.Header.
//
// It runs on every limited h2c request, so it allocates twice whatever the styles: the values
// formatted are one string, sliced per header, and every header's value slice is a
// one-element window of one array (capacity 1, so a later Add to one header reallocates
// rather than overwrite its neighbour).
func setHeaders(h http.Header, v *decide.Verdict) {
	var rf decide.Fields
	var scratch [256]byte
	buf := rf.Compute(scratch[:0], v)
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
func setFastHeaders(h *fasthttp.ResponseHeader, v *decide.Verdict) {
	var rf decide.Fields
	var scratch [256]byte
	buf := rf.Compute(scratch[:0], v)
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

// deniedBody is the JSON body of a limited request (BodyJSON); the field order is the
// contract's. RetryAfter and ResetAt are left out when no wait lets the request pass (Reason
// says why).
type deniedBody struct {
	Error      string `json:"error"`
	Message    string `json:"message"`
	Reason     string `json:"reason"`
	RetryAfter *int64 `json:"retry_after,omitempty"`
	Limit      int64  `json:"limit"`
	Remaining  int64  `json:"remaining"`
	ResetAt    string `json:"reset_at,omitempty"`
	Policy     string `json:"policy"`
	Rule       string `json:"rule"`
}

// openAIBody is OpenAI's error object (BodyOpenAI), as its SDKs parse it: type is "tokens"
// for a rule whose cost comes from the response, else "requests".
type openAIBody struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    string  `json:"code"`
	} `json:"error"`
}

// denialData is what every body format says of v's denial.
func denialData(v *decide.Verdict) policy.TemplateData {
	rule, res := v.Show, &v.Res
	d := policy.TemplateData{Status: rule.Policy.StatusCode, Policy: rule.Policy.Name, Rule: rule.Name,
		Reason: string(res.Reason), Limit: res.Limit}
	msg := "Rate limit exceeded: rule " + strconv.Quote(rule.Name) + " of policy " + strconv.Quote(rule.Policy.Name) +
		" allows " + strconv.FormatInt(res.Limit, 10) + " per " + rule.Limit.Per()
	if retry, ok := v.RetryAfter(); ok {
		d.CanRetry, d.RetryAfter, d.RetryAfterMs = true, config.CeilSeconds(retry), retry.Milliseconds()
		d.ResetAt = v.At.Add(time.Duration(d.RetryAfter) * time.Second).UTC().Truncate(time.Second).Format(time.RFC3339)
		msg += "; retry in " + strconv.FormatInt(d.RetryAfter, 10) + "s."
	} else {
		msg += "; " + never(res.Reason)
	}
	d.Message = msg
	return d
}

// denial returns the content type and body of v's denial, in its policy's body format.
func denial(v *decide.Verdict) (contentType string, body []byte) {
	d := denialData(v)
	p := v.Show.Policy
	switch p.Body {
	case policy.BodyOpenAI:
		var b openAIBody
		b.Error.Message, b.Error.Type, b.Error.Code = d.Message, "requests", "rate_limit_exceeded"
		if v.Show.Tokens {
			b.Error.Type = "tokens"
		}
		body, _ = json.Marshal(b)
		return jsonType, body
	case policy.BodyText:
		return "text/plain; charset=utf-8", []byte(d.Message + "\n")
	case policy.BodyTemplate:
		return p.ContentType, p.Template.Append(nil, &d)
	}
	b := deniedBody{Error: "rate_limit_exceeded", Message: d.Message, Reason: d.Reason, Limit: d.Limit,
		ResetAt: d.ResetAt, Policy: d.Policy, Rule: d.Rule}
	if d.CanRetry {
		b.RetryAfter = &d.RetryAfter
	}
	body, _ = json.Marshal(b)
	return jsonType, body
}

// never says why no wait lets a denied request pass.
func never(r limiter.Reason) string {
	if r == limiter.ReasonNoShare {
		return "this replica holds no share of the limit while the shared store is unavailable: no wait lets the request pass here until it is back."
	}
	return "the request costs more than the limit's capacity: no wait lets it pass."
}

// writeDenied answers a request v denied: its headers (Retry-After among them, see
// decide.Fields.Compute) and its body.
func writeDenied(w http.ResponseWriter, v *decide.Verdict) {
	contentType, body := denial(v)
	hd := w.Header()
	setHeaders(hd, v)
	hd["Content-Type"] = []string{contentType}
	hd["Content-Length"] = []string{strconv.Itoa(len(body))}
	hd["Cache-Control"] = []string{"no-store"}
	w.WriteHeader(v.Show.Policy.StatusCode)
	_, _ = w.Write(body)
}

// writeDeniedFast is writeDenied for a fasthttp request.
func writeDeniedFast(ctx *fasthttp.RequestCtx, v *decide.Verdict) {
	contentType, body := denial(v)
	hd := &ctx.Response.Header
	setFastHeaders(hd, v)
	hd.SetContentType(contentType)
	hd.Set("Cache-Control", "no-store")
	ctx.SetStatusCode(v.Show.Policy.StatusCode)
	ctx.SetBody(body)
}

// jsonType is the Content-Type of the sidecar's own JSON answers.
const jsonType = "application/json"

var unavailableBody = []byte(`{"error":"rate_limiter_unavailable","message":"The rate limiter cannot decide and the policy fails closed; retry later."}`)

// writeUnavailable answers 503 while a policy whose failure mode is Closed cannot decide. It
// carries no Retry-After: the request passes once Redis answers again, which no one knows when.
func writeUnavailable(w http.ResponseWriter) {
	hd := w.Header()
	hd["Content-Type"] = []string{jsonType}
	hd["Content-Length"] = []string{strconv.Itoa(len(unavailableBody))}
	hd["Cache-Control"] = []string{"no-store"}
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = w.Write(unavailableBody)
}

// writeUnavailableFast is writeUnavailable for a fasthttp request.
func writeUnavailableFast(ctx *fasthttp.RequestCtx) {
	hd := &ctx.Response.Header
	hd.SetContentType(jsonType)
	hd.Set("Cache-Control", "no-store")
	ctx.SetStatusCode(http.StatusServiceUnavailable)
	ctx.SetBody(unavailableBody)
}
