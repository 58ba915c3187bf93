package decide

import (
	"strconv"
	"time"

	"github.com/sluice-dev/sluice/internal/dataplane/config"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/policy"
)

// The rate-limit header names, in canonical form.
const (
	HeaderRateLimitPolicy = "Ratelimit-Policy"
	HeaderRateLimit       = "Ratelimit"
	HeaderLegacyLimit     = "X-Ratelimit-Limit"
	HeaderLegacyRemaining = "X-Ratelimit-Remaining"
	HeaderLegacyReset     = "X-Ratelimit-Reset"
	HeaderRetryAfter      = "Retry-After"
	// HeaderRetryAfterMs is the exact wait in milliseconds, which OpenAI's SDKs read before
	// Retry-After (Response.RetryAfterMs).
	HeaderRetryAfterMs = "Retry-After-Ms"
	// OpenAI's style: the requests family, and the tokens family for a rule whose cost comes
	// from the response.
	HeaderOpenAILimitRequests     = "X-Ratelimit-Limit-Requests"
	HeaderOpenAIRemainingRequests = "X-Ratelimit-Remaining-Requests"
	HeaderOpenAIResetRequests     = "X-Ratelimit-Reset-Requests"
	HeaderOpenAILimitTokens       = "X-Ratelimit-Limit-Tokens"     //nolint:gosec // a header name, not a credential
	HeaderOpenAIRemainingTokens   = "X-Ratelimit-Remaining-Tokens" //nolint:gosec // a header name, not a credential
	HeaderOpenAIResetTokens       = "X-Ratelimit-Reset-Tokens"     //nolint:gosec // a header name, not a credential
)

// Fields are the rate-limit header fields of one decision, computed once (Compute) and written
// by each front end into its own header type: each value is a constant of the rule or a span of
// the buffer Compute appended to, so that writing them need not allocate.
type Fields struct {
	// N is how many of F are set.
	N int
	F [14]Field
}

// Field is one header of Fields.
type Field struct {
	// Name is the header's canonical name.
	Name string
	// Const is the value when IsConst; else the value is buf[Start:End] of Compute's buffer.
	Const      string
	IsConst    bool
	Start, End int
}

func (rf *Fields) addConst(name, v string) {
	rf.F[rf.N] = Field{Name: name, Const: v, IsConst: true}
	rf.N++
}

func (rf *Fields) addSpan(name string, start, end int) {
	rf.F[rf.N] = Field{Name: name, Start: start, End: end}
	rf.N++
}

// addInt appends n to buf as the value of name.
func (rf *Fields) addInt(buf []byte, name string, n int64) []byte {
	start := len(buf)
	buf = strconv.AppendInt(buf, n, 10)
	rf.addSpan(name, start, len(buf))
	return buf
}

// Compute appends the values of v's rate-limit headers to buf and returns it, and fills rf:
//
//   - After a denial, the headers of the rule that denied (Show) in its style, and
//     Retry-After (with retry-after-ms when its policy asks) when a wait lets the request
//     pass. A rule of style None shows nothing but Retry-After.
//   - After an admission, the headers of the most constraining rule among those of styles
//     Draft, Legacy, Both and Draft7, in its style, and OpenAI's -requests and -tokens
//     families of the most constraining OpenAI-style rule of each.
//
// The quota is the one that decided: the shared limit, or this replica's share when decided
// locally. Every reset is the pick's ResetAfter: in seconds rounded up (X-RateLimit-Reset
// optionally as a Unix time), in OpenAI's duration format to the millisecond; a reset with no
// time (a denial no wait lets pass) leaves out the fields that carry it.
func (rf *Fields) Compute(buf []byte, v *Verdict) []byte {
	rf.N = 0
	if v.Show == nil {
		return buf
	}
	if v.Denied {
		show := Pick{v.Show, v.Lim, v.Res}
		switch style := v.Show.Style; {
		case style == policy.HeadersNone:
		case style != policy.HeadersOpenAI:
			buf = rf.std(buf, v, show)
		case v.Show.Tokens:
			buf = rf.openAI(buf, v.req, false)
			buf = rf.openAI(buf, show, true)
		default:
			buf = rf.openAI(buf, show, false)
			buf = rf.openAI(buf, v.tok, true)
		}
		if d, ok := v.RetryAfter(); ok {
			buf = rf.addInt(buf, HeaderRetryAfter, config.CeilSeconds(d))
			if v.Show.Policy.RetryAfterMs {
				buf = rf.addInt(buf, HeaderRetryAfterMs, d.Milliseconds())
			}
		}
		return buf
	}
	buf = rf.std(buf, v, v.std)
	buf = rf.openAI(buf, v.req, false)
	return rf.openAI(buf, v.tok, true)
}

