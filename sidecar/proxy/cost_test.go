package proxy_test

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/testutil/proc"
	st "github.com/sluice-dev/sluice/internal/testutil/sidecartest"
)

// costClients are the protocols a client may speak to the sidecar: HTTP/1.1 (the fasthttp
// path, which watches the upstream's body stream) and h2c (net/http, which watches what it
// writes).
func costClients() map[string]*http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return map[string]*http.Client{
		"http1": {Transport: &http.Transport{}},
		"h2c":   {Transport: &http.Transport{Protocols: &p}},
	}
}

// costUpstream answers /cost?h=V with header X-Usage-Tokens: V, /cost?j=BODY with that JSON
// body, /cost?big=1 with a JSON body over the 4 MiB the sidecar searches; and /sse with an
// event stream whose usage comes last, sent only once gate is closed (or after 5 s, which
// sets stalled: the client did not get the first event while the upstream held the rest).
type costUpstream struct {
	gate    chan struct{}
	stalled atomic.Bool
}

func (u *costUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	switch r.URL.Path {
	case "/sse":
		w.Header().Set("Content-Type", "text/event-stream")
		fl := http.NewResponseController(w)
		_, _ = io.WriteString(w, "data: {\"choices\":[{\"delta\":\"Hel\"}],\"usage\":null}\n\n")
		_ = fl.Flush()
		select {
		case <-u.gate:
		case <-time.After(proc.Patience):
			u.stalled.Store(true)
		}
		_, _ = io.WriteString(w, ": a comment\r\nevent: message\r\ndata: {\"usage\":{\"total_tokens\":3}}\r\n\r\n")
		_, _ = io.WriteString(w, "data: {\"choices\":[],\ndata: \"usage\":{\"prompt_tokens\":5,\"total_tokens\":25}}\n\n")
		_ = fl.Flush()
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
		return
	case "/cost":
		if r.Method == http.MethodPost && q.Get("noread") == "" {
			_, _ = io.Copy(io.Discard, r.Body) // net/http sends the 100 Continue only now
		}
		if v, ok := q["h"]; ok {
			w.Header().Set("X-Usage-Tokens", v[0])
		}
		if q.Get("big") != "" {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"pad":"`+strings.Repeat("x", 5<<20)+`","usage":{"total_tokens":3}}`)
			return
		}
		if j, ok := q["j"]; ok {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, j[0])
			return
		}
		_, _ = io.WriteString(w, "ok")
	}
}

// costPath is /cost with the query k=v, v escaped.
func costPath(kv string) string {
	k, v, _ := strings.Cut(kv, "=")
	if k == "" {
		return "/cost"
	}
	return "/cost?" + k + "=" + url.QueryEscape(v)
}

func costRule(alg string, limit int64, window time.Duration, minimum int64, rc policy.ResponseCost) policy.Rule {
	return st.Rule("tokens", limit, window, func(r *policy.Rule) {
		r.Algorithm = alg
		if alg == "FixedWindow" {
			r.Burst = 0
		}
		r.Cost = minimum
		r.ResponseCost = &rc
	})
}

// TestResponseCostStreamsServerSentEventsAndChargesTheDebt runs an LLM-like stream through the
// sidecar to a TokenBucket of 10 tokens refilling 1 a second, minimumCost 1: the client gets
// the first event while the upstream still holds the rest (unbuffered), the usage of the last
// event carrying it (25) is charged, and the 15 tokens of debt deny the next requests with a
// Retry-After that counts them exactly, on Redis and on the local store, over HTTP/1.1 and h2c.
func TestResponseCostStreamsServerSentEventsAndChargesTheDebt(t *testing.T) {
	for _, redis := range []bool{true, false} {
		for proto, client := range costClients() {
			t.Run(fmt.Sprintf("redis=%v %s", redis, proto), func(t *testing.T) {
				t0 := time.Date(2026, 5, 4, 10, 0, 0, 0, time.UTC)
				clock := clocktesting.NewFakeClock(t0)
				u := &costUpstream{gate: make(chan struct{})}
				doc := st.Doc(t, st.Policy("llm", []policy.Rule{costRule("TokenBucket", 10, 10*time.Second, 1, policy.ResponseCost{JSONField: "usage.total_tokens"})}))
				e := newEnv(t, doc, envOpt{noRedis: !redis, clock: clock, upstream: u.ServeHTTP})
				e.client = client
				t.Cleanup(client.CloseIdleConnections)

				resp, err := client.Get(e.srv.URL + "/sse")
				if err != nil {
					t.Fatal(err)
				}
				if got := resp.Header.Get("X-RateLimit-Remaining"); resp.StatusCode != 200 || got != "9" {
					t.Fatalf("status %d, remaining %q: want 200 with 9 left after the minimumCost", resp.StatusCode, got)
				}
				br := bufio.NewReader(resp.Body)
				first, err := br.ReadString('\n')
				if err != nil || !strings.Contains(first, "Hel") {
					t.Fatalf("first event %q: %v", first, err)
				}
				close(u.gate) // the upstream sends the rest only now
				rest, _ := io.ReadAll(br)
				_ = resp.Body.Close()
				if u.stalled.Load() {
					t.Fatal("the client got the first event only after the upstream had sent the last: the stream was buffered")
				}
				if !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
					t.Fatalf("rest of the stream %q", rest)
				}

				steps := []struct {
					after       time.Duration
					code        int
					retry, left string
				}{
					{0, 429, "16", "0"}, // 10 - 25 = -15: 16 s until a token is back
					{15 * time.Second, 429, "1", "0"},
					{16 * time.Second, 200, "", "0"},
				}
				for i, s := range steps {
					clock.SetTime(t0.Add(s.after))
					resp, body := e.do("GET", "/cost?h=1", nil)
					if resp.StatusCode != s.code || resp.Header.Get("Retry-After") != s.retry || resp.Header.Get("X-RateLimit-Remaining") != s.left {
						t.Fatalf("step %d at +%s: status %d, Retry-After %q, remaining %q; want %d, %q, %q: %s", i, s.after, resp.StatusCode,
							resp.Header.Get("Retry-After"), resp.Header.Get("X-RateLimit-Remaining"), s.code, s.retry, s.left, body)
					}
				}
				if got := e.m.ResponseCostMissing("llm", "tokens").Value(); got != 1 {
					// the /cost request admitted last has no JSON body: minimumCost, missing
					t.Errorf("sluice_response_cost_missing_total %v, want 1", got)
				}
			})
		}
	}
}

// TestResponseCostFromHeaderAndJSONBody charges a FixedWindow of 100 per hour, minimumCost 2,
// what each response reports, and checks each request's remaining: a value below the minimum
// costs the minimum, and a missing, negative, fractional, quoted, exponent, overflowing or
// unparseable value, or a body too large to search, costs the minimum and counts as missing.
func TestResponseCostFromHeaderAndJSONBody(t *testing.T) {
	type step struct {
		query   string
		left    string // X-RateLimit-Remaining of this request (after its minimumCost)
		missing float64
	}
	tests := map[string]struct {
		rc    policy.ResponseCost
		steps []step
	}{
		"header": {policy.ResponseCost{Header: "X-Usage-Tokens"}, []step{
			{"h=10", "98", 0}, // count 10
			{"", "88", 1},     // 12
			{"h=-3", "86", 2}, // 14
			{"h=2.5", "84", 3},
			{"h=1", "82", 3}, // below the minimum: 2
			{"h=99999999999999999999", "80", 4},
			{"h=0", "78", 4},
			{"h=+5", "76", 5}, // no sign allowed
			{"h=40", "74", 5}, // 64
			{"", "34", 6},
		}},
		"jsonField": {policy.ResponseCost{JSONField: "usage.total_tokens"}, []step{
			{`j={"usage":{"total_tokens":30}}`, "98", 0}, // count 30
			{`j={"usage":{"total_tokens":"5"}}`, "68", 1},
			{`j={"usage":{"total_tokens":1e2}}`, "66", 2},
			{`j={"usage":{"total_tokens":12.0}}`, "64", 3},
			{`j={"usage":{"total_tokens":-1}}`, "62", 4},
			{`j={"usage":{}}`, "60", 5},
			{`j=not json`, "58", 6},
			{`j=[1,2]`, "56", 7},
			{"big=1", "54", 8},
			{`j={"x":[{"y":1}],"usage":{"total_tokens":10,"prompt_tokens":4}}`, "52", 8}, // 56
			{"h=30", "42", 9},                                                            // the header is no source of this rule
		}},
	}
	for name, tc := range tests {
		for _, redis := range []bool{true, false} {
			for proto, client := range costClients() {
				t.Run(fmt.Sprintf("%s redis=%v %s", name, redis, proto), func(t *testing.T) {
					t0 := time.Date(2026, 5, 4, 10, 0, 0, 0, time.UTC)
					clock := clocktesting.NewFakeClock(t0)
					u := &costUpstream{}
					doc := st.Doc(t, st.Policy("api", []policy.Rule{costRule("FixedWindow", 100, time.Hour, 2, tc.rc)}))
					e := newEnv(t, doc, envOpt{noRedis: !redis, clock: clock, upstream: u.ServeHTTP})
					e.client = client
					t.Cleanup(client.CloseIdleConnections)
					for i, s := range tc.steps {
						resp, body := e.do("GET", costPath(s.query), nil)
						if resp.StatusCode != 200 || resp.Header.Get("X-RateLimit-Remaining") != s.left {
							t.Fatalf("step %d %s: status %d, remaining %q, want 200 and %s: %.100s", i, s.query, resp.StatusCode,
								resp.Header.Get("X-RateLimit-Remaining"), s.left, body)
						}
						if got := e.m.ResponseCostMissing("api", "tokens").Value(); got != s.missing {
							t.Fatalf("step %d %s: sluice_response_cost_missing_total %v, want %v", i, s.query, got, s.missing)
						}
						if v := resp.Header.Get("X-Usage-Tokens"); strings.HasPrefix(s.query, "h=") && v == "" {
							t.Errorf("step %d: the usage header was not passed on", i)
						}
					}
					// A cost beyond the limit fills the window (a FixedWindow count stops at
					// its limit): denied until the hour ends.
					e.do("GET", costPath(`j={"usage":{"total_tokens":1000}}`)+"&h=1000", nil)
					clock.SetTime(t0.Add(10 * time.Minute))
					resp, _ := e.do("GET", "/cost", nil)
					if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "3000" {
						t.Errorf("after a cost of 1000: status %d, Retry-After %q; want 429, 3000", resp.StatusCode, resp.Header.Get("Retry-After"))
					}
				})
			}
		}
	}
}

// TestResponseCostDuringAnOutageIsChargedToRedisAfter: a request decided on the local share
// while Redis is down is charged there what its response reports, and that late charge goes
// to Redis with the outage's admissions once Redis is back (sluice_outage_units_total
// {outcome="charged"} counts each local admission's 2 and the response's 28 beyond them).
func TestResponseCostDuringAnOutageIsChargedToRedisAfter(t *testing.T) {
	if testing.Short() {
		t.Skip("stops and restarts redis-server")
	}
	u := &costUpstream{}
	doc := st.Doc(t, st.Policy("api", []policy.Rule{costRule("FixedWindow", 1000, time.Hour, 2, policy.ResponseCost{Header: "X-Usage-Tokens"})}))
	e := newEnv(t, doc, envOpt{upstream: u.ServeHTTP, cooldown: 50 * time.Millisecond, timeout: 2 * time.Second}) // killed: refused at once
	if resp, _ := e.do("GET", "/cost?h=5", nil); resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	e.redis.Kill()
	resp, _ := e.do("GET", "/cost?h=30", nil)
	local := e.m.ForPolicy("api").Local.Value()
	if resp.StatusCode != 200 || local != 1 {
		t.Fatalf("during the outage: status %d, %v local decisions; want 200 decided locally", resp.StatusCode, local)
	}
	e.redis.Restart()
	charged := e.m.OutageUnits.WithLabelValues("charged")
	st.Eventually(t, func() error {
		e.do("GET", "/cost", nil) // decided locally until the breaker lets a request try Redis
		local := e.m.ForPolicy("api").Local.Value()
		if got, want := charged.Value(), 2*local+28; got != want {
			return fmt.Errorf("%v units charged to Redis after %v local decisions, want %v", got, local, want)
		}
		return nil
	})
}

// TestResponseCostWithExpectContinue: a request with Expect: 100-continue goes through the
// sidecar's own upstream connection, whose answer is charged as any: after the body was sent,
// or when the upstream answers before the body (a final answer the client gets without a 100).
func TestResponseCostWithExpectContinue(t *testing.T) {
	for _, redis := range []bool{true, false} {
		t.Run(fmt.Sprintf("redis=%v", redis), func(t *testing.T) {
			u := &costUpstream{}
			doc := st.Doc(t, st.Policy("api", []policy.Rule{costRule("FixedWindow", 100, time.Hour, 2, policy.ResponseCost{JSONField: "usage.total_tokens"})}))
			e := newEnv(t, doc, envOpt{noRedis: !redis, upstream: u.ServeHTTP})
			client := &http.Client{Transport: &http.Transport{ExpectContinueTimeout: 5 * time.Second}}
			t.Cleanup(client.CloseIdleConnections)
			for i, s := range []struct{ path, left string }{
				{costPath(`j={"usage":{"total_tokens":10}}`), "98"},
				{costPath(`j={"usage":{"total_tokens":20}}`) + "&noread=1", "88"},
				{"/cost", "68"},
			} {
				req, _ := http.NewRequest("POST", e.srv.URL+s.path, strings.NewReader("body"))
				req.Header.Set("Expect", "100-continue")
				resp, err := client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode != 200 || resp.Header.Get("X-RateLimit-Remaining") != s.left {
					t.Fatalf("step %d: status %d, remaining %q, want 200 and %s: %s", i, resp.StatusCode, resp.Header.Get("X-RateLimit-Remaining"), s.left, body)
				}
			}
		})
	}
}

// TestResponseCostOnACalendarQuota: a monthly quota charged from a response header counts the
// reported cost, and one response over the quota denies the key until the month ends.
func TestResponseCostOnACalendarQuota(t *testing.T) {
	for _, redis := range []bool{true, false} {
		t.Run(fmt.Sprintf("redis=%v", redis), func(t *testing.T) {
			t0 := time.Date(2026, 5, 4, 10, 0, 0, 0, time.UTC)
			clock := clocktesting.NewFakeClock(t0)
			u := &costUpstream{}
			rule := costRule("FixedWindow", 100, 0, 1, policy.ResponseCost{Header: "X-Usage-Tokens"})
			rule.WindowMs, rule.Calendar = 0, &policy.Calendar{Period: "Month", TimeZone: "UTC"}
			e := newEnv(t, st.Doc(t, st.Policy("plan", []policy.Rule{rule})), envOpt{noRedis: !redis, clock: clock, upstream: u.ServeHTTP})
			for i, s := range []struct{ query, left string }{{"h=60", "99"}, {"h=1000", "39"}} {
				if resp, _ := e.do("GET", costPath(s.query), nil); resp.StatusCode != 200 || resp.Header.Get("X-RateLimit-Remaining") != s.left {
					t.Fatalf("step %d: status %d, remaining %q, want 200 and %s", i, resp.StatusCode, resp.Header.Get("X-RateLimit-Remaining"), s.left)
				}
			}
			resp, _ := e.do("GET", "/cost", nil)
			if want := strconv.Itoa(27*86400 + 14*3600); resp.StatusCode != 429 || resp.Header.Get("Retry-After") != want {
				t.Errorf("over the quota: status %d, Retry-After %q; want 429, %s (June 1st)", resp.StatusCode, resp.Header.Get("Retry-After"), want)
			}
		})
	}
}

// TestResponseCostKeepsTrailersAndHead: a watched body keeps what the proxy passes on without
// responseCost: a chunked JSON body's usage is charged and its trailers, announced or not,
// still reach the client; a HEAD answer has no body to search (missing, the minimum).
func TestResponseCostKeepsTrailersAndHead(t *testing.T) {
	upstream := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Resp-Trailer")
		w.Header().Set("Content-Type", "application/json")
		if r.Method == http.MethodHead {
			return
		}
		_, _ = io.WriteString(w, `{"usage":`)
		w.(http.Flusher).Flush()
		_, _ = io.WriteString(w, `{"total_tokens":12}}`)
		w.Header().Set("X-Resp-Trailer", "declared")
		w.Header().Set(http.TrailerPrefix+"X-Late-Trailer", "undeclared")
	}
	for _, redis := range []bool{true, false} {
		for proto, client := range costClients() {
			t.Run(fmt.Sprintf("redis=%v %s", redis, proto), func(t *testing.T) {
				doc := st.Doc(t, st.Policy("api", []policy.Rule{costRule("FixedWindow", 100, time.Hour, 2, policy.ResponseCost{JSONField: "usage.total_tokens"})}))
				e := newEnv(t, doc, envOpt{noRedis: !redis, upstream: upstream})
				e.client = client
				t.Cleanup(client.CloseIdleConnections)
				resp, err := client.Get(e.srv.URL + "/")
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				if string(body) != `{"usage":{"total_tokens":12}}` || resp.Trailer.Get("X-Resp-Trailer") != "declared" || resp.Trailer.Get("X-Late-Trailer") != "undeclared" {
					t.Errorf("body %q, trailers %v", body, resp.Trailer)
				}
				resp, _ = e.do("HEAD", "/", nil)
				if resp.StatusCode != 200 || resp.Header.Get("X-RateLimit-Remaining") != "86" { // 100 - 12 - 2
					t.Errorf("HEAD: status %d, remaining %q, want 200 and 86", resp.StatusCode, resp.Header.Get("X-RateLimit-Remaining"))
				}
				if resp, _ = e.do("GET", "/", nil); resp.Header.Get("X-RateLimit-Remaining") != "84" {
					t.Errorf("after HEAD: remaining %q, want 84 (HEAD cost the minimum)", resp.Header.Get("X-RateLimit-Remaining"))
				}
				// Over h2c the HEAD's answer reaches the client when ReverseProxy flushes the head
				// (it announces trailers), before the handler returns and settles the HEAD's
				// missing cost: wait for that settle.
				missing := func() float64 { return e.m.ResponseCostMissing("api", "tokens").Value() }
				for deadline := time.Now().Add(proc.Patience); missing() < 1 && time.Now().Before(deadline); {
					time.Sleep(time.Millisecond)
				}
				if got := missing(); got != 1 {
					t.Errorf("sluice_response_cost_missing_total %v, want 1 (the HEAD)", got)
				}
			})
		}
	}
}
