package proxy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/sluice-dev/sluice/internal/policy"
	st "github.com/sluice-dev/sluice/internal/testutil/sidecartest"
)

func TestLimitsPerRuleAndKey(t *testing.T) {
	doc := st.Doc(t,
		st.Policy("api", []policy.Rule{
			st.Rule("per-client", 4, time.Hour),
			st.Rule("per-key", 2, time.Hour, func(r *policy.Rule) {
				r.Key = []policy.KeyPart{{Source: policy.SourceHeader, Name: "X-Api-Key"}}
				r.Match = &policy.Match{PathPrefix: "/api/"}
			}),
		}),
		// Not this pod's: its selector does not match app=test.
		st.Policy("other-pods", []policy.Rule{st.Rule("tiny", 1, time.Hour)}, func(p *policy.Policy) {
			p.Selector.MatchLabels = map[string]string{"app": "other"}
		}),
	)
	e := newEnv(t, doc, envOpt{})
	steps := []struct {
		path, key string
		code      int
		rule      string
	}{
		{"/api/a", "A", 200, ""},
		{"/api/a", "A", 200, ""},
		{"/api/a", "A", 429, "per-key"},    // key A spent; the denial charges nothing: client at 2 of 4
		{"/api/a", "B", 200, ""},           // key B fresh; client at 3
		{"/other", "A", 200, ""},           // per-key does not match /other; client at 4
		{"/other", "A", 429, "per-client"}, // client spent
	}
	for i, s := range steps {
		resp, body := e.do("GET", s.path, map[string]string{"X-Api-Key": s.key})
		if resp.StatusCode != s.code {
			t.Fatalf("step %d %s key %s: status %d, want %d; body %s", i, s.path, s.key, resp.StatusCode, s.code, body)
		}
		if s.rule != "" {
			var b struct{ Policy, Rule string }
			if err := json.Unmarshal([]byte(body), &b); err != nil || b.Rule != s.rule || b.Policy != "api" {
				t.Fatalf("step %d: body %s, want policy api rule %s (%v)", i, body, s.rule, err)
			}
		}
	}
	if got := e.hits.Load(); got != 4 {
		t.Errorf("upstream saw %d requests, want 4", got)
	}
	if got := e.counter("api", "per-key", "denied"); got != 1 {
		t.Errorf("per-key denied = %v, want 1", got)
	}
	if got := e.counter("api", "per-client", "allowed"); got != 4 {
		t.Errorf("per-client allowed = %v, want 4", got)
	}
	if got := e.counter("api", "per-client", "not_charged"); got != 1 {
		t.Errorf("per-client not_charged = %v, want 1", got)
	}
	if got := e.counter("api", "per-client", "denied"); got != 1 {
		t.Errorf("per-client denied = %v, want 1", got)
	}
}

