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

	"github.com/prometheus/client_golang/prometheus/testutil"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/policy"
	st "github.com/sluice-dev/sluice/sidecar/internal/sidecartest"
	"github.com/sluice-dev/sluice/sidecar/metrics"
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
	tests := []struct {
		replicas          int32
		wantLimit, wantBu int64
	}{
		{0, 100, 30}, {1, 100, 30}, {3, 33, 10}, {7, 14, 4}, {40, 2, 1}, {1000, 1, 1},
	}
	for _, tc := range tests {
		got := LocalShare(tb, tc.replicas)
		if got.Limit != tc.wantLimit || got.Burst != tc.wantBu || got.Window != tb.Window {
			t.Errorf("replicas %d: %+v, want limit %d burst %d", tc.replicas, got, tc.wantLimit, tc.wantBu)
		}
		if err := got.Validate(); err != nil {
			t.Errorf("replicas %d: %v", tc.replicas, err)
		}
	}
	fw := limiter.Limit{Algorithm: limiter.FixedWindow, Limit: 10, Window: time.Second}
	if got := LocalShare(fw, 4); got.Limit != 2 || got.Burst != 0 {
		t.Errorf("fixed window share %+v", got)
	}
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
		if got := testutil.ToFloat64(m.ReloadFailures); got != float64(i+1) {
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
	st.Eventually(t, 5*time.Second, func() error {
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
	st.Eventually(t, 5*time.Second, func() error {
		if c := l.Current(); !c.Present || len(c.Policies) != 1 {
			return fmt.Errorf("present %v, %d policies after the re-read", c.Present, len(c.Policies))
		}
		return nil
	})
}
