package policy

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// MaxTemplateBytes bounds a Template body's template, as the API does.
const MaxTemplateBytes = 4096

// jsonFunc is the one function a template may call: {{json .Field}} or {{.Field | json}}.
const jsonFunc = "json"

// TemplateData is what a BodyTemplate's template executes over: one denial. The field names
// are the contract with users' templates (the API's documentation lists them).
type TemplateData struct {
	// Status is the answer's HTTP status.
	Status int
	// Policy and Rule name the rule that denied.
	Policy, Rule string
	// Reason is why: limited, cost_exceeds_capacity, delay_exceeds_max_delay, no_local_share.
	Reason string
	// Limit is the quota that decided (the shared limit's capacity, or this replica's share).
	Limit int64
	// Remaining is 0: a denial leaves the request nothing.
	Remaining int64
	// CanRetry is false when no wait lets the request pass; RetryAfter (seconds, rounded up)
	// and RetryAfterMs are then 0 and ResetAt is empty.
	CanRetry                 bool
	RetryAfter, RetryAfterMs int64
	// ResetAt is when the request passes, RFC 3339 in UTC, to the second (rounded up).
	ResetAt string
	// Message is a sentence saying all of it.
	Message string
}

// SampleTemplateData is a denial to check templates with.
var SampleTemplateData = TemplateData{Status: 429, Policy: "p", Rule: "r", Reason: "limited", Limit: 10,
	CanRetry: true, RetryAfter: 2, RetryAfterMs: 1050, ResetAt: "2026-01-01T00:00:02Z", Message: "Rate limit exceeded."}

// Body templates. A template is Go text/template syntax over TemplateData, limited to what a
// body needs: text; {{.Field}}; {{json .Field}} or {{.Field | json}} (the field as JSON);
// {{if .Field}}, {{if not .Field}}, {{else if ...}}, {{else}} and {{end}} (a field is true
// unless false, 0 or empty, as in text/template); comments {{/* ... */}}; and the trim markers
// {{- and -}}. What it accepts renders exactly as text/template renders it (a test holds
// that); anything else is an error naming what is not supported. It is rendered without
// reflection: text/template's method lookups by name keep every exported method of the binary
// alive, which grew the sidecar by two thirds.

// Template is a parsed body template. Safe for concurrent use.
type Template struct{ nodes []tnode }

// tnode is text, a field's value, or a conditional.
type tnode struct {
	text  string
	field tfield // > 0: the field's value
	json  bool   // the field as JSON
	// cond: branches tried in order, then els.
	cond []tbranch
	els  []tnode
}

type tbranch struct {
	field tfield
	not   bool
	body  []tnode
}

// tfield is a field of TemplateData, from 1.
type tfield uint8

const (
	fStatus tfield = iota + 1
	fPolicy
	fRule
	fReason
	fLimit
	fRemaining
	fCanRetry
	fRetryAfter
	fRetryAfterMs
	fResetAt
	fMessage
)

var tfields = map[string]tfield{"Status": fStatus, "Policy": fPolicy, "Rule": fRule, "Reason": fReason,
	"Limit": fLimit, "Remaining": fRemaining, "CanRetry": fCanRetry, "RetryAfter": fRetryAfter,
	"RetryAfterMs": fRetryAfterMs, "ResetAt": fResetAt, "Message": fMessage}

// fieldList names the fields for error messages.
const fieldList = ".Status, .Policy, .Rule, .Reason, .Limit, .Remaining, .CanRetry, .RetryAfter, .RetryAfterMs, .ResetAt, .Message"

// ParseTemplate parses a Template body's template: an unknown field or function, a construct
// the body templates do not support, or a syntax error, is an error.
func ParseTemplate(s string) (*Template, error) {
	if s == "" {
		return nil, errors.New("empty template")
	}
	if len(s) > MaxTemplateBytes {
		return nil, errors.New("template longer than 4096 bytes")
	}
	p := tparser{src: s}
	nodes, end, err := p.list()
	if err != nil {
		return nil, err
	}
	if end != "" {
		return nil, p.errorf("unexpected {{%s}}", end)
	}
	return &Template{nodes: nodes}, nil
}

// CheckTemplate is ParseTemplate's error.
func CheckTemplate(s string) error {
	_, err := ParseTemplate(s)
	return err
}

// Append renders the template over d onto dst.
func (t *Template) Append(dst []byte, d *TemplateData) []byte { return appendNodes(dst, t.nodes, d) }

