// Package sidecartest holds helpers for the sidecar's tests: policy documents, a directory
// updated the way kubelet updates a mounted ConfigMap, and polling with a deadline.
package sidecartest

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/testutil/kubeletdir"
	"github.com/sluice-dev/sluice/internal/testutil/proc"
)

// Policy returns a valid policy selecting every pod ({}), with one replica, failure mode Local,
// status 429 and both header styles, and rules; muts change it.
func Policy(name string, rules []policy.Rule, muts ...func(*policy.Policy)) policy.Policy {
	p := policy.Policy{
		Name:        name,
		Selector:    &policy.LabelSelector{},
		Replicas:    1,
		FailureMode: "Local",
		Response:    policy.Response{StatusCode: 429, Headers: "Both"},
		Rules:       rules,
	}
	for _, m := range muts {
		m(&p)
	}
	return p
}

// Rule returns an enforced TokenBucket rule of limit per window (burst limit) keyed by client
// IP; muts change it. A bucket, unlike a fixed window, has no boundary a test could straddle:
// with a long window, limit requests pass and the next is denied.
func Rule(name string, limit int64, window time.Duration, muts ...func(*policy.Rule)) policy.Rule {
	r := policy.Rule{
		Name:      name,
		Key:       []policy.KeyPart{{Source: policy.SourceClientIP}},
		Algorithm: "TokenBucket",
		Limit:     limit,
		Burst:     limit,
		WindowMs:  window.Milliseconds(),
		Cost:      1,
		Mode:      "Enforce",
	}
	for _, m := range muts {
		m(&r)
	}
	return r
}

// Doc renders policies as policies.json, failing the test if the result does not parse.
func Doc(t testing.TB, policies ...policy.Policy) []byte {
	t.Helper()
	d := &policy.Document{Version: policy.Version, Namespace: "test", Policies: policies}
	b, err := policy.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := policy.Parse(b); err != nil {
		t.Fatalf("test document does not parse: %v\n%s", err, b)
	}
	return b
}

// JSON marshals v or fails the test.
func JSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// AtomicDir is a directory updated as kubelet updates a ConfigMap or downward API volume
// (see kubeletdir): each version is a new timestamped directory, a ..data_tmp symlink to it is
// renamed over ..data, and each file is a symlink name -> ..data/name.
type AtomicDir struct {
	Dir string
	w   *kubeletdir.Dir
}

// NewAtomicDir returns an empty AtomicDir in a temporary directory.
func NewAtomicDir(t testing.TB) *AtomicDir {
	dir := t.TempDir()
	return &AtomicDir{Dir: dir, w: kubeletdir.New(dir)}
}

// Path is the path of a file of the volume.
func (a *AtomicDir) Path(name string) string { return a.w.Path(name) }

// Write publishes a new version holding files, failing the test on an error.
func (a *AtomicDir) Write(t testing.TB, files map[string][]byte) {
	t.Helper()
	if err := a.w.Write(files); err != nil {
		t.Fatal(err)
	}
}

// Eventually calls f every 10ms until it returns nil, then returns; it fails the test with f's
// last error when f has not succeeded within proc.Patience (a hang: the test waits for an event,
// never for a duration).
func Eventually(t testing.TB, f func() error) {
	t.Helper()
	var last error
	timeout := proc.Patience
	err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		last = f()
		return last == nil, nil
	})
	if err != nil {
		t.Fatalf("not within %s: %v", timeout, last)
	}
}

// AdaptiveRule returns an enforced adaptive rule name matching every request, its limit
// starting at minLimit and growing up to limit, with the default tolerance, after muts.
func AdaptiveRule(name string, minLimit, limit int64, muts ...func(*policy.Rule)) policy.Rule {
	return Rule(name, limit, policy.SlotExpiry, append([]func(*policy.Rule){func(r *policy.Rule) {
		r.Key, r.Algorithm, r.Burst = nil, "Concurrency", 0
		r.Adaptive = &policy.Adaptive{MinLimit: minLimit, TolerancePct: 125}
	}}, muts...)...)
}
