package simulate

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/limiter"
)

func TestSimulateWritesDecisionsUpToABadLine(t *testing.T) {
	store, closeStore, err := OpenStore("memory", "")
	if err != nil {
		t.Fatal(err)
	}
	defer closeStore()
	lim := limiter.Limit{Algorithm: limiter.FixedWindow, Limit: 1, Window: time.Second}
	var out bytes.Buffer
	_, err = Simulate(strings.NewReader("1000\n1000\nx\n"), &out, store, lim, 1, false)
	if err == nil || !strings.Contains(err.Error(), `line 3: "x" is not a whole number`) {
		t.Fatalf("err %v", err)
	}
	if got := out.String(); got != "1000 allow\n1000 deny\n" {
		t.Fatalf("output %q: want the two decisions and no totals", got)
	}
}

func TestSimulateSummaryKeepsTheRun(t *testing.T) {
	store, closeStore, _ := OpenStore("memory", "")
	defer closeStore()
	lim := limiter.Limit{Algorithm: limiter.LeakyBucket, Mode: limiter.Queue, Limit: 2, Burst: 4, Window: time.Second, MaxDelay: time.Second}
	var out bytes.Buffer
	run, err := Simulate(strings.NewReader("0\n0\n0\n0\n"), &out, store, lim, 1, true)
	if err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != "allowed=3 denied=1\n" {
		t.Errorf("output %q", got)
	}
	// The queue admits at 0, 500 and 1000 ms: at most 2 in any second, counted when they proceed.
	if run.Name() != "LeakyBucket/Queue" || run.MaxInWindow() != 2 || len(run.arrivals) != 4 {
		t.Errorf("run %s: max in window %d, %d arrivals", run.Name(), run.MaxInWindow(), len(run.arrivals))
	}
}

func TestLimits(t *testing.T) {
	base := limiter.Limit{Limit: 10, Window: time.Second, Burst: 5, MaxDelay: time.Second}
	lims, err := Limits("FixedWindow, LeakyBucket/Queue,LeakyBucket", base)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range lims {
		names = append(names, l.Name())
		if l.Limit != 10 || l.Window != time.Second || l.Burst != 5 || l.MaxDelay != time.Second {
			t.Errorf("%s lost the base parameters: %+v", l.Name(), l)
		}
	}
	if got := strings.Join(names, ","); got != "FixedWindow,LeakyBucket/Queue,LeakyBucket" {
		t.Errorf("names %s", got)
	}
	for list, want := range map[string]string{
		"TokenBucket/Queue": `"TokenBucket/Queue": only LeakyBucket takes a mode`,
		"LeakyBucket/Drop":  `"LeakyBucket/Drop": only LeakyBucket takes a mode, Meter or Queue`,
		"FixedWindow,GCRA":  `algorithm "GCRA"`,
		"":                  `algorithm ""`,
	} {
		if _, err := Limits(list, base); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Limits(%q): %v, want %q", list, err, want)
		}
	}
}
