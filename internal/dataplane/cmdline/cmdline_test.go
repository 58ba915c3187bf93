package cmdline

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"
)

func TestParseFlagsAndEnvironment(t *testing.T) {
	env := map[string]string{
		"SLUICE_REDIS_URL":      "redis://from-env:6379",
		"SLUICE_LISTEN":         ":1", // the flag wins
		"SLUICE_REDIS_TIMEOUT":  "75ms",
		"SLUICE_PPROF":          "true",
		"SLUICE_REDIS_PASSWORD": "s3cret",
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	o, err := Parse([]string{"--listen=:8000", "--log-level", "debug"}, flag.ContinueOnError, lookup)
	if err != nil {
		t.Fatal(err)
	}
	if o.Listen != ":8000" || o.RedisURL != "redis://from-env:6379" || o.RedisTimeout != 75*time.Millisecond ||
		!o.Pprof || o.LogLevel != "debug" || o.RedisPassword != "s3cret" {
		t.Fatalf("options %+v", o)
	}
	if o.Config != "/etc/sluice/policies.json" || o.PodLabelsFile != "/etc/podinfo/labels" || o.MetricsListen != ":9090" {
		t.Fatalf("defaults %+v", o)
	}

	env["SLUICE_BREAKER_THRESHOLD"] = "many"
	if _, err := Parse(nil, flag.ContinueOnError, lookup); err == nil || !strings.Contains(err.Error(), "SLUICE_BREAKER_THRESHOLD") {
		t.Fatalf("a bad variable: %v", err)
	}
	fs := NewFlagSet(&Options{}, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if err := fs.Parse([]string{"--redis-password=x"}); err == nil {
		t.Fatal("the password has a flag; it must only come from the environment")
	}
}

// TestParseRLS: the RLS server shares the sidecar's Redis, breaker, config and metrics flags
// and variables, adds --grpc-listen, and has none of the proxy's flags.
func TestParseRLS(t *testing.T) {
	env := map[string]string{"SLUICE_REDIS_URL": "redis://r:6379", "SLUICE_POD_NAME": "rls-0", "SLUICE_REDIS_PASSWORD": "pw"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	o, err := ParseRLS([]string{"--breaker-threshold=3"}, flag.ContinueOnError, lookup)
	if err != nil {
		t.Fatal(err)
	}
	if o.GRPCListen != ":8081" || o.MetricsListen != ":9090" || o.Config != "/etc/sluice/policies.json" || o.RedisURL != "redis://r:6379" ||
		o.PodName != "rls-0" || o.RedisPassword != "pw" || o.BreakerThreshold != 3 {
		t.Fatalf("options %+v", o)
	}
	for _, proxyOnly := range []string{"--upstream=http://x", "--listen=:1", "--pod-labels=a=b", "--max-header-bytes=2048"} {
		fs := NewRLSFlagSet(&RLSOptions{}, flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		if err := fs.Parse([]string{proxyOnly}); err == nil {
			t.Errorf("the RLS server accepts the proxy's %s", proxyOnly)
		}
	}
}

// TestParseRefusesWhatItWouldIgnore: a stray word would end the flags (every flag after it
// ignored), and some flags contradict each other; each is an error naming what is wrong.
func TestParseRefusesWhatItWouldIgnore(t *testing.T) {
	none := func(string) (string, bool) { return "", false }
	for name, tc := range map[string]struct {
		rls  bool
		args []string
		want string
	}{
		"stray word":             {false, []string{"--listen", ":8081", "stray", "--config", "/etc/x.json"}, `unexpected argument "stray"`},
		"stray word, RLS":        {true, []string{"stray"}, `unexpected argument "stray"`},
		"one address twice":      {false, []string{"--listen", ":7000", "--metrics-listen", ":7000"}, "--listen and --metrics-listen"},
		"one address twice, RLS": {true, []string{"--grpc-listen", ":7000", "--metrics-listen", ":7000"}, "--grpc-listen and --metrics-listen"},
		"cooldowns inverted":     {false, []string{"--breaker-cooldown", "5s", "--breaker-max-cooldown", "1s"}, "--breaker-max-cooldown 1s is below --breaker-cooldown 5s"},
	} {
		t.Run(name, func(t *testing.T) {
			var err error
			if tc.rls {
				_, err = ParseRLS(tc.args, flag.ContinueOnError, none)
			} else {
				_, err = Parse(tc.args, flag.ContinueOnError, none)
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse(%q) = %v, want an error with %q", tc.args, err, tc.want)
			}
		})
	}
	// Port 0 asks each listener for a port of its own: not a conflict.
	if _, err := Parse([]string{"--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"}, flag.ContinueOnError, none); err != nil {
		t.Fatalf("two :0 listeners: %v", err)
	}
}
