package main

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/dataplane/config"
	"github.com/sluice-dev/sluice/internal/dataplane/keys"
	"github.com/sluice-dev/sluice/internal/dataplane/metrics"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/limiter/redisstore"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/testutil/redisserver"
	"github.com/sluice-dev/sluice/internal/testutil/sidecartest"
)

// writePolicies writes doc where `sluicectl quota --policies` reads it and compiles it as the
// sidecar does, returning the file and the first rule of the first policy.
func writePolicies(t *testing.T, doc *policy.Document) (string, *config.Rule) {
	t.Helper()
	data, err := policy.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "policies.json")
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	parsed, err := policy.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Compile(parsed, nil, metrics.New())
	if err != nil {
		t.Fatal(err)
	}
	return file, cfg.Policies[0].Rules[0]
}

// sidecarStore is the sidecar's Redis store on url, closed with the test.
func sidecarStore(t *testing.T, url string) *redisstore.Store {
	t.Helper()
	client, err := redisstore.NewClientFromURL(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	store := redisstore.New(client, redisstore.Options{Timeout: 5 * time.Second})
	t.Cleanup(func() { _ = store.Close() })
	return store
}

// TestQuotaGetReset decides requests on a real redis-server with the sidecar's own
// configuration, key and store code, then looks the counter up with `sluicectl quota get`
// (remaining, debt after a charge from a response), resets it, and finds it never seen.
func TestQuotaGetReset(t *testing.T) {
	srv := redisserver.StartTest(t)
	doc := &policy.Document{Version: policy.Version, Namespace: "shop", Policies: []policy.Policy{{
		Name: "api", Selector: &policy.LabelSelector{}, Replicas: 1, FailureMode: "Local", Response: policy.Response{StatusCode: 429, Headers: "Both"},
		Rules: []policy.Rule{{Name: "tokens", Algorithm: "TokenBucket", Limit: 100, Burst: 100, WindowMs: 3_600_000, Cost: 1, Mode: "Enforce",
			Key: []policy.KeyPart{{Source: policy.SourceHeader, Name: "X-Api-Key"}, {Source: policy.SourceClientIP}}}},
	}}}
	file, rule := writePolicies(t, doc)
	req := keys.Request{Method: "POST", Path: "/v1/chat", Header: keys.HTTPHeader{"X-Api-Key": {"key-a"}}}
	req.SetPeer(netip.MustParseAddr("198.18.0.7"))
	key := string(rule.Key.Append(nil, &req))

	store := sidecarStore(t, srv.URL())
	ctx := context.Background()
	for range 3 {
		if r, err := store.Take(ctx, key, rule.Limit, 1, time.Now()); err != nil || !r.Allowed {
			t.Fatalf("take: %+v %v", r, err)
		}
	}
	quota := func(verb, keyArg string) string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		args := []string{"quota", verb, "-n", "shop", "--policy", "api", "--rule", "tokens", "--key", keyArg, "--redis-url", srv.URL(), "--policies", file}
		if code := run(args, nil, &stdout, &stderr); code != 0 {
			t.Fatalf("%s: exit %d, stderr %s", verb, code, stderr.String())
		}
		return stdout.String()
	}
	if out := quota("get", "key-a,198.18.0.7"); !strings.Contains(out, "remaining: 97\n") || !strings.Contains(out, "debt:      0\n") {
		t.Fatalf("get after 3 requests:\n%s", out)
	}
	if out := quota("get", "key-b,198.18.0.7"); !strings.Contains(out, "never seen") {
		t.Fatalf("get of another key:\n%s", out)
	}
	// A response reported 150 tokens beyond what was taken: 97 - 150 = 53 in debt.
	if _, err := store.Charge(ctx, key, rule.Limit, 150, time.Now()); err != nil {
		t.Fatal(err)
	}
	out := quota("get", "key-a,198.18.0.7")
	if !strings.Contains(out, "remaining: 0\n") || !strings.Contains(out, "debt:      53\n") && !strings.Contains(out, "debt:      52\n") ||
		!strings.Contains(out, "denied:") {
		t.Fatalf("get in debt:\n%s", out) // 52 if a token refilled since (36 s each)
	}
	if out := quota("reset", "key-a,198.18.0.7"); !strings.Contains(out, "reset;") {
		t.Fatalf("reset:\n%s", out)
	}
	if out := quota("get", "key-a,198.18.0.7"); !strings.Contains(out, "never seen") {
		t.Fatalf("get after reset:\n%s", out)
	}
	if r, _ := store.Take(ctx, key, rule.Limit, 1, time.Now()); !r.Allowed || r.Remaining != 99 {
		t.Fatalf("the sidecar's next request after the reset: %+v", r)
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"quota", "get", "-n", "shop", "--policy", "api", "--rule", "tokens", "--key", "only-one", "--redis-url", srv.URL(), "--policies", file}, nil, &stdout, &stderr); code != 1 ||
		!strings.Contains(stderr.String(), "the key has 2 parts, 1 values given") {
		t.Fatalf("wrong number of values: exit %d, %s", code, stderr.String())
	}
}

