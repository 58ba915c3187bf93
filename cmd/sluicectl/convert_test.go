package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConvertEnvoyRatelimit runs the command on envoyproxy/ratelimit's examples: the output
// renders (a policy sluicectl render accepts), notes go to stderr, and what cannot convert
// exits 1 naming the key.
func TestConvertEnvoyRatelimit(t *testing.T) {
	testdata := filepath.Join("..", "..", "internal", "convert", "testdata")
	var stdout, stderr bytes.Buffer
	args := []string{"convert", "envoy-ratelimit", "--namespace", "edge", "-f", filepath.Join(testdata, "internal.yaml"), "-f", filepath.Join(testdata, "example8.yaml")}
	if code := run(args, strings.NewReader(""), &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{"kind: RateLimitPolicy", "namespace: edge", "domain: internal", "---", "domain: example8", "- admin"} {
		if !strings.Contains(out, want) {
			t.Fatalf("output lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(stderr.String(), "note: ") || !strings.Contains(stderr.String(), "detailed_metric") {
		t.Fatalf("stderr %q: want the detailed_metric note", stderr.String())
	}
	file := filepath.Join(t.TempDir(), "policies.yaml")
	if err := os.WriteFile(file, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	stdout.Reset()
	stderr.Reset()
	if code := run([]string{"render", "-f", file}, strings.NewReader(""), &stdout, &stderr); code != 0 {
		t.Fatalf("render of the converted policies: exit %d: %s", code, stderr.String())
	}

	stderr.Reset()
	if code := run([]string{"convert", "envoy-ratelimit", "-f", filepath.Join(testdata, "replaces.yaml")}, strings.NewReader(""), &stdout, &stderr); code != 1 ||
		!strings.Contains(stderr.String(), "rate_limit.replaces: not supported") {
		t.Fatalf("replaces: exit %d, %q", code, stderr.String())
	}
	if code := run([]string{"convert", "nginx"}, strings.NewReader(""), &stdout, &stderr); code != 2 {
		t.Fatalf("an unknown format: exit %d, want 2", code)
	}
}