func appendNodes(dst []byte, nodes []tnode, d *TemplateData) []byte {
	for i := range nodes {
		n := &nodes[i]
		switch {
		case n.field > 0 && n.json:
			dst = appendJSON(dst, n.field, d)
		case n.field > 0:
			dst = appendField(dst, n.field, d)
		case n.cond != nil:
			body := n.els
			for j := range n.cond {
				if b := &n.cond[j]; truth(b.field, d) != b.not {
					body = b.body
					break
				}
			}
			dst = appendNodes(dst, body, d)
		default:
			dst = append(dst, n.text...)
		}
	}
	return dst
}

// value is f's value in d: an int64, a bool or a string.
func value(f tfield, d *TemplateData) (int64, bool, string, byte) {
	switch f {
	case fStatus:
		return int64(d.Status), false, "", 'i'
	case fLimit:
		return d.Limit, false, "", 'i'
	case fRemaining:
		return d.Remaining, false, "", 'i'
	case fRetryAfter:
		return d.RetryAfter, false, "", 'i'
	case fRetryAfterMs:
		return d.RetryAfterMs, false, "", 'i'
	case fCanRetry:
		return 0, d.CanRetry, "", 'b'
	case fPolicy:
		return 0, false, d.Policy, 's'
	case fRule:
		return 0, false, d.Rule, 's'
	case fReason:
		return 0, false, d.Reason, 's'
	case fResetAt:
		return 0, false, d.ResetAt, 's'
	default:
		return 0, false, d.Message, 's'
	}
}

func appendField(dst []byte, f tfield, d *TemplateData) []byte {
	i, b, s, kind := value(f, d)
	switch kind {
	case 'i':
		return strconv.AppendInt(dst, i, 10)
	case 'b':
		return strconv.AppendBool(dst, b)
	}
	return append(dst, s...)
}

func appendJSON(dst []byte, f tfield, d *TemplateData) []byte {
	_, _, s, kind := value(f, d)
	if kind != 's' {
		return appendField(dst, f, d) // numbers and booleans are their own JSON
	}
	out, _ := json.Marshal(s) // a string always marshals
	return append(dst, out...)
}

// truth is text/template's: false, 0 and "" are false.
func truth(f tfield, d *TemplateData) bool {
	i, b, s, kind := value(f, d)
	switch kind {
	case 'i':
		return i != 0
	case 'b':
		return b
	}
	return s != ""
}

// tparser parses a template from src[pos:].
type tparser struct {
	src string
	pos int
	// trim: the next text starts after the whitespace a -}} trims.
	trim bool
}

func (p *tparser) errorf(format string, args ...any) error {
	line := 1 + strings.Count(p.src[:p.pos], "\n")
	return fmt.Errorf("template: body:%d: %s", line, fmt.Sprintf(format, args...))
}

// list parses nodes up to the end of src or an {{else...}} or {{end}}, which it returns (the
// action's words, "" at the end of src).
func (p *tparser) list() ([]tnode, string, error) {
	var nodes []tnode
	for {
		i := strings.Index(p.src[p.pos:], "{{")
		text := p.src[p.pos:]
		if i >= 0 {
			text = text[:i]
		}
		if p.trim {
			text = strings.TrimLeft(text, spaceChars)
			p.trim = false
		}
		if i < 0 {
			p.pos = len(p.src)
			if text != "" {
				nodes = append(nodes, tnode{text: text})
			}
			return nodes, "", nil
		}
		p.pos += i + 2
		if strings.HasPrefix(p.src[p.pos:], "-") && len(p.src) > p.pos+1 && strings.IndexByte(spaceChars, p.src[p.pos+1]) >= 0 {
			text = strings.TrimRight(text, spaceChars)
			p.pos += 2
		}
		if text != "" {
			nodes = append(nodes, tnode{text: text})
		}
		action, err := p.action()
		if err != nil {
			return nil, "", err
		}
		if action == "/*" {
			continue // a comment
		}
		words := strings.Fields(strings.ReplaceAll(action, "|", " | "))
		switch {
		case len(words) == 0:
			return nil, "", p.errorf("missing value for command")
		case words[0] == "if":
			n, err := p.cond(words[1:])
			if err != nil {
				return nil, "", err
			}
			nodes = append(nodes, n)
		case words[0] == "else" || words[0] == "end":
			return nodes, action, nil
		default:
			n, err := p.pipeline(words)
			if err != nil {
				return nil, "", err
			}
			nodes = append(nodes, n)
		}
	}
}

const spaceChars = " \t\r\n"