func TestResponseHeadersAndBody(t *testing.T) {
	tests := map[string]struct {
		headers      policy.HeaderStyle
		status       int
		draft, legac bool
	}{
		"both, 429":   {"Both", 429, true, true},
		"draft, 503":  {"Draft", 503, true, false},
		"legacy, 429": {"Legacy", 429, false, true},
		"none, 429":   {"None", 429, false, false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			doc := st.Doc(t, st.Policy("api", []policy.Rule{st.Rule("per-client", 3, time.Hour)}, func(p *policy.Policy) {
				p.Response = policy.Response{StatusCode: tc.status, Headers: tc.headers}
			}))
			e := newEnv(t, doc, envOpt{})
			resp, _ := e.do("GET", "/", nil)
			want := map[string]string{
				"RateLimit-Policy":      `"per-client";q=3;w=3600`,
				"RateLimit":             `"per-client";r=2;t=1200`,
				"X-RateLimit-Limit":     "3",
				"X-RateLimit-Remaining": "2",
				"X-RateLimit-Reset":     "1200",
			}
			checkHeaders(t, "allowed", resp.Header, want, tc.draft, tc.legac)
			if got := resp.Header.Get("Retry-After"); got != "" {
				t.Errorf("allowed: Retry-After %q", got)
			}
			e.do("GET", "/", nil)
			e.do("GET", "/", nil)
			before := time.Now().UTC()
			resp, body := e.do("GET", "/", nil)
			if resp.StatusCode != tc.status {
				t.Fatalf("4th request: status %d, want %d", resp.StatusCode, tc.status)
			}
			// Reset is how long until the next request can pass: after a denial, Retry-After.
			want["RateLimit"] = `"per-client";r=0;t=1200`
			want["X-RateLimit-Remaining"] = "0"
			want["X-RateLimit-Reset"] = "1200"
			checkHeaders(t, "denied", resp.Header, want, tc.draft, tc.legac)
			if got := resp.Header.Get("Retry-After"); got != "1200" {
				t.Errorf("Retry-After %q, want 1200", got)
			}
			if got := resp.Header.Get("Content-Type"); got != "application/json" {
				t.Errorf("Content-Type %q", got)
			}
			var b struct {
				ResetAt string `json:"reset_at"`
			}
			if err := json.Unmarshal([]byte(body), &b); err != nil {
				t.Fatalf("body %s: %v", body, err)
			}
			at, err := time.Parse(time.RFC3339, b.ResetAt)
			if err != nil || at.Before(before.Add(1199*time.Second)) || at.After(before.Add(1202*time.Second)) {
				t.Errorf("reset_at %s, want about %s + 1200 s (%v)", b.ResetAt, before.Format(time.RFC3339), err)
			}
			wantBody := `{"error":"rate_limit_exceeded","message":"Rate limit exceeded: rule \"per-client\" of policy \"api\" allows 3 per 1h0m0s; retry in 1200s.",` +
				`"reason":"limited","retry_after":1200,"limit":3,"remaining":0,"reset_at":"` + b.ResetAt + `","policy":"api","rule":"per-client"}`
			if body != wantBody {
				t.Errorf("body\n got %s\nwant %s", body, wantBody)
			}
			if e.hits.Load() != 3 {
				t.Errorf("upstream saw %d requests, want 3", e.hits.Load())
			}
		})
	}
}

func checkHeaders(t *testing.T, what string, h http.Header, want map[string]string, draft, legacy bool) {
	t.Helper()
	for k, v := range want {
		present := (strings.HasPrefix(k, "X-") && legacy) || (!strings.HasPrefix(k, "X-") && draft)
		got := h.Get(k)
		if present && got != v {
			t.Errorf("%s: %s = %q, want %q", what, k, got, v)
		}
		if !present && got != "" {
			t.Errorf("%s: %s = %q, want none", what, k, got)
		}
	}
}

func TestShadowCountsNeverDenies(t *testing.T) {
	doc := st.Doc(t, st.Policy("api", []policy.Rule{
		st.Rule("enforced", 10, time.Hour),
		st.Rule("trial", 1, time.Hour, func(r *policy.Rule) { r.Mode = "Shadow" }),
	}))
	e := newEnv(t, doc, envOpt{})
	codes := e.codes(3, "/", nil)
	if count(codes, 200) != 3 {
		t.Fatalf("codes %v, want all 200", codes)
	}
	if got := e.counter("api", "trial", "shadow_denied"); got != 2 {
		t.Errorf("trial shadow_denied = %v, want 2", got)
	}
	if got := e.counter("api", "trial", "allowed"); got != 1 {
		t.Errorf("trial allowed = %v, want 1", got)
	}
	// The shadow rule is the most restrictive, so the headers report it: what clients would
	// see were it enforced.
	resp, _ := e.do("GET", "/", nil)
	if got := resp.Header.Get("RateLimit"); !strings.HasPrefix(got, `"trial";r=0;`) {
		t.Errorf("RateLimit %q, want the shadow rule's", got)
	}
	// Enforced rule still denies after 10.
	codes = e.codes(8, "/", nil)
	if count(codes, 429) != 2 {
		t.Errorf("codes %v, want the last 2 denied by the enforced rule", codes)
	}
}

