package proxy_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/sluice-dev/sluice/internal/policy"
	st "github.com/sluice-dev/sluice/internal/testutil/sidecartest"
)

// This file checks the sidecar's side of what internal/rls/truth_test.go checks at the
// decision core and the RLS front end: over random policies, replica ranks and traces, in
// each store mode (Redis deciding, the local store alone, Redis down), every HTTP answer tells
// the truth:
//
//   - a 429 says 0 remaining, in the legacy and the draft headers;
//   - its Retry-After is whole seconds, the exact retry-after-ms rounded up, and the same
//     request sent that many milliseconds later passes; without one, the body names the
//     reason, and the same request still fails three windows later;
//   - a 200's X-RateLimit-Remaining and -Reset say when the next one-unit request passes: at
//     once with at least 1 remaining, after the reset with none.
//
// Each check is a step of the trace: the trace goes on from the state it leaves.

// sidecar store modes.
const (
	scRedis = iota
	scLocal
	scDown
	scModes
)

var scModeNames = [scModes]string{"redis", "local", "down"}

// randomHTTPPolicy is a policy of 1 to 3 rules matching every request, each keyed by X-K
// and charged by its own cost header, for replica podName of a random fleet (ranked, unnamed
// or not listed).
func randomHTTPPolicy(rng *rand.Rand, name string) (p policy.Policy, podName string, maxW time.Duration) {
	algs := []string{"FixedWindow", "SlidingWindowLog", "SlidingWindowCounter", "TokenBucket", "LeakyBucket"}
	windows := []time.Duration{50 * time.Millisecond, time.Second, 7 * time.Second, time.Minute}
	var rules []policy.Rule
	for j := range 1 + rng.IntN(3) {
		w := windows[rng.IntN(len(windows))]
		maxW = max(maxW, w)
		alg := algs[rng.IntN(len(algs))]
		rules = append(rules, st.Rule("r"+strconv.Itoa(j), 1+rng.Int64N(6), w, func(r *policy.Rule) {
			r.Algorithm = alg
			r.Key = []policy.KeyPart{{Source: policy.SourceHeader, Name: "X-K"}}
			r.CostHeader = "X-Cost-R" + strconv.Itoa(j)
			r.Burst = 0
			if (alg == "TokenBucket" || alg == "LeakyBucket") && rng.IntN(3) > 0 {
				r.Burst = 1 + rng.Int64N(8)
			}
			if alg == "LeakyBucket" {
				r.LeakyMode = "Meter"
			}
			if rng.IntN(7) == 0 {
				r.Mode = policy.Shadow
			}
		}))
	}
	p = st.Policy(name, rules, func(p *policy.Policy) {
		p.Response.RetryAfterMs = true
		podName = st.RandomFleet(rng, p)
		if rng.IntN(10) == 0 {
			p.FailureMode = policy.FailureOpen
		}
	})
	return p, podName, maxW
}

// TestSidecarAnswersTellTheTruth drives random traces through a sidecar's request path on a
// fake clock and checks each answer against the requests it predicts.
func TestSidecarAnswersTellTheTruth(t *testing.T) {
	seed := st.Seed(t, 1)
	rng := rand.New(rand.NewPCG(seed, 23))
	const tracesPerMode, steps = 20, 30
	seen := map[string]int{}
	for mode := range scModes {
		t.Run(scModeNames[mode], func(t *testing.T) {
			clk := clocktesting.NewFakeClock(time.UnixMilli(1_800_000_000_000))
			o := envOpt{clock: clk, noRedis: mode == scLocal}
			if mode == scDown {
				o.timeout = 0
			}
			e := newEnv(t, nil, o)
			if mode == scDown {
				e.redis.Kill()
			}
			for i := range tracesPerMode {
				p, pod, maxW := randomHTTPPolicy(rng, fmt.Sprintf("t%d", i))
				e.vol.Write(t, map[string][]byte{"policies.json": st.Doc(t, p)})
				e.loader.PodName = pod
				if err := e.loader.Load(); err != nil {
					t.Fatal(err)
				}
				tr := &sidecarTrace{e: e, clk: clk, p: p, maxW: maxW, mode: scModeNames[mode], seen: seen,
					what: fmt.Sprintf("trace %d (%s), pod %q of %+v", i, scModeNames[mode], pod, p)}
				for range steps {
					tr.advance(rng)
					tr.step(rng)
				}
			}
		})
	}
	t.Logf("checks made: %v", seen)
	for _, m := range scModeNames {
		for _, kind := range []string{"retry ", "reset ", "now "} {
			if seen[kind+m] == 0 {
				t.Errorf("no check of kind %q", kind+m)
			}
		}
	}
	if seen["never no_local_share"] == 0 {
		t.Errorf("no check of a denial without a retry (no_local_share): %v", seen)
	}
}

