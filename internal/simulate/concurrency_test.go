package simulate

import (
	"bytes"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testutil/redisserver"
)

// TestConcurrencyReplay replays requests with durations through the sidecar's in-memory store
// and its Redis store on a real redis-server: both admit while fewer than limit run, free a
// slot before an arrival at the instant its request ends, and print the same decisions.
func TestConcurrencyReplay(t *testing.T) {
	srv := redisserver.StartTest(t)
	lim := limiter.Limit{Algorithm: limiter.Concurrency, Limit: 2, Window: ConcurrencyWindow}
	const trace = "0 100\n10 50\n20 30\n\n50 10\n60 5\n100 1\n100 1\n100 0\n"
	const want = "0 allow until=100\n10 allow until=60\n20 deny\n50 deny\n60 allow until=65\n" +
		"100 allow until=101\n100 allow until=101\n100 deny\nallowed=5 denied=3 most-in-flight=2\n"
	for _, name := range []string{"memory", "redis"} {
		t.Run(name, func(t *testing.T) {
			url := ""
			if name == "redis" {
				url = srv.URL()
			}
			store, closeStore, err := OpenStore(name, url)
			if err != nil {
				t.Fatal(err)
			}
			defer closeStore()
			for run := range 2 { // the first run leaves nothing held
				var out bytes.Buffer
				if err := Concurrency(strings.NewReader(trace), &out, store.(SlotStore), lim, false); err != nil {
					t.Fatal(err)
				}
				if out.String() != want {
					t.Fatalf("run %d:\n%s\nwant\n%s", run, out.String(), want)
				}
			}
			var out bytes.Buffer
			if err := Concurrency(strings.NewReader(trace), &out, store.(SlotStore), lim, true); err != nil || out.String() != "allowed=5 denied=3 most-in-flight=2\n" {
				t.Fatalf("summary %q, %v", out.String(), err)
			}
		})
	}
}

func TestConcurrencyReplayBadLines(t *testing.T) {
	lim := limiter.Limit{Algorithm: limiter.Concurrency, Limit: 1, Window: ConcurrencyWindow}
	for name, tc := range map[string]struct{ trace, err, out string }{
		"no duration":   {"0 10\n5\n", `line 2: "5" is not "<ms> <duration ms>"`, "0 allow until=10\n"},
		"bad duration":  {"0 x\n", `line 1: duration "x" is not a whole number of ms`, ""},
		"too long":      {"0 86400001\n", `line 1: duration "86400001" is not a whole number of ms in 0..86400000`, ""},
		"negative time": {"-1 5\n", `line 1: "-1" is not a whole number of ms`, ""},
		"decreasing":    {"10 5\n9 5\n", "line 2: 9 is before the arrival before it (10)", "10 allow until=15\n"},
	} {
		t.Run(name, func(t *testing.T) {
			store, closeStore, _ := OpenStore("memory", "")
			defer closeStore()
			var out bytes.Buffer
			err := Concurrency(strings.NewReader(tc.trace), &out, store.(SlotStore), lim, false)
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("err %v, want %q", err, tc.err)
			}
			if out.String() != tc.out {
				t.Fatalf("output %q, want the decisions before the bad line, %q", out.String(), tc.out)
			}
		})
	}
}
