package rls_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	rlsv3common "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/sluice-dev/sluice/internal/dataplane/breaker"
	"github.com/sluice-dev/sluice/internal/dataplane/config"
	"github.com/sluice-dev/sluice/internal/dataplane/decide"
	"github.com/sluice-dev/sluice/internal/dataplane/metrics"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/limiter/redisstore"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/rls"
	"github.com/sluice-dev/sluice/internal/testutil/proc"
	"github.com/sluice-dev/sluice/internal/testutil/redisserver"
	"github.com/sluice-dev/sluice/internal/testutil/sidecartest"
)

// This file checks, over random policies, replica counts and traces, that every answer tells
// the truth, in every store and failure mode (Redis, the local store alone, Redis down with
// each failure mode), at the decision core (decide.Verdict) and at the RLS front end's
// response:
//
//   - a denial reports no remaining units;
//   - a denial's retry is a time at which the same request passes if nothing else arrives
//     (the trace then sends it exactly then, to the millisecond), or there is none, and then
//     no wait lets it pass (the trace sends it again much later);
//   - an admission's remaining and reset say when the next request passes: with remaining
//     at least 1 a one-unit request passes at once, with none it passes after the reset.
//
// Each check is a step of the trace, so the trace goes on from the state it leaves.

// store modes of a trace.
const (
	viaRedis  = iota // the shared store decides
	localOnly        // no shared store: this replica's share decides
	redisDown        // the shared store is unreachable: the policy's failure mode decides
	modes
)

var modeNames = [modes]string{"redis", "local", "down"}

// truthEnv is what every trace shares: a redis-server and a store that cannot reach one, and
// the count of each kind of check made, so that the test knows it made each.
type truthEnv struct {
	shared, dead decide.Store
	seen         map[string]int
}

