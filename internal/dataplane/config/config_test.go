package config

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/sluice-dev/sluice/internal/dataplane/metrics"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/policy"
	st "github.com/sluice-dev/sluice/internal/testutil/sidecartest"
)

func TestParseLabels(t *testing.T) {
	got, err := ParseLabels([]byte("app=\"checkout\"\ntier=\"web\"\n\nquote=\"a\\\"b\"\nempty=\"\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"app": "checkout", "tier": "web", "quote": `a"b`, "empty": ""}
	if !maps.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	for _, bad := range []string{"app=checkout", "=\"x\"", "app", "app=\"x", "a b=\"x\""} {
		if _, err := ParseLabels([]byte(bad)); err == nil {
			t.Errorf("ParseLabels(%q) accepted", bad)
		}
	}
}

func TestParseLabelList(t *testing.T) {
	got, err := ParseLabelList("app=checkout, tier=web,,x=")
	if err != nil || !maps.Equal(got, map[string]string{"app": "checkout", "tier": "web", "x": ""}) {
		t.Errorf("got %v, %v", got, err)
	}
	if _, err := ParseLabelList("novalue"); err == nil {
		t.Error("accepted a pair without =")
	}
}

func TestLocalShare(t *testing.T) {
	tb := limiter.Limit{Algorithm: limiter.TokenBucket, Limit: 100, Window: time.Minute, Burst: 30}
	ranked := func(names ...string) policy.Policy {
		return policy.Policy{Replicas: int32(len(names)), Pods: append([]string{}, names...)}
	}
	tests := map[string]struct {
		p                 policy.Policy
		pod               string
		wantLimit, wantBu int64
		wantZero          bool
	}{
		"unnamed, no replicas":      {policy.Policy{}, "", 100, 30, false},
		"unnamed, one replica":      {policy.Policy{Replicas: 1}, "a", 100, 30, false},
		"unnamed, 3 replicas":       {policy.Policy{Replicas: 3}, "", 33, 10, false},
		"unnamed, 40 replicas":      {policy.Policy{Replicas: 40}, "", 2, 0, true},   // burst 30/40 is 0
		"unnamed, 1000 replicas":    {policy.Policy{Replicas: 1000}, "", 1, 0, true}, // 1 per 10 min, but no burst
		"rank 0 of 3":               {ranked("a", "b", "c"), "a", 34, 10, false},
		"rank 2 of 3":               {ranked("a", "b", "c"), "c", 33, 10, false},
		"rank 29 of 40":             {ranked(podNames(40)...), podNames(40)[29], 3, 1, false}, // the rate over the 30 holding burst
		"rank 30 of 40":             {ranked(podNames(40)...), podNames(40)[30], 2, 0, true},
		"not listed":                {ranked("a", "b"), "z", 0, 0, true},
		"no name, pods listed":      {ranked("a", "b"), "", 0, 0, true},
		"listed, but no ready pods": {ranked(), "a", 0, 0, true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, zero := LocalShare(tb, tc.p, tc.pod)
			if zero != tc.wantZero || (!zero && got.Window != tb.Window) {
				t.Fatalf("%+v, zero %v; want zero %v", got, zero, tc.wantZero)
			}
			if err := got.Validate(); err != nil {
				t.Fatal(err)
			}
			if !zero && (got.Limit != tc.wantLimit || got.Burst != tc.wantBu) {
				t.Errorf("%+v, want limit %d burst %d", got, tc.wantLimit, tc.wantBu)
			}
		})
	}
	fw := limiter.Limit{Algorithm: limiter.FixedWindow, Limit: 10, Window: time.Second}
	if got, zero := LocalShare(fw, policy.Policy{Replicas: 4}, ""); zero || got.Limit != 2 || got.Burst != 0 {
		t.Errorf("fixed window share %+v", got)
	}
}

// TestRankedSharesSumToTheLimit: over the pods a policy lists, the raw local shares of a rule
// sum to the shared limit exactly, for every algorithm, whatever the number of pods, including
// more pods than units: a window's limit, a bucket's capacity and its rate (Limit per Window).
// A bucket pod with a share of the capacity always refills (the rate is split over a longer
// window rather than to 0), and holds a share unless its share of the capacity is 0.
func TestRankedSharesSumToTheLimit(t *testing.T) {
	for _, alg := range []limiter.Algorithm{limiter.FixedWindow, limiter.TokenBucket, limiter.LeakyBucket} {
		for _, limit := range []int64{1, 2, 5, 6, 7, 100, 1000} {
			for _, burst := range []int64{0, 1, 5, 1000} {
				for _, n := range []int{1, 2, 3, 4, 5, 7, 20, 64, 250} {
					if alg == limiter.FixedWindow && burst > 0 {
						continue
					}
					lim := limiter.Limit{Algorithm: alg, Limit: limit, Window: time.Second, Burst: burst}
					p := policy.Policy{Replicas: int32(n), Pods: podNames(n)}
					var sumLimit, sumCap int64
					var window time.Duration
					for _, pod := range p.Pods {
						share := RawShare(lim, p, pod)
						if window != 0 && share.Window != window {
							t.Fatalf("%+v over %d pods: windows %s and %s", lim, n, window, share.Window)
						}
						window = share.Window
						sumLimit += share.Limit
						sumCap += share.Burst
						if alg == limiter.FixedWindow {
							sumCap += share.Limit
						}
						if _, zero := LocalShare(lim, p, pod); zero != (share.Limit == 0 || share.Capacity() == 0 || (alg != limiter.FixedWindow && share.Burst == 0)) {
							t.Errorf("%+v, pod %s: zero %v for share %+v", lim, pod, zero, share)
						}
						if alg != limiter.FixedWindow && share.Burst > 0 && share.Limit == 0 {
							t.Errorf("%+v over %d pods, pod %s: burst share %d without refill", lim, n, pod, share.Burst)
						}
					}
					// sumLimit per window == limit per lim.Window, exactly.
					if sumLimit*int64(lim.Window) != limit*int64(window) || sumCap != lim.Capacity() {
						t.Errorf("%+v over %d pods: shares sum to %d per %s (capacity %d), want %d per %s (capacity %d)",
							lim, n, sumLimit, window, sumCap, limit, lim.Window, lim.Capacity())
					}
				}
			}
		}
	}
}

// TestBurstShareWithoutRateShare: a token bucket of 1 per second, burst 5, over 2 pods:
// the pod ranked second still holds its burst share, 2, refilled at 1 per 2 s.
func TestBurstShareWithoutRateShare(t *testing.T) {
	lim := limiter.Limit{Algorithm: limiter.TokenBucket, Limit: 1, Window: time.Second, Burst: 5}
	p := policy.Policy{Replicas: 2, Pods: []string{"a", "b"}}
	for pod, want := range map[string]limiter.Limit{
		"a": {Algorithm: limiter.TokenBucket, Limit: 1, Window: 2 * time.Second, Burst: 3},
		"b": {Algorithm: limiter.TokenBucket, Limit: 1, Window: 2 * time.Second, Burst: 2},
	} {
		if got, zero := LocalShare(lim, p, pod); zero || got != want {
			t.Errorf("pod %s: %+v (zero %v), want %+v", pod, got, zero, want)
		}
	}
}

// TestZeroShareDenies: a rule this pod holds no unit of is denied by the local store, taking
// nothing (the decision core then reports no retry: see package decide).
func TestZeroShareDenies(t *testing.T) {
	for _, alg := range []string{"FixedWindow", "SlidingWindowCounter", "SlidingWindowLog", "TokenBucket"} {
		t.Run(alg, func(t *testing.T) {
			doc, err := policy.Parse(st.Doc(t, st.Policy("api", []policy.Rule{st.Rule("r", 2, time.Minute, func(r *policy.Rule) {
				r.Algorithm = alg
				if alg != "TokenBucket" {
					r.Burst = 0
				}
			})}, func(p *policy.Policy) { p.Replicas, p.Pods = 4, []string{"a", "b", "c", "d"} })))
			if err != nil {
				t.Fatal(err)
			}
			store := limiter.NewMemoryStore(limiter.MemoryStoreOptions{})
			now := time.Unix(1_700_000_000, 0)
			for pod, wantAdmit := range map[string]int{"a": 1, "b": 1, "c": 0, "d": 0, "new": 0} {
				c, err := CompileFor(doc, nil, pod, metrics.New())
				if err != nil {
					t.Fatal(err)
				}
				r := c.Policies[0].Rules[0]
				admitted := 0
				for range 5 {
					res, err := store.Take(t.Context(), pod, r.Local, r.LocalCost(r.Cost), now)
					if err != nil {
						t.Fatal(err)
					}
					if res.Allowed {
						admitted++
					}
				}
				if admitted != wantAdmit || r.ZeroShare != (wantAdmit == 0) {
					t.Errorf("pod %s admitted %d of 5 (zero share %v), want %d", pod, admitted, r.ZeroShare, wantAdmit)
				}
			}
		})
	}
}

func podNames(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("pod-%04d", i)
	}
	return names
}

func TestLoader(t *testing.T) {
	vol := st.NewAtomicDir(t)
	labels := st.NewAtomicDir(t)
	m := metrics.New()
	l := NewLoader(vol.Path("policies.json"), labels.Path("labels"), map[string]string{"env": "test"}, m, slog.New(slog.NewJSONHandler(io.Discard, nil)))
	if l.Ready() || l.Current() == nil || len(l.Current().Policies) != 0 {
		t.Fatal("a new loader must be not ready, with an empty configuration")
	}
	if err := l.Load(); err != nil || !l.Ready() || l.Current().Present {
		t.Fatalf("no files: err %v ready %v present %v; want ready, not present", err, l.Ready(), l.Current().Present)
	}

	web := st.Policy("web", []policy.Rule{st.Rule("r", 10, time.Second)}, func(p *policy.Policy) {
		p.Selector.MatchLabels = map[string]string{"tier": "web", "env": "test"}
	})
	vol.Write(t, map[string][]byte{"policies.json": st.Doc(t, web)})
	labels.Write(t, map[string][]byte{"labels": []byte("tier=\"db\"\n")})
	if err := l.Load(); err != nil || len(l.Current().Policies) != 0 || l.Current().Generation != 2 {
		t.Fatalf("db pod: err %v, %d policies, generation %d", err, len(l.Current().Policies), l.Current().Generation)
	}
	labels.Write(t, map[string][]byte{"labels": []byte("tier=\"web\"\n")})
	if err := l.Load(); err != nil || len(l.Current().Policies) != 1 {
		t.Fatalf("web pod: err %v, %d policies", err, len(l.Current().Policies))
	}
	gen := l.Current().Generation
	if err := l.Load(); err != nil || l.Current().Generation != gen {
		t.Errorf("unchanged files published generation %d (was %d), err %v", l.Current().Generation, gen, err)
	}

	for i, bad := range []string{"{", `{"version":2,"policies":[]}`, `{"version":1,"policies":[{"name":"x","failureMode":"Maybe"}]}`} {
		vol.Write(t, map[string][]byte{"policies.json": []byte(bad)})
		if err := l.Load(); err == nil {
			t.Errorf("%q loaded", bad)
		}
		if err := l.Load(); err != nil {
			t.Errorf("the same bad file again must not count again: %v", err)
		}
		if got := m.ReloadFailures.Value(); got != float64(i+1) {
			t.Errorf("reload failures %v, want %d", got, i+1)
		}
		if c := l.Current(); c.Generation != gen || len(c.Policies) != 1 {
			t.Errorf("a bad file replaced the configuration: generation %d", c.Generation)
		}
	}
	if err := os.Remove(vol.Path("policies.json")); err != nil {
		t.Fatal(err)
	}
	if err := l.Load(); err != nil || l.Current().Present {
		t.Errorf("removed file: err %v, present %v; want no policies", err, l.Current().Present)
	}
}

func TestCompileRule(t *testing.T) {
	doc, err := policy.Parse(st.Doc(t, st.Policy("api", []policy.Rule{st.Rule("r", 90, 1500*time.Millisecond, func(r *policy.Rule) {
		r.Burst, r.CostHeader, r.Cost = 45, "X-Cost", 2
	})}, func(p *policy.Policy) { p.Replicas = 4 })))
	if err != nil {
		t.Fatal(err)
	}
	c, err := Compile(doc, nil, metrics.New())
	if err != nil {
		t.Fatal(err)
	}
	r := c.Policies[0].Rules[0]
	if r.DraftPolicy != `"r";q=45;w=2` || r.LimitValue != "45" {
		t.Errorf("DraftPolicy %q LimitValue %q", r.DraftPolicy, r.LimitValue)
	}
	if r.Local.Limit != 22 || r.Local.Burst != 11 {
		t.Errorf("local %+v", r.Local)
	}
	for v, want := range map[string]int64{"": 2, "7": 7, "46": 2, "x": 2, "45": 45} {
		h := map[string][]string{}
		if v != "" {
			h["X-Cost"] = []string{v}
		}
		if got := r.CostOf(h); got != want {
			t.Errorf("CostOf(%q) = %d, want %d", v, got, want)
		}
	}
	if got := r.LocalCost(45); got != 11 {
		t.Errorf("LocalCost(45) = %d, want the share's capacity 11", got)
	}
}

// FuzzParseLabels checks that what ParseLabels accepts round-trips through the downward API's
// own format (key="%q").
func FuzzParseLabels(f *testing.F) {
	for _, s := range []string{"app=\"x\"\n", "a=\"\\u00e9\"\nb=\"\\\"\"", "bad", "k=\"v\"\r\n", "=\"\"", "a=\"x\" trailing"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		labels, err := ParseLabels(data)
		if err != nil {
			return
		}
		var b strings.Builder
		for k, v := range labels {
			fmt.Fprintf(&b, "%s=%s\n", k, strconv.Quote(v))
		}
		again, err := ParseLabels([]byte(b.String()))
		if err != nil || !maps.Equal(labels, again) {
			t.Fatalf("%q parsed to %v, which re-renders to %q -> %v, %v", data, labels, b.String(), again, err)
		}
	})
}

func TestCeilSeconds(t *testing.T) {
	for d, want := range map[time.Duration]int64{
		-time.Second:                    0,
		0:                               0,
		time.Nanosecond:                 1,
		time.Second:                     1,
		time.Second + time.Millisecond:  2,
		time.Minute:                     60,
		24*time.Hour - time.Millisecond: 86400,
	} {
		if got := CeilSeconds(d); got != want {
			t.Errorf("CeilSeconds(%s) = %d, want %d", d, got, want)
		}
	}
}

// TestRunRechecksOnItsClock: a directory that does not exist when Run starts is not watched;
// the periodic re-read, ticked by the loader's clock, finds the file written there later.
func TestRunRechecksOnItsClock(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "late")
	clk := clocktesting.NewFakeClock(time.Date(2026, 2, 5, 0, 0, 0, 0, time.UTC))
	l := NewLoader(filepath.Join(dir, "policies.json"), "", map[string]string{"app": "test"}, metrics.New(), slog.New(slog.NewJSONHandler(io.Discard, nil)))
	l.Recheck, l.Clock = time.Minute, clk
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = l.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	// Run loads, then starts its ticker: one waiter on the clock.
	st.Eventually(t, func() error {
		if n := clk.Waiters(); n != 1 || !l.Ready() {
			return fmt.Errorf("%d waiters on the clock, ready %v; want the ticker and a first load", n, l.Ready())
		}
		return nil
	})
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	doc := st.Doc(t, st.Policy("api", []policy.Rule{st.Rule("r", 10, time.Second)}))
	if err := os.WriteFile(filepath.Join(dir, "policies.json"), doc, 0o644); err != nil {
		t.Fatal(err)
	}
	clk.Step(time.Minute)
	st.Eventually(t, func() error {
		if c := l.Current(); !c.Present || len(c.Policies) != 1 {
			return fmt.Errorf("present %v, %d policies after the re-read", c.Present, len(c.Policies))
		}
		return nil
	})
}

// bigDoc is a namespace of n policies of 64 rules each, every one selecting the pod.
func bigDoc(t testing.TB, n int) *policy.Document {
	t.Helper()
	d := &policy.Document{Version: policy.Version, Namespace: "big", Policies: []policy.Policy{}}
	for i := range n {
		rules := make([]policy.Rule, 64)
		for j := range rules {
			rules[j] = st.Rule(fmt.Sprintf("p%02d-rule-%02d", i, j), int64(10+j), time.Duration(1+j)*time.Second, func(r *policy.Rule) {
				r.Match = &policy.Match{PathPrefix: fmt.Sprintf("/api/v1/tenant-%02d/resource-%02d", i, j), Methods: []string{"GET", "POST"}}
				r.Key = append(r.Key, policy.KeyPart{Source: policy.SourceHeader, Name: "X-Tenant"})
			})
		}
		d.Policies = append(d.Policies, st.Policy(fmt.Sprintf("policy-%02d", i), rules))
	}
	return d
}

// TestLoaderReadsTheCompressedForm: a namespace too large for the plain form is written as
// kubelet projects the ConfigMap (the envelope in policies.json, the gzip beside it in
// policies.json.gz, swapped in together through ..data), loads, and swaps with the plain form
// either way; an envelope whose compressed file does not match is refused and the
// configuration in use stays.
func TestLoaderReadsTheCompressedForm(t *testing.T) {
	vol := st.NewAtomicDir(t)
	l := NewLoader(vol.Path(policy.DataKey), "", nil, metrics.New(), slog.New(slog.NewJSONHandler(io.Discard, nil)))
	write := func(p *policy.Payload) {
		t.Helper()
		files := map[string][]byte{}
		for k, v := range p.Data {
			files[k] = []byte(v)
		}
		maps.Copy(files, p.BinaryData)
		vol.Write(t, files)
	}
	big, err := policy.Encode(bigDoc(t, 60))
	if err != nil {
		t.Fatal(err)
	}
	if big.BinaryData == nil || big.Size() > policy.MaxConfigMapBytes {
		t.Fatalf("60 x 64 rules: plain %d bytes, payload %d bytes, compressed %v", big.Plain, big.Size(), big.BinaryData != nil)
	}
	t.Logf("60 policies x 64 rules: %d bytes plain, %d bytes compressed", big.Plain, big.Size())
	write(big)
	if err := l.Load(); err != nil || len(l.Current().Policies) != 60 || len(l.Current().Policies[59].Rules) != 64 {
		t.Fatalf("compressed: err %v, %d policies", err, len(l.Current().Policies))
	}
	small, err := policy.Encode(bigDoc(t, 2))
	if err != nil || small.BinaryData != nil {
		t.Fatalf("2 policies compressed: %v", err)
	}
	write(small)
	if err := l.Load(); err != nil || len(l.Current().Policies) != 2 {
		t.Fatalf("plain again: err %v, %d policies", err, len(l.Current().Policies))
	}
	write(big)
	if err := l.Load(); err != nil || len(l.Current().Policies) != 60 {
		t.Fatalf("compressed again: err %v, %d policies", err, len(l.Current().Policies))
	}
	gen := l.Current().Generation
	torn := *big
	torn.BinaryData = map[string][]byte{policy.CompressedKey: small.BinaryData[policy.CompressedKey]}
	other, _ := policy.Encode(bigDoc(t, 30))
	torn.BinaryData[policy.CompressedKey] = other.BinaryData[policy.CompressedKey]
	write(&torn)
	if err := l.Load(); err == nil || l.Current().Generation != gen {
		t.Fatalf("torn pair: err %v, generation %d (was %d)", err, l.Current().Generation, gen)
	}
}

func BenchmarkLoadCompressed(b *testing.B) {
	vol := st.NewAtomicDir(b)
	p, err := policy.Encode(bigDoc(b, 80))
	if err != nil {
		b.Fatal(err)
	}
	files := map[string][]byte{policy.DataKey: []byte(p.Data[policy.DataKey])}
	maps.Copy(files, p.BinaryData)
	vol.Write(b, files)
	b.ReportAllocs()
	b.ReportMetric(float64(p.Plain), "plain-bytes")
	for i := 0; b.Loop(); i++ {
		// A different pod name each time: the loader compiles anew rather than skipping.
		l := NewLoader(vol.Path(policy.DataKey), "", nil, metrics.New(), slog.New(slog.NewJSONHandler(io.Discard, nil)))
		l.PodName = strconv.Itoa(i)
		if err := l.Load(); err != nil {
			b.Fatal(err)
		}
	}
}

// TestCompileSkipsDescriptorRules: a sidecar compiles a policy's HTTP rules only; its
// descriptor rules are the RLS server's, and no HTTP request could match them.
func TestCompileSkipsDescriptorRules(t *testing.T) {
	desc := st.Rule("desc", 5, time.Minute, func(r *policy.Rule) {
		r.Match = &policy.Match{Descriptors: []policy.DescriptorEntry{{Key: "generic_key", Value: "checkout"}}}
		r.Key = []policy.KeyPart{{Source: policy.SourceDescriptor, Name: "generic_key"}}
	})
	p := st.Policy("both", []policy.Rule{desc, st.Rule("http", 5, time.Minute)}, func(p *policy.Policy) { p.Domain = "edge" })
	doc, err := policy.Parse(st.Doc(t, p))
	if err != nil {
		t.Fatal(err)
	}
	c, err := Compile(doc, nil, metrics.New())
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Policies) != 1 || len(c.Policies[0].Rules) != 1 || c.Policies[0].Rules[0].Name != "http" {
		t.Fatalf("compiled %+v", c.Policies)
	}
}