func TestCostAndCostHeader(t *testing.T) {
	t.Run("cost", func(t *testing.T) {
		e := newEnv(t, st.Doc(t, st.Policy("api", []policy.Rule{st.Rule("r", 5, time.Hour, func(r *policy.Rule) { r.Cost = 2 })})), envOpt{})
		if codes := e.codes(3, "/", nil); !slices.Equal(codes, []int{200, 200, 429}) {
			t.Errorf("codes %v, want 200 200 429 (cost 2 of 5)", codes)
		}
	})
	t.Run("header", func(t *testing.T) {
		e := newEnv(t, st.Doc(t, st.Policy("api", []policy.Rule{st.Rule("r", 10, time.Hour, func(r *policy.Rule) { r.CostHeader = "X-Cost" })})), envOpt{})
		steps := []struct {
			cost      string
			code      int
			remaining string
		}{
			{"7", 200, "3"},
			{"4", 429, "0"},   // denied: none for this request (the 3 units left stay for cheaper ones)
			{"abc", 200, "2"}, // invalid: rule cost 1
			{"11", 200, "1"},  // above capacity: rule cost 1
			{"-1", 200, "0"},  // not positive: rule cost 1
			{"1", 429, "0"},
		}
		for i, s := range steps {
			resp, _ := e.do("GET", "/", map[string]string{"X-Cost": s.cost})
			if resp.StatusCode != s.code || resp.Header.Get("X-RateLimit-Remaining") != s.remaining {
				t.Errorf("step %d cost %q: %d remaining %s, want %d remaining %s", i, s.cost,
					resp.StatusCode, resp.Header.Get("X-RateLimit-Remaining"), s.code, s.remaining)
			}
		}
	})
}

func TestForwardedFor(t *testing.T) {
	type step struct {
		xff  string
		code int
	}
	tests := map[string]struct {
		trusted []string
		steps   []step
	}{
		"untrusted peer: the header changes nothing": {nil, []step{
			{"1.1.1.1", 200}, {"2.2.2.2", 429}, {"", 429},
		}},
		"trusted peer: right-most untrusted address": {[]string{"127.0.0.1/32", "10.0.0.0/8"}, []step{
			{"1.1.1.1", 200},
			{"1.1.1.1", 429},
			{"2.2.2.2", 200},
			{"9.9.9.9, 1.1.1.1", 429},           // spoofed left part is never reached
			{"1.1.1.1, 10.0.0.5", 429},          // a trusted hop is skipped
			{"3.3.3.3:4567", 200},               // a port is ignored
			{"[2001:db8::1]:80, 10.1.1.1", 200}, // IPv6 with port
			{"garbage, 10.0.0.9", 200},          // unparseable: the last trusted hop (10.0.0.9)
			{"", 200},                           // no header: the peer
			{"", 429},
		}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			doc := st.Doc(t, st.Policy("api", []policy.Rule{st.Rule("per-client", 1, time.Hour)}, func(p *policy.Policy) {
				p.TrustedProxies = tc.trusted
			}))
			e := newEnv(t, doc, envOpt{})
			for i, s := range tc.steps {
				hdr := map[string]string{}
				if s.xff != "" {
					hdr["X-Forwarded-For"] = s.xff
				}
				resp, _ := e.do("GET", "/", hdr)
				if resp.StatusCode != s.code {
					t.Errorf("step %d XFF %q: %d, want %d", i, s.xff, resp.StatusCode, s.code)
				}
			}
		})
	}
}

func TestMissingKeyPartsShareOneKey(t *testing.T) {
	doc := st.Doc(t, st.Policy("api", []policy.Rule{
		st.Rule("per-key", 2, time.Hour, func(r *policy.Rule) {
			r.Key = []policy.KeyPart{{Source: policy.SourceHeader, Name: "X-Api-Key"}}
		}),
		st.Rule("per-user", 2, time.Hour, func(r *policy.Rule) {
			r.Key = []policy.KeyPart{{Source: policy.SourceQuery, Name: "user"}, {Source: policy.SourceMethod}}
			r.Match = &policy.Match{PathPrefix: "/q"}
		}),
	}))
	e := newEnv(t, doc, envOpt{})
	key := map[string]string{"X-Api-Key": "k"}
	if codes := e.codes(3, "/", nil); !slices.Equal(codes, []int{200, 200, 429}) {
		t.Errorf("without header: %v, want 200 200 429", codes)
	}
	if codes := e.codes(1, "/", map[string]string{"X-Api-Key": ""}); codes[0] != 429 {
		t.Errorf("empty header: %v, want 429 (the missing key)", codes)
	}
	if codes := e.codes(3, "/q?user=a%20b", key); !slices.Equal(codes, []int{200, 200, 429}) {
		t.Errorf("with key k: %v, want 200 200 429", codes)
	}
	e2 := newEnv(t, doc, envOpt{})
	k := func(v string) map[string]string { return map[string]string{"X-Api-Key": v} }
	if codes := e2.codes(3, "/q?x=1", k("a")); !slices.Equal(codes, []int{200, 200, 429}) {
		t.Errorf("query without user: %v, want 200 200 429", codes)
	}
	if codes := e2.codes(1, "/q?user=", k("b")); codes[0] != 429 {
		t.Errorf("empty user: %v, want 429", codes)
	}
	if codes := e2.codes(1, "/q?user=bob", k("c")); codes[0] != 200 {
		t.Errorf("user bob: %v, want 200", codes)
	}
}

