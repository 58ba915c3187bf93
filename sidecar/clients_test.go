package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/dataplane/decide"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/testutil/redisserver"
	st "github.com/sluice-dev/sluice/internal/testutil/sidecartest"
)

// This file runs clients that nobody on this project wrote, or faithful reimplementations of
// their documented rules, against a real sidecar: what they read from each header style and
// body format is what docs/clients.md promises.

// openAIClient reimplements the retry rule of OpenAI's SDKs (openai-python's
// _base_client.py: _should_retry, _calculate_retry_timeout, _parse_retry_after_header):
//
//   - a response is retried on 408, 409, 429 and 5xx (x-should-retry: true/false overrides),
//     up to maxRetries times (2 by default);
//   - the wait is read from retry-after-ms (milliseconds) first, then retry-after (seconds, a
//     float, or an HTTP date);
//   - a wait above 120 s is not retried at all: the error goes to the caller;
//   - a wait in (0, 120 s] is waited exactly; without one, the wait is exponential backoff,
//     min(0.5 s * 2^n, 8 s) times a jitter in (0.75, 1].
//
// sleep is called with every wait (the test records them).
type openAIClient struct {
	url        string
	maxRetries int
	sleep      func(time.Duration)
}

// openAIError is the SDKs' error model: APIStatusError reads body["error"]'s message, type,
// param and code.
type openAIError struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    string  `json:"code"`
	} `json:"error"`
}

const maxRetryAfter = 120 * time.Second

// retryAfter is _parse_retry_after_header: ok is false when the response says nothing usable.
func retryAfter(h http.Header) (time.Duration, bool) {
	for _, hd := range []struct {
		name string
		unit time.Duration
	}{{"retry-after-ms", time.Millisecond}, {"retry-after", time.Second}} {
		if v := h.Get(hd.name); v != "" {
			if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
				return time.Duration(f * float64(hd.unit)), true
			}
		}
	}
	if t, err := http.ParseTime(h.Get("retry-after")); err == nil {
		return time.Until(t), true
	}
	return 0, false
}

func (c *openAIClient) shouldRetry(resp *http.Response) bool {
	if d, ok := retryAfter(resp.Header); ok && d > maxRetryAfter {
		return false
	}
	switch resp.Header.Get("x-should-retry") {
	case "true":
		return true
	case "false":
		return false
	}
	s := resp.StatusCode
	return s == 408 || s == 409 || s == 429 || s >= 500
}

func (c *openAIClient) retryTimeout(retriesTaken int, h http.Header) time.Duration {
	if d, ok := retryAfter(h); ok && d > 0 && d <= maxRetryAfter {
		return d
	}
	sleep := min(500*time.Millisecond<<min(retriesTaken, 10), 8*time.Second)
	return time.Duration(float64(sleep) * (1 - 0.25*rand.Float64()))
}

// do posts a chat completion, retrying as the SDK does; it returns the last response's status,
// headers and body.
func (c *openAIClient) do(t *testing.T, path string) (int, http.Header, []byte) {
	t.Helper()
	for retries := 0; ; retries++ {
		resp, err := http.Post(c.url+path, "application/json", strings.NewReader(`{"model":"m","messages":[]}`))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode < 400 || retries == c.maxRetries || !c.shouldRetry(resp) {
			return resp.StatusCode, resp.Header, body
		}
		d := c.retryTimeout(retries, resp.Header)
		c.sleep(d)
	}
}