func newTruthEnv(t *testing.T) *truthEnv {
	t.Helper()
	srv := redisserver.StartTest(t)
	client, err := redisstore.NewClientFromURL(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	port, err := redisserver.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	deadClient, err := redisstore.NewClientFromURL("redis://127.0.0.1:" + strconv.Itoa(port) + "/0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = deadClient.Close() })
	e := &truthEnv{
		seen: map[string]int{},
		// A loaded machine must not make a live Redis look down: the traces of mode viaRedis
		// expect it to decide.
		shared: redisstore.New(client, redisstore.Options{Timeout: proc.Patience, ExplicitTime: true}),
		dead:   redisstore.New(deadClient, redisstore.Options{Timeout: time.Second, ExplicitTime: true}),
	}
	t.Cleanup(func() { _ = e.shared.(*redisstore.Store).Close(); _ = e.dead.(*redisstore.Store).Close() })
	return e
}

// randomPolicy is a policy of 1 to 3 descriptor rules over 2 descriptors (d0, d1; a
// descriptor may match several rules), served by replica podName of a random fleet: ranked,
// unnamed, or not listed. queue allows LeakyBucket Queue rules (not over RLS).
func randomPolicy(rng *rand.Rand, name string, queue bool) (p policy.Policy, podName string) {
	p = policy.Policy{Name: name, Domain: "edge", FailureMode: policy.FailureLocal,
		Response: policy.Response{StatusCode: 429, Headers: policy.HeadersBoth}}
	podName = sidecartest.RandomFleet(rng, &p)
	switch rng.IntN(10) {
	case 0:
		p.FailureMode = policy.FailureOpen
	case 1:
		p.FailureMode = policy.FailureClosed
	}
	algs := []string{"FixedWindow", "SlidingWindowLog", "SlidingWindowCounter", "TokenBucket", "LeakyBucket"}
	windows := []int64{50, 1000, 7000, 60_000}
	for j := range 1 + rng.IntN(3) {
		r := policy.Rule{Name: "r" + strconv.Itoa(j), Algorithm: algs[rng.IntN(len(algs))],
			Limit: 1 + rng.Int64N(6), WindowMs: windows[rng.IntN(len(windows))], Cost: 1, Mode: policy.Enforce,
			Match: &policy.Match{Descriptors: []policy.DescriptorEntry{{Key: "generic_key", Value: "d" + strconv.Itoa(rng.IntN(2))}}},
			Key:   []policy.KeyPart{{Source: policy.SourceDescriptor, Name: "generic_key"}}}
		if r.Algorithm == "TokenBucket" || r.Algorithm == "LeakyBucket" {
			if rng.IntN(3) > 0 {
				r.Burst = 1 + rng.Int64N(8)
			}
		}
		if r.Algorithm == "LeakyBucket" {
			r.LeakyMode = "Meter"
			if queue && rng.IntN(2) == 0 {
				r.LeakyMode = "Queue"
				r.MaxDelayMs = rng.Int64N(2 * r.WindowMs)
			}
		}
		if rng.IntN(7) == 0 {
			r.Mode = policy.Shadow
		}
		p.Rules = append(p.Rules, r)
	}
	return p, podName
}

// truthTrace is one trace's policy, compiled for its replica, and its decider.
type truthTrace struct {
	t     *testing.T
	mode  int
	clk   *clocktesting.FakeClock
	rules []*config.Rule
	d     *decide.Decider
	srv   *rls.Server
	maxW  time.Duration
	seen  map[string]int
	what  string // the trace, for failures
}

func (e *truthEnv) trace(t *testing.T, rng *rand.Rand, i, mode int, queue bool) *truthTrace {
	t.Helper()
	p, pod := randomPolicy(rng, "t"+strconv.Itoa(i), queue)
	doc := &policy.Document{Version: policy.Version, Namespace: "truth", Policies: []policy.Policy{p}}
	m := metrics.New()
	cfg, err := config.CompileDomains(doc, pod, m)
	if err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakeClock(time.UnixMilli(1_800_000_000_000 + int64(i)*7_919))
	opts := decide.Options{Local: limiter.NewMemoryStore(limiter.MemoryStoreOptions{}), Metrics: m, Clock: clk,
		Log:     slog.New(slog.NewJSONHandler(io.Discard, nil)),
		Breaker: breaker.New(breaker.Options{Threshold: 1, Cooldown: time.Hour, MaxCooldown: time.Hour, Clock: clk})}
	switch mode {
	case viaRedis:
		opts.Remote = e.shared
	case redisDown:
		opts.Remote = e.dead
	}
	d := decide.New(opts)
	tr := &truthTrace{t: t, mode: mode, clk: clk, seen: e.seen, rules: cfg.Domains["edge"], d: d,
		srv:  rls.New(rls.Options{Config: func() *config.Config { return cfg }, Decider: d, Metrics: m, Clock: clk}),
		what: fmt.Sprintf("trace %d (%s), pod %q of %+v", i, modeNames[mode], pod, p)}
	for _, r := range tr.rules {
		tr.maxW = max(tr.maxW, r.Limit.Window)
	}
	return tr
}

// cost draws a request's cost for rule r: mostly 1, sometimes more, sometimes beyond the
// capacity (a request no wait lets pass).
func cost(rng *rand.Rand, r *config.Rule) int64 {
	switch x := rng.IntN(20); {
	case x == 0:
		return r.Limit.Capacity() + 1 + rng.Int64N(3)
	case x < 5:
		return 1 + rng.Int64N(r.Limit.Capacity())
	}
	return 1
}

// advance moves the trace's clock by a random step: none, a little, or windows.
func (tr *truthTrace) advance(rng *rand.Rand) {
	tr.clk.Step(sidecartest.RandomStep(rng, tr.maxW))
}

// coreTake is one rule's take of a core request.
type coreTake struct {
	rule *config.Rule
	n    int64
}

// decideCore decides takes with the decision core, as a front end does.
func (tr *truthTrace) decideCore(takes []coreTake) decide.Verdict {
	rq := decide.NewRequest()
	defer rq.Release()
	for _, tk := range takes {
		rq.Add(tk.rule.Policy, tk.rule, string(tk.rule.Key.AppendDescriptor(nil, func(string) string { return "v" })), tk.n, false)
	}
	return tr.d.Decide(context.Background(), rq, tr.clk.Now())
}

// TestAnswersTellTheTruth: the decision core's Verdicts (every algorithm, LeakyBucket Queue
// included) and the RLS server's responses tell the truth over random traces.
func TestAnswersTellTheTruth(t *testing.T) {
	e := newTruthEnv(t)
	seed := sidecartest.Seed(t, 1)
	rng := rand.New(rand.NewPCG(seed, 17))
	const traces, steps = 90, 40
	for i := range traces {
		mode := i % modes
		t.Run(fmt.Sprintf("core-%d-%s", i, modeNames[mode]), func(t *testing.T) {
			tr := e.trace(t, rng, i, mode, true)
			for range steps {
				tr.advance(rng)
				tr.coreStep(rng)
			}
		})
		t.Run(fmt.Sprintf("rls-%d-%s", i, modeNames[mode]), func(t *testing.T) {
			tr := e.trace(t, rng, traces+i, mode, false)
			for range steps {
				tr.advance(rng)
				tr.rlsStep(rng)
			}
		})
	}
	t.Logf("checks made: %v", e.seen)
	for _, kind := range []string{"core never: cost_exceeds_capacity", "core never: no_local_share", "rls no share"} {
		if e.seen[kind] == 0 {
			t.Errorf("no check of kind %q", kind)
		}
	}
	for _, m := range modeNames {
		for _, kind := range []string{"core retry ", "core reset ", "rls retry ", "rls reset "} {
			if e.seen[kind+m] == 0 {
				t.Errorf("no check of kind %q", kind+m)
			}
		}
	}
}

// coreStep sends a random request of some of the trace's rules to the core and checks its
// Verdict, sending the requests that check it.
func (tr *truthTrace) coreStep(rng *rand.Rand) {
	t := tr.t
	var takes []coreTake
	for _, r := range tr.rules {
		if rng.IntN(3) > 0 {
			takes = append(takes, coreTake{r, cost(rng, r)})
		}
	}
	if len(takes) == 0 {
		takes = append(takes, coreTake{tr.rules[0], 1})
	}
	v := tr.decideCore(takes)
	if v.Outcome != decide.Decided {
		if tr.mode != redisDown {
			t.Fatalf("%s: outcome %v with the store up", tr.what, v.Outcome)
		}
		return
	}
	if v.Show == nil {
		t.Fatalf("%s: decided, nothing shown", tr.what)
	}
	if !v.Res.Allowed && v.Res.Remaining != 0 {
		t.Fatalf("%s: a denial reports %d remaining", tr.what, v.Res.Remaining)
	}
	if v.Res.Remaining > v.Res.Limit {
		t.Fatalf("%s: %d remaining of a limit of %d", tr.what, v.Res.Remaining, v.Res.Limit)
	}
	if v.Denied {
		retry, ok := v.RetryAfter()
		reset, rok := v.ResetAfter()
		if ok != rok || (ok && reset != retry) {
			t.Fatalf("%s: denied, retry %s (%v) but reset %s (%v)", tr.what, retry, ok, reset, rok)
		}
		if !ok {
			tr.seen["core never: "+string(v.Res.Reason)]++
			// No wait lets it pass: not even the longest.
			tr.clk.Step(3 * tr.maxW)
			if again := tr.decideCore(takes); again.Outcome == decide.Decided && !again.Denied {
				t.Fatalf("%s: a denial without a retry (%s) passed %s later", tr.what, v.Res.Reason, 3*tr.maxW)
			}
			return
		}
		if retry <= 0 || retry%time.Millisecond != 0 {
			t.Fatalf("%s: retry %s is not a positive whole number of ms", tr.what, retry)
		}
		tr.seen["core retry "+modeNames[tr.mode]]++
		tr.clk.Step(retry)
		if again := tr.decideCore(takes); again.Outcome == decide.Decided && again.Denied {
			t.Fatalf("%s: denied with a retry of %s, and denied again then (by %s: %+v)", tr.what, retry, again.Show.Name, again.Res)
		}
		return
	}
	reset, ok := v.ResetAfter()
	if !ok {
		if !v.Show.Shadow || v.Res.Allowed {
			t.Fatalf("%s: an admission without a reset", tr.what)
		}
		return // a shadow rule's denial that no wait lets pass: nothing to wait for
	}
	// The next request (one unit of the rule shown) passes now, or after the reset.
	if v.Res.Remaining == 0 {
		tr.seen["core reset "+modeNames[tr.mode]]++
		tr.clk.Step(reset)
	}
	if again := tr.decideCore([]coreTake{{v.Show, 1}}); again.Outcome == decide.Decided && !again.Res.Allowed {
		t.Fatalf("%s: rule %s had %d remaining, reset %s; one unit then was denied: %+v", tr.what, v.Show.Name, v.Res.Remaining, reset, again.Res)
	}
}

// rlsRequest is a ShouldRateLimit request for descriptors d0, d1 with hits.
func rlsRequest(hits map[int]uint64) *rlsv3.RateLimitRequest {
	req := &rlsv3.RateLimitRequest{Domain: "edge"}
	for k := range 2 {
		if h, ok := hits[k]; ok {
			req.Descriptors = append(req.Descriptors, &rlsv3common.RateLimitDescriptor{
				Entries:    []*rlsv3common.RateLimitDescriptor_Entry{{Key: "generic_key", Value: "d" + strconv.Itoa(k)}},
				HitsAddend: wrapperspb.UInt64(h)})
		}
	}
	return req
}

func (tr *truthTrace) ask(req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, bool) {
	resp, err := tr.srv.ShouldRateLimit(context.Background(), req)
	if err != nil {
		if tr.mode != redisDown {
			tr.t.Fatalf("%s: %v with the store up", tr.what, err)
		}
		return nil, false
	}
	return resp, true
}

// rlsStep sends a random request of one or both descriptors to the RLS server and checks its
// response, sending the requests that check it.
func (tr *truthTrace) rlsStep(rng *rand.Rand) {
	t := tr.t
	hits := map[int]uint64{}
	for k := range 2 {
		if rng.IntN(3) > 0 || (k == 1 && len(hits) == 0) {
			var r *config.Rule
			for _, x := range tr.rules {
				if x.Descriptors[0].Value == "d"+strconv.Itoa(k) {
					r = x
				}
			}
			h := uint64(1)
			if r != nil {
				h = uint64(cost(rng, r))
			}
			hits[k] = h
		}
	}
	req := rlsRequest(hits)
	resp, ok := tr.ask(req)
	if !ok {
		return
	}
	var longest time.Duration
	never := false
	for i, st := range resp.GetStatuses() {
		cl := st.GetCurrentLimit()
		if cl == nil {
			continue // no rule decided the descriptor (none matches, or Open while down)
		}
		if st.GetLimitRemaining() > cl.GetRequestsPerUnit() {
			t.Fatalf("%s: descriptor %d: %d remaining of %d", tr.what, i, st.GetLimitRemaining(), cl.GetRequestsPerUnit())
		}
		if st.GetCode() == over {
			if st.GetLimitRemaining() != 0 {
				t.Fatalf("%s: descriptor %d over the limit with %d remaining", tr.what, i, st.GetLimitRemaining())
			}
			if cl.GetRequestsPerUnit() == 0 {
				tr.seen["rls no share"]++
				if st.GetDurationUntilReset() != nil {
					t.Fatalf("%s: descriptor %d: no share, and a reset %s", tr.what, i, st.GetDurationUntilReset().AsDuration())
				}
			}
			if st.GetDurationUntilReset() == nil {
				never = true
			} else {
				longest = max(longest, st.GetDurationUntilReset().AsDuration())
			}
		} else if st.GetDurationUntilReset() == nil && st.GetLimitRemaining() != 0 {
			// Only a shadow rule's denial that no wait lets pass has no reset.
			t.Fatalf("%s: descriptor %d admitted without a reset", tr.what, i)
		}
	}
	ra, hasRA := header(resp, decide.HeaderRetryAfter)
	if resp.GetOverallCode() == over {
		if rem, _ := header(resp, decide.HeaderLegacyRemaining); rem != "0" {
			t.Fatalf("%s: over the limit, X-RateLimit-Remaining %q", tr.what, rem)
		}
		if hasRA == never {
			t.Fatalf("%s: over the limit, Retry-After %q (%v), a descriptor without a retry: %v", tr.what, ra, hasRA, never)
		}
		if never {
			tr.seen["rls never "+modeNames[tr.mode]]++
			tr.clk.Step(3 * tr.maxW)
			if again, ok := tr.ask(req); ok && again.GetOverallCode() != over {
				t.Fatalf("%s: a denial without a retry passed %s later", tr.what, 3*tr.maxW)
			}
			return
		}
		if want := strconv.FormatInt(config.CeilSeconds(longest), 10); ra != want {
			t.Fatalf("%s: Retry-After %q, want %s (%s rounded up)", tr.what, ra, want, longest)
		}
		tr.seen["rls retry "+modeNames[tr.mode]]++
		tr.clk.Step(longest)
		if again, ok := tr.ask(req); ok && again.GetOverallCode() == over {
			t.Fatalf("%s: over the limit with a retry of %s, and again then: %v", tr.what, longest, again)
		}
		return
	}
	if hasRA {
		t.Fatalf("%s: Retry-After %q on an admission", tr.what, ra)
	}
	// One descriptor's next request (one unit) passes now, or after its reset.
	for i, st := range resp.GetStatuses() {
		if st.GetCurrentLimit() == nil || st.GetDurationUntilReset() == nil {
			continue
		}
		k := 0
		if req.Descriptors[i].Entries[0].Value == "d1" {
			k = 1
		}
		if st.GetLimitRemaining() == 0 {
			tr.seen["rls reset "+modeNames[tr.mode]]++
			tr.clk.Step(st.GetDurationUntilReset().AsDuration())
		}
		if again, ok := tr.ask(rlsRequest(map[int]uint64{k: 1})); ok && again.GetOverallCode() == over {
			t.Fatalf("%s: descriptor d%d had %d remaining, reset %s; one unit then was denied: %v\nafter %v", tr.what, k,
				st.GetLimitRemaining(), st.GetDurationUntilReset().AsDuration(), again, resp)
		}
		return
	}
}

// TestSecondReplicaSpendsItsBurstShare: a TokenBucket of 1 per second, burst 5, over two
// replicas, Redis unreachable: the replica ranked second, whose share of the rate alone would
// be 0, admits its burst share (2) and then one every 2 s, and its denials say so: no units
// remaining, Retry-After the 2 s its share refills in. A replica that holds no share (not
// listed) answers OVER_LIMIT with a current_limit of 0, nothing remaining, and no reset or
// Retry-After, since no wait lets the request pass there while Redis is down.
func TestSecondReplicaSpendsItsBurstShare(t *testing.T) {
	e := newTruthEnv(t)
	p := policy.Policy{Name: "edge", Domain: "edge", Replicas: 2, Pods: []string{"rls-a", "rls-b"}, FailureMode: policy.FailureLocal,
		Response: policy.Response{StatusCode: 429, Headers: policy.HeadersBoth},
		Rules: []policy.Rule{{Name: "bucket", Algorithm: "TokenBucket", Limit: 1, WindowMs: 1000, Burst: 5, Cost: 1, Mode: policy.Enforce,
			Match: &policy.Match{Descriptors: []policy.DescriptorEntry{{Key: "generic_key", Value: "d0"}}},
			Key:   []policy.KeyPart{{Source: policy.SourceDescriptor, Name: "generic_key"}}}}}
	serve := func(pod string) *truthTrace {
		doc := &policy.Document{Version: policy.Version, Namespace: "truth", Policies: []policy.Policy{p}}
		m := metrics.New()
		cfg, err := config.CompileDomains(doc, pod, m)
		if err != nil {
			t.Fatal(err)
		}
		clk := clocktesting.NewFakeClock(time.UnixMilli(1_800_000_000_000))
		d := decide.New(decide.Options{Remote: e.dead, Local: limiter.NewMemoryStore(limiter.MemoryStoreOptions{}), Metrics: m, Clock: clk,
			Breaker: breaker.New(breaker.Options{Threshold: 1, Cooldown: time.Hour, MaxCooldown: time.Hour, Clock: clk})})
		return &truthTrace{t: t, mode: redisDown, clk: clk, d: d, what: pod,
			srv: rls.New(rls.Options{Config: func() *config.Config { return cfg }, Decider: d, Metrics: m, Clock: clk})}
	}
	req := rlsRequest(map[int]uint64{0: 1})

	b := serve("rls-b")
	var codes []rlsv3.RateLimitResponse_Code
	for range 3 {
		resp, _ := b.ask(req)
		codes = append(codes, resp.GetOverallCode())
	}
	if want := []rlsv3.RateLimitResponse_Code{ok, ok, over}; fmt.Sprint(codes) != fmt.Sprint(want) {
		t.Fatalf("rls-b answered %v, want %v (its burst share, 2)", codes, want)
	}
	resp, _ := b.ask(req)
	st := resp.GetStatuses()[0]
	if ra, _ := header(resp, decide.HeaderRetryAfter); st.GetLimitRemaining() != 0 || st.GetCurrentLimit().GetRequestsPerUnit() != 2 ||
		st.GetDurationUntilReset().AsDuration() != 2*time.Second || ra != "2" {
		t.Fatalf("rls-b's denial: %v", resp)
	}
	b.clk.Step(2 * time.Second)
	if resp, _ := b.ask(req); resp.GetOverallCode() != ok {
		t.Fatalf("rls-b denied after its Retry-After: %v", resp)
	}

	p.Pods = []string{"rls-a"} // rls-b is not listed: it holds nothing
	resp, _ = serve("rls-b").ask(req)
	st = resp.GetStatuses()[0]
	if _, has := header(resp, decide.HeaderRetryAfter); resp.GetOverallCode() != over || st.GetLimitRemaining() != 0 ||
		st.GetCurrentLimit().GetRequestsPerUnit() != 0 || st.GetDurationUntilReset() != nil || has {
		t.Fatalf("a replica without a share: %v", resp)
	}
	if _, has := header(resp, decide.HeaderLegacyReset); has {
		t.Fatalf("a replica without a share sends a reset: %v", resp)
	}
}

// TestHiddenDescriptorRule: Envoy's headers follow each rule's style: an admitted request shows
// the visible quota, a denial by a rule of style None adds only Retry-After (and
// retry-after-ms, which the policy asks for), and the status still says OVER_LIMIT with nothing
// remaining.
func TestHiddenDescriptorRule(t *testing.T) {
	e := newTruthEnv(t)
	rule := func(name string, limit int64, style policy.HeaderStyle) policy.Rule {
		return policy.Rule{Name: name, Algorithm: "FixedWindow", Limit: limit, WindowMs: 60_000, Cost: 1, Mode: policy.Enforce, Headers: style,
			Match: &policy.Match{Descriptors: []policy.DescriptorEntry{{Key: "generic_key", Value: "d0"}}},
			Key:   []policy.KeyPart{{Source: policy.SourceDescriptor, Name: "generic_key"}}}
	}
	p := policy.Policy{Name: "edge", Domain: "edge", Replicas: 1, FailureMode: policy.FailureLocal,
		Response: policy.Response{StatusCode: 429, Headers: policy.HeadersDraft7, RetryAfterMs: true},
		Rules:    []policy.Rule{rule("quota", 100, ""), rule("guard", 1, policy.HeadersNone)}}
	doc := &policy.Document{Version: policy.Version, Namespace: "truth", Policies: []policy.Policy{p}}
	m := metrics.New()
	cfg, err := config.CompileDomains(doc, "", m)
	if err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakeClock(time.UnixMilli(1_800_000_000_000))
	d := decide.New(decide.Options{Remote: e.shared, Local: limiter.NewMemoryStore(limiter.MemoryStoreOptions{}), Metrics: m, Clock: clk,
		Breaker: breaker.New(breaker.Options{Clock: clk})})
	tr := &truthTrace{t: t, mode: viaRedis, clk: clk, d: d, what: "hidden",
		srv: rls.New(rls.Options{Config: func() *config.Config { return cfg }, Decider: d, Metrics: m, Clock: clk})}
	req := rlsRequest(map[int]uint64{0: 1})

	resp, _ := tr.ask(req)
	if v, _ := header(resp, decide.HeaderRateLimit); resp.GetOverallCode() != ok || v != "limit=100, remaining=99, reset=60" {
		t.Fatalf("admitted: RateLimit %q: %v", v, resp)
	}
	resp, _ = tr.ask(req)
	if resp.GetOverallCode() != over || resp.GetStatuses()[0].GetLimitRemaining() != 0 {
		t.Fatalf("denied by the guard: %v", resp)
	}
	var names []string
	for _, h := range resp.GetResponseHeadersToAdd() {
		names = append(names, h.GetKey()+": "+h.GetValue())
	}
	if fmt.Sprint(names) != "[Retry-After: 60 Retry-After-Ms: 60000]" {
		t.Errorf("the guard's denial adds %v, want Retry-After and retry-after-ms alone", names)
	}
}
