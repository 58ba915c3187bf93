package policy

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"text/template"
)

// reference is text/template with the function body templates had before they were rendered
// without it: what users' templates render as, by the documented syntax.
func reference(t *testing.T, src string) *template.Template {
	t.Helper()
	funcs := template.FuncMap{"json": func(v any) (string, error) {
		b, err := json.Marshal(v)
		return string(b), err
	}}
	tm, err := template.New("body").Funcs(funcs).Option("missingkey=error").Parse(src)
	if err != nil {
		t.Fatalf("text/template rejects %q: %v", src, err)
	}
	return tm
}

// supported are templates of every construct body templates accept.
var supported = []string{
	`plain text, no action`,
	`{{.Status}} {{.Policy}} {{.Rule}} {{.Reason}} {{.Limit}} {{.Remaining}} {{.CanRetry}} {{.RetryAfter}} {{.RetryAfterMs}} {{.ResetAt}} {{.Message}}`,
	`{"type":"https://example.com/rate-limited","title":"Too Many Requests","status":{{.Status}},"detail":{{json .Message}},"retry_after_ms":{{.RetryAfterMs}}}`,
	`{{json .Status}} {{json .CanRetry}} {{json .Policy}} {{.Rule | json}} {{.Message|json}} {{ json  .ResetAt }}`,
	`{{if .CanRetry}}retry in {{.RetryAfter}}s{{else}}no retry{{end}}`,
	`{{if not .CanRetry}}never{{end}}{{if .ResetAt}} at {{.ResetAt}}{{end}}`,
	`{{if .Remaining}}a{{else if .Limit}}b{{else if not .Reason}}c{{else}}d{{end}}`,
	`{{if .Status}}{{if .CanRetry}}{{.RetryAfterMs}}{{else}}-{{end}}{{end}}`,
	"line one\n  {{- .Status -}}  \n line two {{- /* a comment */ -}}\n{{/* another */}}end\n",
	"{{- if .CanRetry -}}\n  yes\n{{- else -}}\n  no\n{{- end }}\n",
	`<p>{{.Message}}</p> & {{json .Message}}`,
}

// TestTemplateRendersAsTextTemplate: every supported construct renders, over random denials,
// byte for byte as text/template renders it.
func TestTemplateRendersAsTextTemplate(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	strs := []string{"", "limited", "a \"quoted\" <b>&</b> \\ message\n\twith\u2028 runes é", "2026-01-01T00:00:02Z"}
	ints := []int64{0, 1, -1, 429, 1 << 62}
	for _, src := range supported {
		ref := reference(t, src)
		tm, err := ParseTemplate(src)
		if err != nil {
			t.Fatalf("ParseTemplate(%q): %v", src, err)
		}
		for range 200 {
			d := TemplateData{Status: int(ints[r.IntN(len(ints))]), Policy: strs[r.IntN(len(strs))], Rule: strs[r.IntN(len(strs))],
				Reason: strs[r.IntN(len(strs))], Limit: ints[r.IntN(len(ints))], Remaining: ints[r.IntN(len(ints))],
				CanRetry: r.IntN(2) == 0, RetryAfter: ints[r.IntN(len(ints))], RetryAfterMs: ints[r.IntN(len(ints))],
				ResetAt: strs[r.IntN(len(strs))], Message: strs[r.IntN(len(strs))]}
			var want bytes.Buffer
			if err := ref.Execute(&want, &d); err != nil {
				t.Fatal(err)
			}
			if got := tm.Append(nil, &d); string(got) != want.String() {
				t.Fatalf("%q over %+v:\n got %q\nwant %q", src, d, got, want.String())
			}
		}
	}
}

// TestTemplateRejects: what body templates do not support, or is no template, is an error
// that says what is wrong.
func TestTemplateRejects(t *testing.T) {
	for src, want := range map[string]string{
		"":                              "empty template",
		strings.Repeat("x", 4097):       "longer than 4096",
		"{{.Retry}}":                    "can't evaluate field Retry",
		"{{.}}":                         "can't evaluate field",
		"{{printf \"%d\" .Status}}":     "body templates support",
		"{{upper .Message}}":            `function "upper" not defined`,
		"{{Message}}":                   "a field is written with a dot",
		"{{range .Message}}{{end}}":     "range: body templates support",
		"{{with .Message}}{{.}}{{end}}": "with: body templates support",
		"{{$x := .Status}}":             "body templates support",
		"{{if .CanRetry}}open":          "without {{end}}",
		"{{end}}":                       "unexpected {{end}}",
		"{{if .CanRetry}}{{else}}{{else}}{{end}}": "after {{else}}",
		"{{if eq .Status 429}}x{{end}}":           "{{if .Field}}",
		"{{.Status":                               "unclosed action",
		"{{/* open":                               "unclosed comment",
		"{{":                                      "unclosed action",
		"{{ }}":                                   "missing value",
		"{{.Message | json | json}}":              "body templates support",
	} {
		_, err := ParseTemplate(src)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseTemplate(%.40q) = %v, want an error containing %q", src, err, want)
		}
	}
}
