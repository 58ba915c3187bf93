package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"text/template"
)

// MaxTemplateBytes bounds a Template body's template, as the API does.
const MaxTemplateBytes = 4096

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

// templateFuncs are the functions a template may call besides text/template's: json quotes a
// value as JSON (a string in quotes, with escapes).
var templateFuncs = template.FuncMap{"json": func(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}}

// ParseTemplate parses a BodyTemplate template and checks that it executes over
// SampleTemplateData: an unknown field or function, or a syntax error, is an error.
func ParseTemplate(s string) (*template.Template, error) {
	if s == "" {
		return nil, errors.New("empty template")
	}
	if len(s) > MaxTemplateBytes {
		return nil, errors.New("template longer than 4096 bytes")
	}
	t, err := template.New("body").Funcs(templateFuncs).Option("missingkey=error").Parse(s)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := t.Execute(&buf, &SampleTemplateData); err != nil {
		return nil, err
	}
	return t, nil
}

// CheckTemplate is ParseTemplate's error.
func CheckTemplate(s string) error {
	_, err := ParseTemplate(s)
	return err
}
