package decide

import (
	"strconv"

	"github.com/sluice-dev/sluice/internal/dataplane/config"
)

// The rate-limit header names, in canonical form.
const (
	HeaderRateLimitPolicy = "Ratelimit-Policy"
	HeaderRateLimit       = "Ratelimit"
	HeaderLegacyLimit     = "X-Ratelimit-Limit"
	HeaderLegacyRemaining = "X-Ratelimit-Remaining"
	HeaderLegacyReset     = "X-Ratelimit-Reset"
	HeaderRetryAfter      = "Retry-After"
)

// Fields are the rate-limit header fields of one decision, computed once (Compute) and written
// by each front end into its own header type: each value is a constant of the rule or a span of
// the buffer Compute appended to, so that writing them need not allocate.
type Fields struct {
	// N is how many of F are set.
	N int
	F [5]Field
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

// Compute appends the values of v's decision to buf and returns it, and fills rf in the
// styles of the policy of v.Show: the IETF draft's RateLimit-Policy and RateLimit structured
// fields, and the legacy X-RateLimit-Limit/-Remaining/-Reset. The quota is the one that
// decided: the shared limit, or this replica's share when decided locally. Every reset is
// Verdict.ResetAfter in seconds, rounded up; a reset with no time (a denial no wait lets
// pass) leaves out the fields that carry it (RateLimit, X-RateLimit-Reset).
func (rf *Fields) Compute(buf []byte, v *Verdict) []byte {
	rf.N = 0
	rule, res := v.Show, &v.Res
	if rule == nil {
		return buf
	}
	p := rule.Policy
	if !p.Draft && !p.Legacy {
		return buf
	}
	resetD, hasReset := v.ResetAfter()
	reset := config.CeilSeconds(resetD)
	shared := !v.Local && res.Limit == rule.Limit.Capacity()
	if p.Draft {
		if shared {
			rf.addConst(HeaderRateLimitPolicy, rule.DraftPolicy)
		} else { // decided locally with this replica's share
			start := len(buf)
			buf = append(buf, rule.Quoted...)
			buf = append(buf, ";q="...)
			buf = strconv.AppendInt(buf, res.Limit, 10)
			buf = append(buf, ";w="...)
			buf = strconv.AppendInt(buf, max(config.CeilSeconds(rule.Limit.Window), 1), 10)
			rf.addSpan(HeaderRateLimitPolicy, start, len(buf))
		}
		if hasReset {
			start := len(buf)
			buf = append(buf, rule.Quoted...)
			buf = append(buf, ";r="...)
			buf = strconv.AppendInt(buf, res.Remaining, 10)
			buf = append(buf, ";t="...)
			buf = strconv.AppendInt(buf, reset, 10)
			rf.addSpan(HeaderRateLimit, start, len(buf))
		}
	}
	if p.Legacy {
		if shared {
			rf.addConst(HeaderLegacyLimit, rule.LimitValue)
		} else {
			start := len(buf)
			buf = strconv.AppendInt(buf, res.Limit, 10)
			rf.addSpan(HeaderLegacyLimit, start, len(buf))
		}
		start := len(buf)
		buf = strconv.AppendInt(buf, res.Remaining, 10)
		rf.addSpan(HeaderLegacyRemaining, start, len(buf))
		if hasReset {
			start = len(buf)
			buf = strconv.AppendInt(buf, reset, 10)
			rf.addSpan(HeaderLegacyReset, start, len(buf))
		}
	}
	return buf
}

// Headers calls add with each rate-limit header of v, in its rule's policy's styles, as the
// sidecar writes them on its responses, and with Retry-After when v is Denied and a wait lets
// the request pass: the RLS server's response_headers_to_add. Nothing is added when no rule
// decided.
func (v *Verdict) Headers(add func(name, value string)) {
	if v.Show == nil {
		return
	}
	var rf Fields
	var scratch [160]byte
	buf := rf.Compute(scratch[:0], v)
	for i := range rf.F[:rf.N] {
		f := &rf.F[i]
		if f.IsConst {
			add(f.Name, f.Const)
		} else {
			add(f.Name, string(buf[f.Start:f.End]))
		}
	}
	if d, ok := v.RetryAfter(); ok {
		add(HeaderRetryAfter, strconv.FormatInt(config.CeilSeconds(d), 10))
	}
}
