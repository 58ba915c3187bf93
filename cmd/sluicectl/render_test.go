package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// render fails on a field the CRD does not declare, as kubectl apply does, and prints nothing.
func TestRenderRejectsUnknownFields(t *testing.T) {
	file := filepath.Join(t.TempDir(), "policy.yaml")
	doc := `apiVersion: sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: api}
spec:
  podSelector: {}
  lease: 5s
  rules:
  - name: r
    keys: [{clientIP: {}}]
    algorithm: FixedWindow
    limit: 1
    window: 1s
`
	if err := os.WriteFile(file, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"render", "-f", file}, strings.NewReader(""), &stdout, &stderr); code != 1 {
		t.Fatalf("exit %d, want 1 (stderr %q)", code, stderr.String())
	}
	if stdout.Len() > 0 {
		t.Errorf("printed %q", stdout.String())
	}
	want := `strict decoding error: unknown field "spec.lease", unknown field "spec.rules[0].keys"`
	if !strings.Contains(stderr.String(), want) {
		t.Errorf("stderr %q does not contain %q", stderr.String(), want)
	}
}