// action reads an action's content up to its }}, after {{ and a trim marker; a comment's
// content is returned blank.
func (p *tparser) action() (string, error) {
	rest := p.src[p.pos:]
	if c := rest; strings.HasPrefix(c, "/*") {
		j := strings.Index(c, "*/")
		if j < 0 {
			return "", p.errorf("unclosed comment")
		}
		after := c[j+2:]
		switch {
		case strings.HasPrefix(after, "}}"):
		case len(after) >= 4 && strings.IndexByte(spaceChars, after[0]) >= 0 && strings.HasPrefix(after[1:], "-}}"):
			p.trim = true
			after = after[2:]
		default:
			return "", p.errorf("comment ends before closing delimiter")
		}
		p.pos = len(p.src) - len(after) + 2
		return "/*", nil
	}
	j := strings.Index(rest, "}}")
	if j < 0 {
		return "", p.errorf("unclosed action")
	}
	action := rest[:j]
	p.pos += j + 2
	if k := len(action) - 1; k >= 1 && action[k] == '-' && strings.IndexByte(spaceChars, action[k-1]) >= 0 {
		action = action[:k]
		p.trim = true
	}
	if strings.ContainsAny(action, "\"`'()$:=") {
		return "", p.errorf("{{%s}}: body templates support fields (%s), json, if, else and end only", strings.TrimSpace(action), fieldList)
	}
	return action, nil
}

// field parses one field reference.
func (p *tparser) field(w string) (tfield, error) {
	if !strings.HasPrefix(w, ".") {
		if _, ok := tfields[w]; ok || w == "not" || w == jsonFunc {
			return 0, p.errorf("%s: a field is written with a dot, as .%s", w, w)
		}
		switch w {
		case "range", "with", "define", "template", "block", "break", "continue", "nil":
			return 0, p.errorf("%s: body templates support fields (%s), json, if, else and end only", w, fieldList)
		}
		return 0, p.errorf("function %q not defined (body templates have json and, in if, not)", w)
	}
	f, ok := tfields[w[1:]]
	if !ok {
		return 0, p.errorf("can't evaluate field %s (the fields are %s)", w[1:], fieldList)
	}
	return f, nil
}

// pipeline parses .Field, json .Field or .Field | json.
func (p *tparser) pipeline(words []string) (tnode, error) {
	var n tnode
	var err error
	switch {
	case len(words) == 1:
		n.field, err = p.field(words[0])
	case len(words) == 2 && words[0] == jsonFunc:
		n.field, err = p.field(words[1])
		n.json = true
	case len(words) == 3 && words[1] == "|" && words[2] == jsonFunc:
		n.field, err = p.field(words[0])
		n.json = true
	default:
		if len(words) > 0 && !strings.HasPrefix(words[0], ".") && words[0] != jsonFunc {
			_, err = p.field(words[0])
			if err != nil {
				return n, err
			}
		}
		return n, p.errorf("{{%s}}: body templates support {{.Field}}, {{json .Field}} and {{.Field | json}}", strings.Join(words, " "))
	}
	return n, err
}

// cond parses an if after its words (.Field or not .Field), up to its end.
func (p *tparser) cond(words []string) (tnode, error) {
	var n tnode
	for {
		var b tbranch
		switch {
		case len(words) == 1:
		case len(words) == 2 && words[0] == "not":
			b.not = true
			words = words[1:]
		default:
			return n, p.errorf("{{if %s}}: body templates support {{if .Field}} and {{if not .Field}}", strings.Join(words, " "))
		}
		f, err := p.field(words[0])
		if err != nil {
			return n, err
		}
		b.field = f
		body, end, err := p.list()
		if err != nil {
			return n, err
		}
		b.body = body
		n.cond = append(n.cond, b)
		ew := strings.Fields(end)
		switch {
		case end == "":
			return n, p.errorf("unexpected EOF: {{if}} without {{end}}")
		case len(ew) == 1 && ew[0] == "end":
			return n, nil
		case len(ew) >= 2 && ew[0] == "else" && ew[1] == "if":
			words = ew[2:]
		case len(ew) == 1 && ew[0] == "else":
			els, end, err := p.list()
			if err != nil {
				return n, err
			}
			if ew := strings.Fields(end); len(ew) != 1 || ew[0] != "end" {
				if end == "" {
					return n, p.errorf("unexpected EOF: {{if}} without {{end}}")
				}
				return n, p.errorf("unexpected {{%s}} after {{else}}", strings.TrimSpace(end))
			}
			n.els = els
			return n, nil
		default:
			return n, p.errorf("unexpected {{%s}}", strings.TrimSpace(end))
		}
	}
}