// TestQueueSpacesRequests: requests queued at one instant start spacing apart on the handler's
// clock. The clock is fake and Redis decides at its instants, so each request's delay is exact
// (0, spacing, 2*spacing, ...) and the test can check that none starts a millisecond early.
func TestQueueSpacesRequests(t *testing.T) {
	const spacing = 50 * time.Millisecond
	doc := st.Doc(t, st.Policy("api", []policy.Rule{st.Rule("queue", 1, spacing, func(r *policy.Rule) {
		r.Algorithm, r.Burst, r.LeakyMode, r.MaxDelayMs = "LeakyBucket", 10, "Queue", 1000
	})}))
	t0 := time.Date(2026, 2, 5, 0, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(t0)
	// A generous Redis budget: a timeout would decide that request locally, without the queue.
	e := newEnv(t, doc, envOpt{clock: clk})
	const n = 6
	var wg sync.WaitGroup
	// On failure, release what is still queued, or closing the server would wait for it.
	t.Cleanup(func() { clk.Step(time.Hour); wg.Wait() })
	codes := make([]int, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, _ := e.do("GET", "/", nil)
			codes[i] = resp.StatusCode
		}()
	}
	// passed waits until the upstream has seen want requests.
	passed := func(want int) {
		t.Helper()
		st.Eventually(t, func() error {
			if got := len(e.arrivals()); got != want {
				return fmt.Errorf("upstream saw %d requests, want %d (%d queued)", got, want, clk.Waiters())
			}
			return nil
		})
	}
	// All are decided at t0: the first passes at once, the others wait on the clock's timers.
	st.Eventually(t, func() error {
		if got := clk.Waiters(); got != n-1 {
			return fmt.Errorf("%d requests queued, want %d", got, n-1)
		}
		return nil
	})
	passed(1)
	for i := 1; i < n; i++ {
		clk.Step(spacing - time.Millisecond)
		if got := clk.Waiters(); got != n-i {
			t.Fatalf("at t0+%s: %d requests queued, want %d: one started early", clk.Since(t0), got, n-i)
		}
		clk.Step(time.Millisecond)
		if got := clk.Waiters(); got != n-i-1 {
			t.Fatalf("at t0+%s: %d requests queued, want %d", clk.Since(t0), got, n-i-1)
		}
		passed(i + 1)
	}
	wg.Wait()
	if count(codes, 200) != n {
		t.Fatalf("codes %v, want all admitted", codes)
	}
	for i, at := range e.arrivals() {
		if want := t0.Add(time.Duration(i) * spacing); !at.Equal(want) {
			t.Errorf("request %d reached the upstream at t0+%s, want t0+%s", i, at.Sub(t0), want.Sub(t0))
		}
	}
	// Each request but the first waited i spacings: n-1 delays of 1..n-1 spacings.
	wantSum := spacing.Seconds() * float64(n*(n-1)/2)
	if got, sum := e.m.QueueDelaySeconds.Count(), e.m.QueueDelaySeconds.Sum(); got != n-1 || math.Abs(sum-wantSum) > 1e-9 {
		t.Errorf("queue delay histogram: %d delays summing %gs, want %d summing %gs", got, sum, n-1, wantSum)
	}
}

