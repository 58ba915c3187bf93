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