// llmUpstream answers every request with a chat completion whose usage.total_tokens is tokens.
func llmUpstream(t *testing.T, tokens int) string {
	t.Helper()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"chatcmpl-1","object":"chat.completion","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":%d,"total_tokens":%d}}`, tokens-1, tokens)
	}))
	t.Cleanup(up.Close)
	return up.URL
}

// sidecarWith starts a sidecar with a real redis-server in front of upstream, deciding by
// policies. Its Redis timeout is long: a loaded machine must not send a decision to the local
// share, whose answers these tests do not expect.
func sidecarWith(t *testing.T, upstream string, policies ...policy.Policy) *sidecar {
	t.Helper()
	redis := redisserver.StartTest(t)
	cfg := filepath.Join(t.TempDir(), policy.DataKey)
	if err := os.WriteFile(cfg, st.Doc(t, policies...), 0o600); err != nil {
		t.Fatal(err)
	}
	return launchSidecar(t, upstream, cfg, "--redis-url", redis.URL(), "--redis-timeout", "5s")
}

// onPath makes a rule match the requests under prefix.
func onPath(prefix string) func(*policy.Rule) {
	return func(r *policy.Rule) { r.Match = &policy.Match{PathPrefix: prefix} }
}

// TestOpenAIClientWaitsRetryAfterMs: an OpenAI SDK's retry rule in front of a sidecar whose
// policy asks for retry-after-ms, OpenAI's headers and OpenAI's error body. A denied request
// is retried after exactly retry-after-ms (under a second, beside a Retry-After of 1) and then
// passes; the 429 fits the SDK's error model (code rate_limit_exceeded, type requests or
// tokens), and the x-ratelimit-*-requests and -tokens headers say limit, remaining 0 and the
// reset, the same wait.
func TestOpenAIClientWaitsRetryAfterMs(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	openai := func(p *policy.Policy) {
		p.Response = policy.Response{StatusCode: 429, Headers: policy.HeadersOpenAI, RetryAfterMs: true,
			Body: &policy.Body{Format: policy.BodyOpenAI}}
	}
	s := sidecarWith(t, llmUpstream(t, 150), st.Policy("llm", []policy.Rule{
		// One request per 800 ms: a denial waits under a second, and Retry-After says 1.
		st.Rule("requests", 1, 800*time.Millisecond, onPath("/v1/chat/")),
		// 100 tokens a second, a burst of 100: a response of 150 tokens leaves a debt of 50,
		// and the next request waits until 1 token is back after it: 510 ms.
		st.Rule("tokens", 100, time.Second, onPath("/v1/tokens/"), func(r *policy.Rule) {
			r.ResponseCost = &policy.ResponseCost{JSONField: "usage.total_tokens"}
		}),
	}, openai))

	for _, tc := range []struct {
		path, family string
		limit        int
	}{{"/v1/chat/completions", "requests", 1}, {"/v1/tokens/completions", "tokens", 100}} {
		t.Run(tc.family, func(t *testing.T) {
			var sleeps []time.Duration
			c := &openAIClient{url: s.URL(), maxRetries: 2, sleep: func(d time.Duration) { sleeps = append(sleeps, d); time.Sleep(d) }}
			if code, _, body := c.do(t, tc.path); code != 200 {
				t.Fatalf("first request: %d %s", code, body)
			}
			// The next one, sent at once, is denied; look at the denial as the SDK does.
			resp, err := http.Post(s.URL()+tc.path, "application/json", strings.NewReader(`{}`))
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != 429 {
				t.Fatalf("second request: %d %s", resp.StatusCode, body)
			}
			var e openAIError
			if err := json.Unmarshal(body, &e); err != nil || e.Error.Code != "rate_limit_exceeded" || e.Error.Type != tc.family ||
				e.Error.Message == "" || e.Error.Param != nil || resp.Header.Get("Content-Type") != "application/json" {
				t.Errorf("the SDK's error model reads %+v (%v) from %s", e, err, body)
			}
			ms, err := strconv.ParseInt(resp.Header.Get("retry-after-ms"), 10, 64)
			if err != nil || ms <= 0 || ms >= 1000 || resp.Header.Get("Retry-After") != "1" {
				t.Fatalf("retry-after-ms %q, Retry-After %q; want under 1000 ms and 1 s", resp.Header.Get("retry-after-ms"), resp.Header.Get("Retry-After"))
			}
			wantReset := string(decide.AppendDuration(nil, time.Duration(ms)*time.Millisecond))
			for name, want := range map[string]string{
				"x-ratelimit-limit-" + tc.family:     strconv.Itoa(tc.limit),
				"x-ratelimit-remaining-" + tc.family: "0",
				"x-ratelimit-reset-" + tc.family:     wantReset,
			} {
				if got := resp.Header.Get(name); got != want {
					t.Errorf("%s: %q, want %q", name, got, want)
				}
			}

			// The SDK's rule: the denied request waits retry-after-ms, not the rounded
			// second, and then passes.
			code, _, body := c.do(t, tc.path)
			if code != 200 {
				t.Fatalf("after the SDK's waits %v: %d %s", sleeps, code, body)
			}
			if len(sleeps) != 1 || sleeps[0] <= 0 || sleeps[0] >= time.Second || sleeps[0]%time.Millisecond != 0 {
				t.Errorf("the client waited %v, want one wait of the exact retry-after-ms, under a second", sleeps)
			}
		})
	}
}

// TestOpenAIClientGivesUpBeyondItsCeiling: a Retry-After above the SDK's 120 s ceiling ends its
// retries at once: the caller gets the rate_limit_exceeded error (docs/clients.md warns).
func TestOpenAIClientGivesUpBeyondItsCeiling(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	s := sidecarWith(t, llmUpstream(t, 1), st.Policy("hourly", []policy.Rule{st.Rule("per-client", 1, time.Hour)},
		func(p *policy.Policy) {
			p.Response = policy.Response{StatusCode: 429, Headers: policy.HeadersOpenAI, RetryAfterMs: true,
				Body: &policy.Body{Format: policy.BodyOpenAI}}
		}))
	var sleeps []time.Duration
	c := &openAIClient{url: s.URL(), maxRetries: 2, sleep: func(d time.Duration) { sleeps = append(sleeps, d) }}
	c.do(t, "/v1/chat/completions")
	code, h, body := c.do(t, "/v1/chat/completions")
	var e openAIError
	if code != 429 || len(sleeps) != 0 || json.Unmarshal(body, &e) != nil || e.Error.Code != "rate_limit_exceeded" {
		t.Errorf("status %d after waits %v, body %s; want the 429 at once", code, sleeps, body)
	}
	if ms, err := strconv.ParseInt(h.Get("retry-after-ms"), 10, 64); h.Get("Retry-After") != "3600" || err != nil || ms <= 3_590_000 || ms > 3_600_000 {
		t.Errorf("Retry-After %q, retry-after-ms %q", h.Get("Retry-After"), h.Get("retry-after-ms"))
	}
}

// TestBodyFormatsRoundTrip: each body format reads back through its client's model: Sluice's
// JSON, OpenAI's error object, plain text, and a template (here RFC 9457 problem details).
func TestBodyFormatsRoundTrip(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	const problem = `{"type":"https://example.com/rate-limited","title":"Too Many Requests","status":{{.Status}},` +
		`"detail":{{json .Message}},"policy":"{{.Policy}}","rule":"{{.Rule}}","retry_after_ms":{{.RetryAfterMs}}}`
	format := func(name string, b *policy.Body) policy.Policy {
		return st.Policy(name, []policy.Rule{st.Rule("per-client", 1, time.Hour, onPath("/"+name))}, func(p *policy.Policy) {
			p.Response = policy.Response{StatusCode: 429, Headers: policy.HeadersBoth, RetryAfterMs: true, Body: b}
		})
	}
	s := sidecarWith(t, llmUpstream(t, 1),
		format("json", nil),
		format("openai", &policy.Body{Format: policy.BodyOpenAI}),
		format("text", &policy.Body{Format: policy.BodyText}),
		format("template", &policy.Body{Format: policy.BodyTemplate, ContentType: "application/problem+json", Template: problem}))
	deny := func(t *testing.T, path string) (*http.Response, []byte) {
		t.Helper()
		var resp *http.Response
		var body []byte
		for range 2 {
			r, err := http.Get(s.URL() + path)
			if err != nil {
				t.Fatal(err)
			}
			body, _ = io.ReadAll(r.Body)
			_ = r.Body.Close()
			resp = r
		}
		if ms, err := strconv.ParseInt(resp.Header.Get("retry-after-ms"), 10, 64); resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "3600" ||
			err != nil || ms <= 3_590_000 || ms > 3_600_000 {
			t.Fatalf("%s: %d, Retry-After %q: %s", path, resp.StatusCode, resp.Header.Get("Retry-After"), body)
		}
		return resp, body
	}

	t.Run("json", func(t *testing.T) {
		resp, body := deny(t, "/json")
		var b struct {
			Error      string `json:"error"`
			Message    string `json:"message"`
			Reason     string `json:"reason"`
			RetryAfter int64  `json:"retry_after"`
			Limit      int64  `json:"limit"`
			Remaining  *int64 `json:"remaining"`
			ResetAt    string `json:"reset_at"`
			Policy     string `json:"policy"`
			Rule       string `json:"rule"`
		}
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&b); err != nil || b.Error != "rate_limit_exceeded" || b.Reason != "limited" || b.RetryAfter != 3600 ||
			b.Limit != 1 || b.Remaining == nil || *b.Remaining != 0 || b.Policy != "json" || b.Rule != "per-client" ||
			resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s (%v)", body, err)
		}
		if at, err := time.Parse(time.RFC3339, b.ResetAt); err != nil || at.IsZero() {
			t.Errorf("reset_at %q: %v", b.ResetAt, err)
		}
	})
	t.Run("openai", func(t *testing.T) {
		resp, body := deny(t, "/openai")
		var e openAIError
		if err := json.Unmarshal(body, &e); err != nil || e.Error.Code != "rate_limit_exceeded" || e.Error.Type != "requests" ||
			!strings.Contains(e.Error.Message, "retry in 3600s") || resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s (%v)", body, err)
		}
	})
	t.Run("text", func(t *testing.T) {
		resp, body := deny(t, "/text")
		if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") ||
			!strings.HasPrefix(string(body), `Rate limit exceeded: rule "per-client" of policy "text" allows 1 per 1h0m0s; retry in 3600s.`) {
			t.Errorf("%q %q", resp.Header.Get("Content-Type"), body)
		}
	})
	t.Run("template", func(t *testing.T) {
		resp, body := deny(t, "/template")
		var p struct {
			Type, Title, Detail, Policy, Rule string
			Status                            int
			RetryAfterMs                      int64 `json:"retry_after_ms"`
		}
		if err := json.Unmarshal(body, &p); err != nil || p.Status != resp.StatusCode ||
			strconv.FormatInt(p.RetryAfterMs, 10) != resp.Header.Get("retry-after-ms") ||
			p.Policy != "template" || p.Rule != "per-client" || !strings.Contains(p.Detail, `rule "per-client"`) ||
			resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s (%v), Content-Type %q", body, err, resp.Header.Get("Content-Type"))
		}
	})
}

// TestHiddenRule: a rule of style None (a guard) shows nothing: the admitted responses carry the
// visible quota's numbers, and a 429 the guard causes carries only Retry-After.
func TestHiddenRule(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	s := sidecarWith(t, llmUpstream(t, 1), st.Policy("api", []policy.Rule{
		st.Rule("quota", 100, time.Hour, func(r *policy.Rule) { r.Algorithm, r.Burst = "FixedWindow", 0 }),
		st.Rule("guard", 1, time.Hour, func(r *policy.Rule) { r.Headers = policy.HeadersNone }),
	}, func(p *policy.Policy) { p.Response.Headers = policy.HeadersLegacy }))
	get := func() *http.Response {
		resp, err := http.Get(s.URL() + "/")
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp
	}
	if resp := get(); resp.StatusCode != 200 || resp.Header.Get("X-RateLimit-Limit") != "100" || resp.Header.Get("X-RateLimit-Remaining") != "99" {
		t.Errorf("admitted: %d %v; want the quota's numbers", resp.StatusCode, resp.Header)
	}
	resp := get()
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "3600" {
		t.Fatalf("denied by the guard: %d %v", resp.StatusCode, resp.Header)
	}
	for name := range resp.Header {
		if strings.HasPrefix(strings.ToLower(name), "x-ratelimit") || strings.HasPrefix(strings.ToLower(name), "ratelimit") {
			t.Errorf("the guard's 429 shows %s: %q", name, resp.Header.Get(name))
		}
	}
}

// npmPackage installs the npm package name@version (hack/ensure-npm-package.sh) and returns its
// node_modules directory, or skips the test, saying why, when it cannot be installed.
func npmPackage(t *testing.T, name, version string) string {
	t.Helper()
	out, err := exec.Command(filepath.Join("..", "hack", "ensure-npm-package.sh"), name, version).Output()
	if err != nil {
		t.Skipf("%s %s cannot be installed (node, npm or the npm registry unavailable): %v", name, version, err)
	}
	return filepath.Join(strings.TrimSpace(string(out)), "node_modules")
}

// node runs the script of hack/ with modules on NODE_PATH, stdin and args, and returns its
// output.
func node(t *testing.T, modules string, stdin []byte, script string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command("node", append([]string{filepath.Join("..", "hack", script)}, args...)...)
	cmd.Env = append(os.Environ(), "NODE_PATH="+modules)
	cmd.Stdin = bytes.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node %s: %v\n%s", script, err, stderr.String())
	}
	return out
}

// TestOpenAINodeSDKWaitsRetryAfterMs runs OpenAI's own Node SDK (npm openai) against a sidecar in
// front of an OpenAI-compatible upstream: a denied completion is retried after exactly the
// retry-after-ms the sidecar sent (under a second, where Retry-After says 1) and then passes,
// and a client without retries gets a RateLimitError whose code is rate_limit_exceeded.
func TestOpenAINodeSDKWaitsRetryAfterMs(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs node")
	}
	modules := npmPackage(t, "openai", "6.30.1")
	s := sidecarWith(t, llmUpstream(t, 10), st.Policy("llm", []policy.Rule{
		st.Rule("requests", 1, 800*time.Millisecond, onPath("/v1/chat/")),
	}, func(p *policy.Policy) {
		p.Response = policy.Response{StatusCode: 429, Headers: policy.HeadersOpenAI, RetryAfterMs: true,
			Body: &policy.Body{Format: policy.BodyOpenAI}}
	}))
	var got struct {
		Calls [][]struct {
			Status       int
			RetryAfterMs *string
			RetryAfter   *string
		}
		Sleeps []float64
		Error  *struct {
			Class      string
			RateLimit  bool
			Status     int
			Code, Type string
		}
	}
	out := node(t, modules, nil, "openai-node/retry.cjs", s.URL()+"/v1")
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%s: %v", out, err)
	}
	var waits []float64
	for i, call := range got.Calls {
		if last := call[len(call)-1]; last.Status != 200 {
			t.Errorf("call %d ended with %d: %+v", i, last.Status, call)
		}
		for _, r := range call[:len(call)-1] {
			if r.Status != 429 || r.RetryAfterMs == nil || r.RetryAfter == nil || *r.RetryAfter != "1" {
				t.Fatalf("call %d: a retried response %+v, want a 429 with retry-after-ms and Retry-After 1", i, r)
			}
			ms, err := strconv.ParseFloat(*r.RetryAfterMs, 64)
			if err != nil || ms <= 0 || ms >= 1000 {
				t.Fatalf("call %d: retry-after-ms %q", i, *r.RetryAfterMs)
			}
			waits = append(waits, ms)
		}
	}
	if len(waits) == 0 || fmt.Sprint(got.Sleeps) != fmt.Sprint(waits) {
		t.Errorf("the SDK waited %v ms; the sidecar said retry-after-ms %v (calls %+v)", got.Sleeps, waits, got.Calls)
	}
	if e := got.Error; e == nil || !e.RateLimit || e.Class != "RateLimitError" || e.Status != 429 || e.Code != "rate_limit_exceeded" || e.Type != "requests" {
		t.Errorf("without retries the SDK raised %+v", got.Error)
	}
}

// TestHeaderParserReadsEachStyle runs the npm package ratelimit-header-parser (the parser of
// express-rate-limit's authors) on the headers the sidecar sends in the styles it reads: Draft7
// (the combined RateLimit field) and Legacy (X-RateLimit-*, the reset as seconds or as a Unix
// time), admitted and denied, and checks that it gets the limit, the remaining and the reset the
// sidecar meant.
func TestHeaderParserReadsEachStyle(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs node")
	}
	modules := npmPackage(t, "ratelimit-header-parser", "0.1.0")

	style := func(name string, h policy.HeaderStyle, reset policy.ResetFormat) policy.Policy {
		return st.Policy(name, []policy.Rule{st.Rule("per-client", 3, time.Hour, onPath("/"+name))}, func(p *policy.Policy) {
			p.Response = policy.Response{StatusCode: 429, Headers: h, LegacyReset: reset}
		})
	}
	s := sidecarWith(t, llmUpstream(t, 1),
		style("draft7", policy.HeadersDraft7, ""),
		style("legacy", policy.HeadersLegacy, ""),
		style("unix", policy.HeadersLegacy, policy.ResetUnixTime))

	type sent struct {
		what                    string
		limit, remaining, reset int64 // reset: seconds from now, or a Unix time for "unix"
		unix                    bool
		headers                 map[string]string
	}
	var all []sent
	for _, name := range []string{"draft7", "legacy", "unix"} {
		for i := range 4 { // 3 admitted, then a denial
			resp, err := http.Get(s.URL() + "/" + name)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			h := map[string]string{}
			for k := range resp.Header {
				h[strings.ToLower(k)] = resp.Header.Get(k)
			}
			x := sent{what: fmt.Sprintf("%s #%d (%d)", name, i+1, resp.StatusCode), headers: h, unix: name == "unix"}
			if name == "draft7" {
				// limit=3, remaining=2, reset=1200
				for _, kv := range strings.Split(h["ratelimit"], ", ") {
					k, v, _ := strings.Cut(kv, "=")
					n, _ := strconv.ParseInt(v, 10, 64)
					switch k {
					case "limit":
						x.limit = n
					case "remaining":
						x.remaining = n
					case "reset":
						x.reset = n
					}
				}
			} else {
				x.limit, _ = strconv.ParseInt(h["x-ratelimit-limit"], 10, 64)
				x.remaining, _ = strconv.ParseInt(h["x-ratelimit-remaining"], 10, 64)
				x.reset, _ = strconv.ParseInt(h["x-ratelimit-reset"], 10, 64)
			}
			// What the sidecar means: 3 per hour, one token per 1200 s.
			wantRemaining := int64(2 - i)
			if i == 3 {
				wantRemaining = 0
			}
			if x.limit != 3 || x.remaining != wantRemaining || (!x.unix && x.reset != 1200) || (i == 3) != (resp.StatusCode == 429) {
				t.Fatalf("%s: sent %+v", x.what, x)
			}
			all = append(all, x)
		}
	}

	in, err := json.Marshal(func() []map[string]string {
		var hs []map[string]string
		for _, x := range all {
			hs = append(hs, x.headers)
		}
		return hs
	}())
	if err != nil {
		t.Fatal(err)
	}
	parsedJSON := node(t, modules, in, filepath.Join("ratelimit-header-parser", "parse.cjs"))
	var parsed []*struct {
		Limit, Remaining float64
		Reset, Now       *float64
	}
	if err := json.Unmarshal(parsedJSON, &parsed); err != nil || len(parsed) != len(all) {
		t.Fatalf("parser output %s: %v", parsedJSON, err)
	}
	for i, x := range all {
		p := parsed[i]
		if p == nil || p.Reset == nil || p.Now == nil {
			t.Errorf("%s: the parser read nothing from %v", x.what, x.headers)
			continue
		}
		var reset int64
		if x.unix {
			reset = int64(*p.Reset) / 1000 // the Unix time, in seconds
		} else {
			reset = int64(*p.Reset-*p.Now) / 1000 // seconds from when it parsed
		}
		if int64(p.Limit) != x.limit || int64(p.Remaining) != x.remaining || reset != x.reset {
			t.Errorf("%s: the parser read limit %v remaining %v reset %d; the sidecar sent %d, %d, %d (%v)",
				x.what, p.Limit, p.Remaining, reset, x.limit, x.remaining, x.reset, x.headers)
		}
	}
}
