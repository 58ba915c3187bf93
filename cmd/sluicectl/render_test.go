package main

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/policy"
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

// render --pods lists the ready pods by name, sorted, as the controller does, so each pod
// computes its ranked share; --replicas N leaves them unnamed; --pods= is no ready pod.
func TestRenderPods(t *testing.T) {
	file := filepath.Join(t.TempDir(), "policy.yaml")
	doc := `apiVersion: sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: api}
spec:
  podSelector: {}
  rules:
  - name: r
    key: [{clientIP: {}}]
    algorithm: FixedWindow
    limit: 6
    window: 1m
`
	if err := os.WriteFile(file, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		args     []string
		replicas int32
		pods     []string
	}{
		"named":      {[]string{"--pods", "web-c, web-a,web-b,web-d,web-a"}, 4, []string{"web-a", "web-b", "web-c", "web-d"}},
		"none named": {[]string{"--pods="}, 0, []string{}},
		"unnamed":    {[]string{"--replicas", "3"}, 3, nil},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(append([]string{"render", "-f", file}, tc.args...), strings.NewReader(""), &stdout, &stderr); code != 0 {
				t.Fatalf("exit %d: %s", code, stderr.String())
			}
			d, err := policy.Parse(stdout.Bytes())
			if err != nil {
				t.Fatal(err)
			}
			p := d.Policies[0]
			if p.Replicas != tc.replicas || !reflect.DeepEqual(p.Pods, tc.pods) {
				t.Errorf("replicas %d, pods %#v; want %d, %#v", p.Replicas, p.Pods, tc.replicas, tc.pods)
			}
		})
	}
}
