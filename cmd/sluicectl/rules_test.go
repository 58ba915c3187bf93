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
