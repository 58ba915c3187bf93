package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/testutil/redisserver"
)

// TestSimulateRules runs issue 21's scenario through `sluicectl simulate rules`, on the memory
// store and on a real redis-server: the same output on both.
func TestSimulateRules(t *testing.T) {
	var trace strings.Builder
	for i, key := range []string{"A", "A", "A", "A", "B", "B", "B"} {
		fmt.Fprintf(&trace, "%d per-ip=10.0.0.1 per-key=%s\n", t0+int64(i), key)
	}
	want := decisions(0, "allow charged=per-ip,per-key", 1, "allow charged=per-ip,per-key",
		2, "deny by=per-key charged=-", 3, "deny by=per-key charged=-",
		4, "allow charged=per-ip,per-key", 5, "allow charged=per-ip,per-key",
		6, "deny by=per-key charged=-") + "allowed=4 denied=3\n"
	redis := redisserver.StartTest(t)
	for _, store := range [][]string{{"--store", "memory"}, {"--store", "redis", "--redis-url", redis.URL()}} {
		t.Run(store[1], func(t *testing.T) {
			args := append([]string{"simulate", "rules", "--rule", "per-ip=FixedWindow,5,1h", "--rule", "per-key=FixedWindow,2,1h"}, store...)
			var stdout, stderr bytes.Buffer
			if code := run(args, strings.NewReader(trace.String()), &stdout, &stderr); code != 0 || stderr.Len() > 0 {
				t.Fatalf("exit %d, stderr %q", code, stderr.String())
			}
			if got := stdout.String(); got != want {
				t.Errorf("output:\n%s\nwant:\n%s", got, want)
			}
		})
	}
	for name, tc := range map[string]struct {
		args, input, stderr string
		code                int
	}{
		"no rule":      {"", "", "at least one --rule", 2},
		"bad rule":     {"--rule per-ip=FixedWindow,5", "", "want NAME=ALGORITHM,LIMIT,WINDOW", 2},
		"unknown rule": {"--rule a=FixedWindow,5,1h", fmt.Sprintf("%d b=1\n", t0), `line 1: "b=1" is not RULE=KEY`, 1},
	} {
		t.Run(name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := runSimulate(append([]string{"rules"}, strings.Fields(tc.args)...), strings.NewReader(tc.input), &stdout, &stderr)
			if code != tc.code || !strings.Contains(stderr.String(), tc.stderr) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, stderr.String(), tc.code, tc.stderr)
			}
		})
	}
}

// TestSimulateCalendar replays arrivals across the end of January in Europe/Berlin (local
// midnight is 23:00 UTC) through a calendar FixedWindow, with `simulate` and `simulate rules`,
// on the memory store and on a real redis-server.
func TestSimulateCalendar(t *testing.T) {
	const feb1 = 1769900400000 // 2026-02-01T00:00:00+01:00
	var trace, rulesTrace strings.Builder
	for _, at := range []int64{feb1 - 3_600_000, feb1 - 1000, feb1 - 1, feb1} {
		fmt.Fprintf(&trace, "%d\n", at)
		fmt.Fprintf(&rulesTrace, "%d plan=k\n", at)
	}
	want := fmt.Sprintf("%d allow\n%d allow\n%d deny\n%d allow\nallowed=3 denied=1\n", feb1-3_600_000, feb1-1000, feb1-1, feb1)
	wantRules := fmt.Sprintf("%d allow charged=plan\n%d allow charged=plan\n%d deny by=plan charged=-\n%d allow charged=plan\nallowed=3 denied=1\n",
		feb1-3_600_000, feb1-1000, feb1-1, feb1)
	redis := redisserver.StartTest(t)
	for _, store := range [][]string{{"--store", "memory"}, {"--store", "redis", "--redis-url", redis.URL()}} {
		t.Run(store[1], func(t *testing.T) {
			for _, tc := range []struct{ args, input, want string }{
				{"simulate --algorithm FixedWindow --limit 2 --calendar Month@Europe/Berlin", trace.String(), want},
				{"simulate rules --rule plan=FixedWindow,2,Month@Europe/Berlin", rulesTrace.String(), wantRules},
			} {
				var stdout, stderr bytes.Buffer
				if code := run(append(strings.Fields(tc.args), store...), strings.NewReader(tc.input), &stdout, &stderr); code != 0 || stderr.Len() > 0 {
					t.Fatalf("%s: exit %d, stderr %q", tc.args, code, stderr.String())
				}
				if got := stdout.String(); got != tc.want {
					t.Errorf("%s: output:\n%s\nwant:\n%s", tc.args, got, tc.want)
				}
			}
		})
	}
	var stdout, stderr bytes.Buffer
	if code := run(strings.Fields("simulate --algorithm FixedWindow --limit 2 --calendar Month@Europe/Nowhere"), strings.NewReader(""), &stdout, &stderr); code != 2 ||
		!strings.Contains(stderr.String(), "Europe/Nowhere") {
		t.Errorf("unknown zone: exit %d, stderr %q", code, stderr.String())
	}
}

