package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

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

// -o configmap prints the ConfigMap the controller writes, compressed past the threshold;
// --pretty prints the same document indented.
func TestRenderOutputs(t *testing.T) {
	var doc strings.Builder
	for i := range 40 { // about 12 KiB each compact: past the compression threshold
		fmt.Fprintf(&doc, "---\napiVersion: sluice.dev/v1alpha1\nkind: RateLimitPolicy\nmetadata: {name: p%02d}\nspec:\n  podSelector: {matchLabels: {app: p%02d}}\n  rules:\n", i, i)
		for j := range 64 {
			fmt.Fprintf(&doc, "  - {name: p%02d-r%02d, key: [{clientIP: {}}], algorithm: TokenBucket, limit: %d, window: 1m, match: {pathPrefix: /api/p%02d/r%02d/}}\n", i, j, j+1, i, j)
		}
	}
	file := filepath.Join(t.TempDir(), "policies.yaml")
	if err := os.WriteFile(file, []byte(doc.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	render := func(args ...string) []byte {
		t.Helper()
		var stdout, stderr bytes.Buffer
		if code := run(append([]string{"render", "-f", file, "--pods", "a,b"}, args...), strings.NewReader(""), &stdout, &stderr); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, stderr.String())
		}
		return stdout.Bytes()
	}
	plain := render()
	if bytes.Count(plain, []byte("\n")) != 1 {
		t.Errorf("the default output is not one compact line")
	}
	want, err := policy.Parse(plain)
	if err != nil {
		t.Fatal(err)
	}
	pretty, err := policy.Parse(render("--pretty"))
	if err != nil || !reflect.DeepEqual(pretty, want) {
		t.Errorf("--pretty differs: %v", err)
	}
	var cm corev1.ConfigMap
	if err := yaml.UnmarshalStrict(render("-o", "configmap"), &cm); err != nil {
		t.Fatal(err)
	}
	if cm.Kind != "ConfigMap" || cm.Name != policy.ConfigMapName || cm.Annotations[policy.HashAnnotation] != policy.Hash(plain) {
		t.Errorf("ConfigMap %s %s, hash %q; want %s, hash %s", cm.Kind, cm.Name, cm.Annotations[policy.HashAnnotation], policy.ConfigMapName, policy.Hash(plain))
	}
	if cm.BinaryData[policy.CompressedKey] == nil {
		t.Fatalf("%d bytes of policies are not compressed", len(plain))
	}
	got, err := policy.Decode([]byte(cm.Data[policy.DataKey]), cm.BinaryData[policy.CompressedKey])
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("the ConfigMap decodes to another document: %v", err)
	}
	t.Logf("40 policies x 64 rules: %d bytes compact, %d compressed", len(plain), len(cm.BinaryData[policy.CompressedKey]))
}
