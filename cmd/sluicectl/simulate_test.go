package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/testutil/redisserver"
)

// t0 is 2026-02-05T00:00:00Z in ms, aligned to every window below.
const t0 int64 = 1_770_249_600_000

// arrivals returns n lines t0+start, t0+start+every, ...
func arrivals(start, every int64, n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "%d\n", t0+start+int64(i)*every)
	}
	return b.String()
}

// decisions formats expected output lines "<t0+at> <verdict>".
func decisions(pairs ...any) string {
	var b strings.Builder
	for i := 0; i+1 < len(pairs); i += 2 {
		fmt.Fprintf(&b, "%d %s\n", t0+int64(pairs[i].(int)), pairs[i+1])
	}
	return b.String()
}

// The seed document's boundary scenario: 100 requests in the last second of a minute, one at
// its last ms, 100 in the first second of the next.
var boundary = arrivals(59_000, 10, 100) + arrivals(59_999, 1, 1) + arrivals(60_000, 10, 100)

// simulateCases are traces with their exact output, for every store.
var simulateCases = map[string]struct {
	args  string
	input string
	want  string
}{
	"seed: fixed window admits 2x the limit across the boundary": {
		"--algorithm FixedWindow --limit 100 --window 60s --summary", boundary,
		"allowed=200 denied=1\n",
	},
	"seed: sliding window log holds the limit across the boundary": {
		"--algorithm SlidingWindowLog --limit 100 --window 60s --summary", boundary,
		"allowed=100 denied=101\n",
	},
	// The 100 of the previous window weigh 100*(59999-e)/60000: one more fits from e=599ms.
	"sliding window counter estimates the previous window pro rata": {
		"--algorithm SlidingWindowCounter --limit 100 --window 60s --summary", boundary,
		"allowed=101 denied=100\n",
	},
	"seed: token bucket bursts 100, then one per 10ms": {
		"--algorithm TokenBucket --limit 100 --window 1s --burst 100 --summary",
		arrivals(0, 0, 150) + arrivals(10, 10, 2),
		"allowed=102 denied=50\n",
	},
	"seed: token bucket, 100 at 59s and 100 at 60s keep the average rate": {
		"--algorithm TokenBucket --limit 100 --window 1s --summary",
		arrivals(59_000, 0, 100) + arrivals(60_000, 0, 100),
		"allowed=200 denied=0\n",
	},
	"seed: leaky bucket at twice its rate fills at 995ms, then passes every other": {
		"--algorithm LeakyBucket --limit 100 --window 1s --burst 100 --summary",
		arrivals(0, 5, 203),
		"allowed=201 denied=2\n",
	},
	"token bucket, every decision": {
		"--algorithm TokenBucket --limit 2 --window 1s",
		arrivals(1000, 0, 3) + arrivals(1500, 500, 2),
		decisions(1000, "allow", 1000, "allow", 1000, "deny", 1500, "allow", 2000, "allow") + "allowed=4 denied=1\n",
	},
	"leaky bucket queue prints each delay, 333.3ms apart": {
		"--algorithm LeakyBucket --limit 3 --window 1s --burst 6 --mode Queue --max-delay 1s",
		arrivals(0, 0, 5),
		decisions(0, "allow delay=0", 0, "allow delay=334", 0, "allow delay=667", 0, "allow delay=1000", 0, "deny") +
			"allowed=4 denied=1\n",
	},
	"cost": {
		"--algorithm FixedWindow --limit 10 --window 1s --cost 3",
		arrivals(0, 0, 4),
		decisions(0, "allow", 0, "allow", 0, "allow", 0, "deny") + "allowed=3 denied=1\n",
	},
	"cost above the capacity never passes": {
		"--algorithm TokenBucket --limit 10 --window 1s --cost 11",
		arrivals(0, 1000, 2),
		decisions(0, "deny", 1000, "deny") + "allowed=0 denied=2\n",
	},
	"blank lines and spaces are ignored, equal instants allowed": {
		"--algorithm SlidingWindowLog --limit 1 --window 10ms",
		fmt.Sprintf("\n  %d \n\n%d\n\t%d\n", t0, t0, t0+10),
		decisions(0, "allow", 0, "deny", 10, "allow") + "allowed=2 denied=1\n",
	},
	"no arrivals": {
		"--algorithm FixedWindow --limit 1 --window 1s --store memory", "",
		"allowed=0 denied=0\n",
	},
	"no final newline": {
		"--algorithm FixedWindow --limit 1 --window 1s", fmt.Sprint(t0),
		decisions(0, "allow") + "allowed=1 denied=0\n",
	},
}