// TestSimulateCountWhen replays failed and successful logins through a rule that counts only
// failures (status= on the trace line), on the memory store and on a real redis-server.
func TestSimulateCountWhen(t *testing.T) {
	var trace strings.Builder
	statuses := []int{200, 200, 401, 200, 403, 200, 200}
	for i, s := range statuses {
		fmt.Fprintf(&trace, "%d login=10.0.0.1 status=%d\n", t0+int64(i), s)
	}
	want := decisions(0, "allow charged=-", 1, "allow charged=-", 2, "allow charged=login", 3, "allow charged=-",
		4, "allow charged=login", 5, "deny by=login charged=-", 6, "deny by=login charged=-") + "allowed=5 denied=2\n"
	redis := redisserver.StartTest(t)
	for _, store := range [][]string{{"--store", "memory"}, {"--store", "redis", "--redis-url", redis.URL()}} {
		t.Run(store[1], func(t *testing.T) {
			args := append([]string{"simulate", "rules", "--rule", "login=FixedWindow,2,1h,countWhen=401|403|500-599"}, store...)
			var stdout, stderr bytes.Buffer
			if code := run(args, strings.NewReader(trace.String()), &stdout, &stderr); code != 0 || stderr.Len() > 0 {
				t.Fatalf("exit %d, stderr %q", code, stderr.String())
			}
			if got := stdout.String(); got != want {
				t.Errorf("output:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

// TestSimulateResponseCost replays an LLM key's calls through a TokenBucket of 10 tokens
// refilling 1 a second, minimumCost 1, whose trace lines carry the usage each response
// reported (cost=): the 25 of the first call put the bucket 15 in debt, denied until 16 s
// later; a FixedWindow of 5 with minimumCost 2 charges 2 for a call reporting 1 (a floor) and
// 4 for one reporting 4. On the memory store and on a real redis-server.
func TestSimulateResponseCost(t *testing.T) {
	trace := fmt.Sprintf("%d llm=k cost=25\n%d llm=k\n%d llm=k\n%d llm=k\n%d llm=k cost=0\n%d plan=p cost=1\n%d plan=p cost=4\n%d plan=p\n",
		t0, t0+1000, t0+15000, t0+16000, t0+16000, t0+20000, t0+20001, t0+20002)
	want := decisions(0, "allow charged=llm", 1000, "deny by=llm charged=-", 15000, "deny by=llm charged=-",
		16000, "allow charged=llm", 16000, "deny by=llm charged=-",
		20000, "allow charged=plan", 20001, "allow charged=plan", 20002, "deny by=plan charged=-") + "allowed=4 denied=4\n"
	redis := redisserver.StartTest(t)
	for _, store := range [][]string{{"--store", "memory"}, {"--store", "redis", "--redis-url", redis.URL()}} {
		t.Run(store[1], func(t *testing.T) {
			args := append([]string{"simulate", "rules", "--rule", "llm=TokenBucket,10,10s,responseCost=1",
				"--rule", "plan=FixedWindow,5,1h,responseCost=2"}, store...)
			var stdout, stderr bytes.Buffer
			if code := run(args, strings.NewReader(trace), &stdout, &stderr); code != 0 || stderr.Len() > 0 {
				t.Fatalf("exit %d, stderr %q", code, stderr.String())
			}
			if got := stdout.String(); got != want {
				t.Errorf("output:\n%s\nwant:\n%s", got, want)
			}
		})
	}
	for _, bad := range []string{"a=SlidingWindowCounter,5,1h,responseCost=1", "a=FixedWindow,5,1h,responseCost=0",
		"a=FixedWindow,5,1h,responseCost=6", "a=FixedWindow,5,1h,countWhen=401,responseCost=1"} {
		var stdout, stderr bytes.Buffer
		if code := run([]string{"simulate", "rules", "--rule", bad}, strings.NewReader(""), &stdout, &stderr); code == 0 {
			t.Errorf("--rule %s: exit 0", bad)
		}
	}
}