func TestQueuedRequestAbandoned(t *testing.T) {
	doc := st.Doc(t, st.Policy("api", []policy.Rule{st.Rule("queue", 1, 2*time.Second, func(r *policy.Rule) {
		r.Algorithm, r.Burst, r.LeakyMode, r.MaxDelayMs = "LeakyBucket", 5, "Queue", 10000
	})}))
	e := newEnv(t, doc, envOpt{})
	if resp, _ := e.do("GET", "/", nil); resp.StatusCode != 200 {
		t.Fatalf("first: %d", resp.StatusCode)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", e.srv.URL+"/", nil)
	if _, err := e.client.Do(req); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second: %v, want the client to give up during the delay", err)
	}
	st.Eventually(t, func() error {
		if got := e.m.QueueAbandoned.Value(); got != 1 {
			return fmt.Errorf("abandoned = %v", got)
		}
		return nil
	})
	if got := e.hits.Load(); got != 1 {
		t.Errorf("upstream saw %d requests, want 1 (the abandoned one never reaches it)", got)
	}
}

func TestProxyPassesUpgradesStreamsAndBodies(t *testing.T) {
	doc := st.Doc(t, st.Policy("api", []policy.Rule{st.Rule("big", 1000, time.Hour)}))
	e := newEnv(t, doc, envOpt{})
	conn, br := rawUpgrade(t, strings.TrimPrefix(e.srv.URL, "http://"))
	defer conn.Close()
	_, _ = io.WriteString(conn, "hello\n")
	if line, err := br.ReadString('\n'); err != nil || line != "echo:hello\n" {
		t.Errorf("upgraded connection: %q, %v", line, err)
	}
	resp, body := e.do("GET", "/stream", nil)
	if resp.StatusCode != 200 || body != "chunk\nchunk\nchunk\n" {
		t.Errorf("stream: %d %q", resp.StatusCode, body)
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	r2, err := e.client.Post(e.srv.URL+"/echo", "application/octet-stream", bytes.NewReader(big))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(r2.Body)
	_ = r2.Body.Close()
	if !bytes.Equal(got, big) {
		t.Errorf("echoed %d bytes, want %d", len(got), len(big))
	}
	// The application sees the peer appended to X-Forwarded-For.
	resp, _ = e.do("GET", "/", map[string]string{"X-Forwarded-For": "5.5.5.5"})
	if got := resp.Header.Get("X-Upstream-Xff"); got != "5.5.5.5, 127.0.0.1" {
		t.Errorf("upstream X-Forwarded-For %q", got)
	}
}

func TestNoConfigPassesThroughUntilOneAppears(t *testing.T) {
	e := newEnv(t, nil, envOpt{noRedis: true})
	if !e.loader.Ready() || e.loader.Current().Present {
		t.Fatalf("ready=%v present=%v, want ready without a config", e.loader.Ready(), e.loader.Current().Present)
	}
	if codes := e.codes(5, "/", nil); count(codes, 200) != 5 {
		t.Errorf("codes %v, want all passed through", codes)
	}
	e.vol.Write(t, map[string][]byte{"policies.json": st.Doc(t, st.Policy("api", []policy.Rule{st.Rule("r", 2, time.Hour)}))})
	if err := e.loader.Load(); err != nil {
		t.Fatal(err)
	}
	if codes := e.codes(3, "/", nil); !slices.Equal(codes, []int{200, 200, 429}) {
		t.Errorf("codes %v after the config appeared", codes)
	}
}

func TestWithoutRedisDecidesLocallyWithTheShare(t *testing.T) {
	doc := st.Doc(t, st.Policy("api", []policy.Rule{st.Rule("r", 12, time.Hour)}, func(p *policy.Policy) {
		p.Replicas = 4
		p.FailureMode = "Open" // no Redis configured is not a failure: the share applies anyway
	}))
	e := newEnv(t, doc, envOpt{noRedis: true})
	codes := e.codes(4, "/", nil)
	if !slices.Equal(codes, []int{200, 200, 200, 429}) {
		t.Errorf("codes %v, want 3 (12/4) admitted", codes)
	}
	resp, _ := e.do("GET", "/", nil)
	if got := resp.Header.Get("RateLimit-Policy"); got != `"r";q=3;w=3600` {
		t.Errorf("RateLimit-Policy %q, want the local share", got)
	}
}