type sidecarTrace struct {
	e    *env
	clk  *clocktesting.FakeClock
	p    policy.Policy
	maxW time.Duration
	mode string
	seen map[string]int
	what string
}

func (tr *sidecarTrace) advance(rng *rand.Rand) {
	tr.clk.Step(st.RandomStep(rng, tr.maxW))
}

func (tr *sidecarTrace) hasShadow() bool {
	for _, r := range tr.p.Rules {
		if r.Mode == policy.Shadow {
			return true
		}
	}
	return false
}

// send sends one request with the costs hdr names and returns its status, headers and body.
func (tr *sidecarTrace) send(hdr map[string]string) (int, http.Header, string) {
	resp, body := tr.e.do("GET", "/", hdr)
	return resp.StatusCode, resp.Header, body
}

// oneUnit is a request of one unit of every rule.
func oneUnit() map[string]string { return map[string]string{"X-K": "k"} }

func (tr *sidecarTrace) step(rng *rand.Rand) {
	t := tr.e.t
	hdr := oneUnit()
	for j, r := range tr.p.Rules {
		if rng.IntN(4) == 0 {
			hdr["X-Cost-R"+strconv.Itoa(j)] = strconv.FormatInt(1+rng.Int64N(r.LimiterLimit().Capacity()), 10)
		}
	}
	code, h, body := tr.send(hdr)
	switch code {
	case http.StatusOK:
		remaining, reset := h.Get("X-RateLimit-Remaining"), h.Get("X-RateLimit-Reset")
		if remaining == "" {
			return // no rule decided (fail open while Redis is down), or only shadow rules
		}
		if reset == "" && remaining == "0" && tr.hasShadow() {
			// A shadow rule shown at 0 that no wait lets pass (it holds no share here): it
			// never denies, so there is nothing to wait for.
			tr.seen["shadow "+tr.mode]++
			return
		}
		rem, err1 := strconv.ParseInt(remaining, 10, 64)
		secs, err2 := strconv.ParseInt(reset, 10, 64)
		if err1 != nil || err2 != nil || rem < 0 || secs < 0 {
			t.Fatalf("%s: 200 with X-RateLimit-Remaining %q, X-RateLimit-Reset %q", tr.what, remaining, reset)
		}
		if rem == 0 {
			tr.seen["reset "+tr.mode]++
			tr.clk.Step(time.Duration(secs) * time.Second)
		} else {
			tr.seen["now "+tr.mode]++
		}
		if again, ah, ab := tr.send(oneUnit()); again == http.StatusTooManyRequests {
			t.Fatalf("%s: 200 said remaining %d, reset %ds; one unit then got 429 (%v) %s", tr.what, rem, secs, ah, ab)
		}
	case http.StatusTooManyRequests:
		if got := h.Get("X-RateLimit-Remaining"); got != "0" {
			t.Fatalf("%s: a 429 says X-RateLimit-Remaining %q", tr.what, got)
		}
		retryAfter, retryMs := h.Get("Retry-After"), h.Get("Retry-After-Ms")
		if retryAfter == "" {
			if retryMs != "" {
				t.Fatalf("%s: retry-after-ms %q without Retry-After", tr.what, retryMs)
			}
			var b struct {
				Reason string `json:"reason"`
			}
			if err := json.Unmarshal([]byte(body), &b); err != nil || b.Reason == "" || b.Reason == "limited" {
				t.Fatalf("%s: a 429 without Retry-After, body %q: want the reason no wait helps", tr.what, body)
			}
			tr.seen["never "+b.Reason]++
			tr.clk.Step(3 * tr.maxW)
			if again, _, _ := tr.send(hdr); again == http.StatusOK {
				t.Fatalf("%s: a 429 without Retry-After (%s) passed %s later", tr.what, b.Reason, 3*tr.maxW)
			}
			return
		}
		secs, err1 := strconv.ParseInt(retryAfter, 10, 64)
		ms, err2 := strconv.ParseInt(retryMs, 10, 64)
		if err1 != nil || err2 != nil || ms <= 0 || secs != (ms+999)/1000 {
			t.Fatalf("%s: Retry-After %q, retry-after-ms %q: want whole seconds, the ms rounded up", tr.what, retryAfter, retryMs)
		}
		tr.seen["retry "+tr.mode]++
		tr.clk.Step(time.Duration(ms) * time.Millisecond)
		if again, ah, ab := tr.send(hdr); again == http.StatusTooManyRequests {
			t.Fatalf("%s: 429 with retry-after-ms %d, and 429 again then (%v) %s", tr.what, ms, ah, ab)
		}
	case http.StatusServiceUnavailable:
		// A Closed policy while Redis is down: no decision to check.
	default:
		t.Fatalf("%s: status %d: %s", tr.what, code, body)
	}
}