func TestSimulate(t *testing.T) {
	for name, tc := range simulateCases {
		t.Run(name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := runSimulate(strings.Fields(tc.args), strings.NewReader(tc.input), &stdout, &stderr)
			if code != 0 || stderr.Len() > 0 {
				t.Fatalf("exit %d, stderr %q", code, stderr.String())
			}
			if got := stdout.String(); got != tc.want {
				t.Errorf("output:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}
}

func TestSimulateErrors(t *testing.T) {
	const ok = "--algorithm FixedWindow --limit 1 --window 1s"
	runErrorCases(t, map[string]errorCase{
		"not a number": {ok, fmt.Sprintf("%d\n\n12x\n", t0), 1, decisions(0, "allow"), `line 3: "12x" is not a whole number of ms`},
		"decreasing":   {ok, fmt.Sprintf("%d\n%d\n", t0, t0-1), 1, decisions(0, "allow"), "line 2: 1770249599999 is before the arrival before it (1770249600000)"},
		"negative":     {ok, "-5\n", 1, "", "line 1: -5 is outside 0..4503599627370496 ms"},
		"fraction":     {ok, "1.5\n", 1, "", `line 1: "1.5" is not a whole number`},
		"too far":      {ok, "9007199254740993\n", 1, "", "line 1: 9007199254740993 is outside"},
		"no algorithm": {"--limit 1 --window 1s", "", 2, "", `algorithm "" is not one of`},
		"bad algorithm": {
			"--algorithm GCRA --limit 1 --window 1s", "", 2, "", `algorithm "GCRA"`,
		},
		"no limit":           {"--algorithm FixedWindow --window 1s", "", 2, "", "limit 0 is outside"},
		"window not in ms":   {"--algorithm FixedWindow --limit 1 --window 1500us", "", 2, "", "window 1.5ms is not a whole number of milliseconds"},
		"log limit too big":  {"--algorithm SlidingWindowLog --limit 10001 --window 1s", "", 2, "", "the most SlidingWindowLog keeps"},
		"bad mode":           {"--algorithm LeakyBucket --limit 1 --window 1s --mode Drop", "", 2, "", `mode "Drop"`},
		"zero cost":          {ok + " --cost 0", "", 2, "", "cost 0 is below 1"},
		"unknown store":      {ok + " --store etcd", "", 2, "", `unknown store "etcd"`},
		"unknown flag":       {ok + " --rate 5", "", 2, "", "flag provided but not defined: -rate"},
		"extra argument":     {ok + " arrivals.txt", "", 2, "", `unexpected argument "arrivals.txt"`},
		"concurrency window": {"--algorithm Concurrency --limit 2 --window 1s", "", 2, "", "--window does not apply to Concurrency"},
		"concurrency cost":   {"--algorithm Concurrency --limit 2 --cost 2", "", 2, "", "--cost does not apply to Concurrency"},
		"concurrency limit":  {"--algorithm Concurrency", "", 2, "", "limit 0 is outside"},
		"concurrency line":   {"--algorithm Concurrency --limit 2", "0 5\n7\n", 1, "0 allow until=5\n", `line 2: "7" is not "<ms> <duration ms>"`},
	})
}

// TestSimulateConcurrency replays requests with their durations through a Concurrency rule.
func TestSimulateConcurrency(t *testing.T) {
	var stdout, stderr bytes.Buffer
	args := strings.Fields("simulate --algorithm Concurrency --limit 1")
	if code := run(args, strings.NewReader("0 10\n5 1\n10 1\n"), &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if got, want := stdout.String(), "0 allow until=10\n5 deny\n10 allow until=11\nallowed=2 denied=1 most-in-flight=1\n"; got != want {
		t.Errorf("output %q, want %q", got, want)
	}
}

func TestSimulateThroughRun(t *testing.T) {
	var stdout, stderr bytes.Buffer
	args := strings.Fields("simulate --algorithm TokenBucket --limit 100 --window 1s --summary")
	if code := run(args, strings.NewReader(arrivals(0, 0, 150)), &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if got := stdout.String(); got != "allowed=100 denied=50\n" {
		t.Errorf("output %q", got)
	}
	stdout.Reset()
	if code := run([]string{"simulate", "-h"}, strings.NewReader(""), &stdout, &stderr); code != 0 || !strings.Contains(stderr.String(), "usage: sluicectl simulate") {
		t.Errorf("-h: exit %d, stderr %q", code, stderr.String())
	}
}

// TestSimulateRedisStore replays every case through a real redis-server: the Redis store must
// print exactly what the memory store prints.
func TestSimulateRedisStore(t *testing.T) {
	redis := redisserver.StartTest(t)
	for name, tc := range simulateCases {
		t.Run(name, func(t *testing.T) {
			args := append(strings.Fields(strings.ReplaceAll(tc.args, "--store memory", "")), "--store", "redis", "--redis-url", redis.URL())
			var stdout, stderr bytes.Buffer
			code := runSimulate(args, strings.NewReader(tc.input), &stdout, &stderr)
			if code != 0 || stderr.Len() > 0 {
				t.Fatalf("exit %d, stderr %q", code, stderr.String())
			}
			if got := stdout.String(); got != tc.want {
				t.Errorf("output:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}
	t.Run("a store flag without its URL", func(t *testing.T) {
		var stdout, stderr bytes.Buffer
		if code := runSimulate([]string{"--algorithm", "FixedWindow", "--limit", "1", "--window", "1s", "--store", "redis"}, strings.NewReader(""), &stdout, &stderr); code != 2 {
			t.Fatalf("exit %d, want 2", code)
		}
		if !strings.Contains(stderr.String(), "--store redis needs --redis-url") {
			t.Fatalf("stderr %q", stderr.String())
		}
	})
}

// errorCase is a simulate invocation that fails: its exit code, its exact stdout and a part of
// its stderr.
type errorCase struct {
	args, input string
	code        int
	stdout      string
	stderr      string // a part of it
}

func runErrorCases(t *testing.T, tests map[string]errorCase) {
	t.Helper()
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := runSimulate(strings.Fields(tc.args), strings.NewReader(tc.input), &stdout, &stderr)
			if code != tc.code {
				t.Errorf("exit %d, want %d (stderr %q)", code, tc.code, stderr.String())
			}
			if stdout.String() != tc.stdout {
				t.Errorf("stdout %q, want %q", stdout.String(), tc.stdout)
			}
			if !strings.Contains(stderr.String(), tc.stderr) {
				t.Errorf("stderr %q does not contain %q", stderr.String(), tc.stderr)
			}
		})
	}
}

// TestSimulateLeased: a leased rule over several pods prints the same report on the memory
// and the Redis store, keeps the bound, and costs the store fewer calls than the exact rule;
// a pod column spreads the arrivals as it says.
func TestSimulateLeased(t *testing.T) {
	redis := redisserver.StartTest(t)
	hot := arrivals(0, 1, 3000) // 1 per ms, a tenth of the rate
	var named strings.Builder
	for i := range 3000 {
		fmt.Fprintf(&named, "%d pod-%c\n", t0+int64(i), 'a'+i%3)
	}
	// perCall is the fewest decisions per store call: far from the limit, leases; past it,
	// every denial is decided in the store.
	cases := map[string]struct {
		args, input, want string
		perCall           int
	}{
		"token bucket far from its limit": {"--algorithm TokenBucket --limit 10000 --window 1s --pods 2 --lease-max-age 100ms", hot,
			"exact:  allowed=3000 denied=0 store calls=3000", 20},
		"fixed window at twice its limit, a pod column": {"--algorithm FixedWindow --limit 500 --window 1s --pods 3 --lease-max-age 50ms --lease-max-units 20",
			named.String(), "exact:  allowed=1500 denied=1500", 1},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var outs []string
			for _, store := range []string{"--store memory", "--store redis --redis-url " + redis.URL()} {
				var stdout, stderr bytes.Buffer
				if code := runSimulate(strings.Fields(tc.args+" "+store), strings.NewReader(tc.input), &stdout, &stderr); code != 0 {
					t.Fatalf("%s: exit %d, stderr %q", store, code, stderr.String())
				}
				outs = append(outs, stdout.String())
			}
			if outs[0] != outs[1] {
				t.Fatalf("memory:\n%s\nredis:\n%s", outs[0], outs[1])
			}
			out := outs[0]
			if !strings.Contains(out, tc.want) || !strings.Contains(out, ": holds\n") {
				t.Fatalf("output:\n%s", out)
			}
			var calls, allowed, denied int
			line := out[strings.Index(out, "leased: "):]
			if _, err := fmt.Sscanf(line, "leased: allowed=%d denied=%d store calls=%d", &allowed, &denied, &calls); err != nil {
				t.Fatal(err)
			}
			if calls*tc.perCall > allowed+denied || calls >= allowed+denied {
				t.Errorf("%d store calls for %d decisions:\n%s", calls, allowed+denied, out)
			}
		})
	}
	runErrorCases(t, map[string]errorCase{
		"a log is not leased": {"--algorithm SlidingWindowLog --limit 5 --window 1s --lease-max-age 10ms", "", 2, "", "leases do not apply to SlidingWindowLog"},
		"age over 10s":        {"--algorithm TokenBucket --limit 5 --window 1s --lease-max-age 11s", "", 2, "", "--lease-max-age 11s is not"},
		"units over capacity": {"--algorithm TokenBucket --limit 5 --window 1s --lease-max-age 10ms --lease-max-units 6", "", 2, "", "--lease-max-units 6 is outside 1..5"},
		"pods without lease":  {"--algorithm TokenBucket --limit 5 --window 1s --pods 2", "", 2, "", "--lease-max-age 0s is not"},
		"too many pod names": {"--algorithm TokenBucket --limit 5 --window 1s --pods 1 --lease-max-age 10ms",
			fmt.Sprintf("%d a\n%d b\n", t0, t0), 1, "", `line 2: pod "b" is one more than the 1 pods`},
	})
}
