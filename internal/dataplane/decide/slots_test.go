package decide_test

import (
	"context"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/sluice-dev/sluice/internal/dataplane/breaker"
	"github.com/sluice-dev/sluice/internal/dataplane/config"
	"github.com/sluice-dev/sluice/internal/dataplane/decide"
	"github.com/sluice-dev/sluice/internal/dataplane/metrics"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/limiter/redisstore"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/testutil/proc"
	"github.com/sluice-dev/sluice/internal/testutil/redisserver"
)

// TestSlotsRenewedAllAfterAnOutage: a slot taken in Redis, Redis killed, a slot taken on the
// local share, Redis back empty. The first renewal that reaches Redis holds both there, the
// one taken in Redis too although its renewal is not due (it was taken a moment ago), since
// Redis lost it; their releases then leave Redis holding nothing.
func TestSlotsRenewedAllAfterAnOutage(t *testing.T) {
	ctx := context.Background()
	srv := redisserver.StartTest(t)
	m := metrics.New()
	doc := &policy.Document{Version: policy.Version, Namespace: "llm", Policies: []policy.Policy{{
		Name: "gateway", Selector: &policy.LabelSelector{}, Replicas: 1, FailureMode: "Local", Response: policy.Response{StatusCode: 429, Headers: "Both"},
		Rules: []policy.Rule{{Name: "streams", Algorithm: "Concurrency", Limit: 2, WindowMs: policy.SlotExpiry.Milliseconds(), Cost: 1, Mode: "Enforce",
			Key: []policy.KeyPart{{Source: policy.SourceHeader, Name: "X-Api-Key"}}}},
	}}}
	cfg, err := config.Compile(doc, nil, m)
	if err != nil {
		t.Fatal(err)
	}
	pol := cfg.Policies[0]
	rule := pol.Rules[0]
	client, err := redisstore.NewClientFromURL(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	store := redisstore.New(client, redisstore.Options{Timeout: 5 * time.Second})
	defer store.Close()
	clk := clocktesting.NewFakeClock(time.Unix(1_770_249_600, 0))
	d := decide.New(decide.Options{
		Remote:  store,
		Breaker: breaker.New(breaker.Options{Threshold: 1, Clock: clk}),
		Local:   limiter.NewMemoryStore(limiter.MemoryStoreOptions{}),
		Metrics: m,
		Clock:   clk,
	})
	take := func() decide.Verdict {
		t.Helper()
		r := decide.NewRequest()
		defer r.Release()
		r.Add(pol, rule, "k", 1, false)
		v := d.Decide(ctx, r, clk.Now())
		if v.Outcome != decide.Decided || v.Hold == nil {
			t.Fatalf("not admitted with a slot: %+v", v)
		}
		return v
	}
	held := func() int64 {
		t.Helper()
		hs, err := store.Holdings(ctx, "k", rule.Limit)
		if err != nil {
			t.Fatal(err)
		}
		return int64(len(hs))
	}
	inRedis := take()
	if inRedis.Local || held() != 1 {
		t.Fatalf("the first slot: local %v, Redis holds %d", inRedis.Local, held())
	}
	srv.Kill()
	local := take()
	if !local.Local {
		t.Fatal("the second slot was taken in Redis with Redis gone")
	}
	srv.Restart()
	// The client dials again once its backoff after the failed dials has passed.
	for deadline := time.Now().Add(proc.Patience); client.Ping(ctx).Err() != nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("Redis never answered after its restart")
		}
	}
	d.RenewSlots(ctx) // the breaker is still open: nothing is sent
	if n := held(); n != 0 {
		t.Fatalf("Redis holds %d slots before the breaker let a renewal through", n)
	}
	clk.Step(2 * breaker.DefaultCooldown) // the breaker lets a probe through; no slot is due
	d.RenewSlots(ctx)
	if n := held(); n != 2 {
		t.Fatalf("Redis holds %d slots after the first renewal that reached it, want 2", n)
	}
	inRedis.Hold.Release()
	local.Hold.Release()
	// Release does not wait for Redis's answer: the ZREMs follow on the batcher's pipeline.
	for deadline := time.Now().Add(proc.Patience); held() != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("Redis holds %d slots once both were released", held())
		}
	}
}