// TestQuotaGetConcurrency takes slots of a Concurrency key on a real redis-server with the
// sidecar's configuration, key and store code, and finds them with `sluicectl quota get`: the
// slots held, what is free, each holding by holder and request; a release shows at once.
func TestQuotaGetConcurrency(t *testing.T) {
	srv := redisserver.StartTest(t)
	doc := &policy.Document{Version: policy.Version, Namespace: "llm", Policies: []policy.Policy{{
		Name: "gateway", Selector: &policy.LabelSelector{}, Replicas: 1, FailureMode: "Local", Response: policy.Response{StatusCode: 429, Headers: "Both"},
		Rules: []policy.Rule{{Name: "streams", Algorithm: "Concurrency", Limit: 4, WindowMs: policy.SlotExpiry.Milliseconds(), Cost: 1, Mode: "Enforce",
			Key: []policy.KeyPart{{Source: policy.SourceHeader, Name: "X-Api-Key"}}},
			sidecartest.AdaptiveRule("upstream", 4, 100)},
	}}}
	file, rule := writePolicies(t, doc)
	req := keys.Request{Method: "POST", Path: "/v1/chat", Header: keys.HTTPHeader{"X-Api-Key": {"key-a"}}}
	key := string(rule.Key.Append(nil, &req))

	store := sidecarStore(t, srv.URL())
	ctx := context.Background()
	for h := int64(1); h <= 2; h++ {
		takes := []limiter.Take{{Key: key, Limit: rule.Limit, N: 1, Holder: h}}
		res := make([]limiter.Result, 1)
		if ok, err := store.TakeRequest(ctx, takes, time.Now(), res); err != nil || !ok {
			t.Fatalf("take of holding %d: %v %+v", h, err, res[0])
		}
	}
	get := func() string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		args := []string{"quota", "get", "-n", "llm", "--policy", "gateway", "--rule", "streams", "--key", "key-a", "--redis-url", srv.URL(), "--policies", file}
		if code := run(args, nil, &stdout, &stderr); code != 0 {
			t.Fatalf("get: exit %d, stderr %s", code, stderr.String())
		}
		return stdout.String()
	}
	holding := func(h int64) string { return fmt.Sprintf("holder %d request %d: expires in ", store.HolderID(), h) }
	out := get()
	if !strings.Contains(out, "limit:     4 requests in flight") || !strings.Contains(out, "held:      2\n") ||
		!strings.Contains(out, "free:      2\n") || !strings.Contains(out, holding(1)) || !strings.Contains(out, holding(2)) {
		t.Fatalf("get with 2 slots held:\n%s", out)
	}
	if err := store.Release(ctx, key, rule.Limit, 1); err != nil {
		t.Fatal(err)
	}
	if out := get(); !strings.Contains(out, "held:      1\n") || strings.Contains(out, holding(1)) || !strings.Contains(out, holding(2)) {
		t.Fatalf("get after releasing holding 1:\n%s", out)
	}
	var stdout, stderr bytes.Buffer
	args := []string{"quota", "get", "-n", "llm", "--policy", "gateway", "--rule", "upstream", "--key", "any", "--redis-url", srv.URL(), "--policies", file}
	if code := run(args, nil, &stdout, &stderr); code == 0 || !strings.Contains(stderr.String(), "rule upstream is adaptive: each pod keeps its own limit") {
		t.Fatalf("get of an adaptive rule: exit %d, stderr %s", code, stderr.String())
	}
}