// std appends p's headers in the style of its rule (Draft, Legacy, Both or Draft7).
func (rf *Fields) std(buf []byte, v *Verdict, p Pick) []byte {
	rule, res := p.Rule, &p.Res
	if rule == nil {
		return buf
	}
	resetD, hasReset := p.ResetAfter()
	reset := config.CeilSeconds(resetD)
	// A Concurrency rule has no window and no reset (a slot frees when a request ends): its
	// fields carry the draft's unit instead, and remaining alone.
	conc := rule.Limit.Algorithm == limiter.Concurrency
	shared := !v.Local && res.Limit == rule.Limit.Capacity()
	style := rule.Style
	if style == policy.HeadersDraft7 {
		if shared {
			rf.addConst(HeaderRateLimitPolicy, rule.Draft7Policy)
		} else {
			start := len(buf)
			buf = strconv.AppendInt(buf, res.Limit, 10)
			if !conc {
				buf = append(buf, ";w="...)
				buf = strconv.AppendInt(buf, max(config.CeilSeconds(rule.Limit.Window), 1), 10)
			}
			rf.addSpan(HeaderRateLimitPolicy, start, len(buf))
		}
		if hasReset {
			start := len(buf)
			buf = append(buf, "limit="...)
			buf = strconv.AppendInt(buf, res.Limit, 10)
			buf = append(buf, ", remaining="...)
			buf = strconv.AppendInt(buf, res.Remaining, 10)
			buf = append(buf, ", reset="...)
			buf = strconv.AppendInt(buf, reset, 10)
			rf.addSpan(HeaderRateLimit, start, len(buf))
		}
		return buf
	}
	if style.Draft() || style == "" {
		if shared {
			rf.addConst(HeaderRateLimitPolicy, rule.DraftPolicy)
		} else { // decided locally with this replica's share
			start := len(buf)
			buf = append(buf, rule.Quoted...)
			buf = append(buf, ";q="...)
			buf = strconv.AppendInt(buf, res.Limit, 10)
			if conc {
				buf = append(buf, `;qu="concurrent-requests"`...)
			} else {
				buf = append(buf, ";w="...)
				buf = strconv.AppendInt(buf, max(config.CeilSeconds(rule.Limit.Window), 1), 10)
			}
			rf.addSpan(HeaderRateLimitPolicy, start, len(buf))
		}
		if hasReset {
			start := len(buf)
			buf = append(buf, rule.Quoted...)
			buf = append(buf, ";r="...)
			buf = strconv.AppendInt(buf, res.Remaining, 10)
			if !conc {
				buf = append(buf, ";t="...)
				buf = strconv.AppendInt(buf, reset, 10)
			}
			rf.addSpan(HeaderRateLimit, start, len(buf))
		}
	}
	if style.Legacy() || style == "" {
		if shared {
			rf.addConst(HeaderLegacyLimit, rule.LimitValue)
		} else {
			buf = rf.addInt(buf, HeaderLegacyLimit, res.Limit)
		}
		buf = rf.addInt(buf, HeaderLegacyRemaining, res.Remaining)
		if hasReset && !conc {
			if rule.Policy.UnixReset {
				reset = (v.At.UnixMilli() + resetD.Milliseconds() + 999) / 1000
			}
			buf = rf.addInt(buf, HeaderLegacyReset, reset)
		}
	}
	return buf
}

// openAI appends p's headers in OpenAI's -requests family, or -tokens when tokens.
func (rf *Fields) openAI(buf []byte, p Pick, tokens bool) []byte {
	if p.Rule == nil {
		return buf
	}
	limit, remaining, reset := HeaderOpenAILimitRequests, HeaderOpenAIRemainingRequests, HeaderOpenAIResetRequests
	if tokens {
		limit, remaining, reset = HeaderOpenAILimitTokens, HeaderOpenAIRemainingTokens, HeaderOpenAIResetTokens
	}
	buf = rf.addInt(buf, limit, p.Res.Limit)
	buf = rf.addInt(buf, remaining, p.Res.Remaining)
	if d, ok := p.ResetAfter(); ok {
		start := len(buf)
		buf = AppendDuration(buf, d)
		rf.addSpan(reset, start, len(buf))
	}
	return buf
}

// AppendDuration appends d, a whole number of milliseconds, in OpenAI's reset format, which is
// Go's time.Duration.String: "0s", "20ms", "1.05s", "6m0s", "1h2m3.5s".
func AppendDuration(buf []byte, d time.Duration) []byte {
	ms := d.Milliseconds()
	switch {
	case ms <= 0:
		return append(buf, "0s"...)
	case ms < 1000:
		buf = strconv.AppendInt(buf, ms, 10)
		return append(buf, "ms"...)
	}
	h, m, s, frac := ms/3_600_000, ms/60_000%60, ms/1000%60, ms%1000
	if h > 0 {
		buf = strconv.AppendInt(buf, h, 10)
		buf = append(buf, 'h')
	}
	if h > 0 || m > 0 {
		buf = strconv.AppendInt(buf, m, 10)
		buf = append(buf, 'm')
	}
	buf = strconv.AppendInt(buf, s, 10)
	if frac > 0 {
		buf = append(buf, '.', byte('0'+frac/100))
		if frac%100 > 0 {
			buf = append(buf, byte('0'+frac/10%10))
			if frac%10 > 0 {
				buf = append(buf, byte('0'+frac%10))
			}
		}
	}
	return append(buf, 's')
}

// Headers calls add with each header of v that Compute computes, as the sidecar writes them on
// its responses: the RLS server's response_headers_to_add.
func (v *Verdict) Headers(add func(name, value string)) {
	if v.Show == nil {
		return
	}
	var rf Fields
	var scratch [256]byte
	buf := rf.Compute(scratch[:0], v)
	for i := range rf.F[:rf.N] {
		f := &rf.F[i]
		if f.IsConst {
			add(f.Name, f.Const)
		} else {
			add(f.Name, string(buf[f.Start:f.End]))
		}
	}
}
