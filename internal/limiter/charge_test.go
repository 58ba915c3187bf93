package limiter

import (
	"context"
	"testing"
	"time"
)

// TestLateChargeSteps steps the late charges: a TokenBucket charged into debt denies until the
// refill has paid the debt and the request's cost, exactly; a window's count stops at the
// limit; a check decides without charging.
func TestLateChargeSteps(t *testing.T) {
	ctx := context.Background()
	at := func(ms int64) time.Time { return time.UnixMilli(t0 + ms) }
	tb := Limit{Algorithm: TokenBucket, Limit: 10, Window: time.Second, Burst: 10} // a token per 100 ms
	m := NewMemoryStore(MemoryStoreOptions{})

	// Admit 1 (minimumCost), then charge the 24 the response reported beyond it: 10 - 25 = -15.
	if r, _ := m.Take(ctx, "k", tb, 1, at(0)); !r.Allowed || r.Remaining != 9 {
		t.Fatalf("admission: %+v", r)
	}
	r, err := m.Charge(ctx, "k", tb, 24, at(0))
	if err != nil || r != (Result{Allowed: true, Limit: 10, Remaining: 0, ResetAfter: 2500 * time.Millisecond}) {
		t.Fatalf("charge into debt: %+v %v", r, err)
	}
	// 15 tokens of debt and 1 to pay: 1.6 s.
	if r, _ := m.Take(ctx, "k", tb, 1, at(0)); r.Allowed || r.RetryAfter != 1600*time.Millisecond {
		t.Fatalf("in debt: %+v, want RetryAfter 1.6s", r)
	}
	if r, _ := m.Take(ctx, "k", tb, 1, at(1599)); r.Allowed {
		t.Fatalf("a ms early: %+v", r)
	}
	if r, _ := m.Take(ctx, "k", tb, 1, at(1600)); !r.Allowed || r.Remaining != 0 {
		t.Fatalf("debt paid: %+v", r)
	}
	if d := Debt(tb, -15*1000); d != 15 {
		t.Fatalf("Debt = %d", d)
	}

	// The debt saturates at MaxDebt: a huge charge leaves full - (2^53 - 1) scaled units.
	r, _ = m.Charge(ctx, "huge", tb, 1<<60, at(0))
	if want := (1<<53 - 1 + 9) / 10; r.ResetAfter != DurationFromMs(int64(want)) {
		t.Fatalf("saturated debt: %+v, want ResetAfter %dms", r, want)
	}

	fw := Limit{Algorithm: FixedWindow, Limit: 3, Window: time.Minute}
	for i := range 5 {
		r, _ := m.Charge(ctx, "w", fw, 1, at(int64(i)))
		if r.Remaining != max(0, int64(2-i)) || r.ResetAfter != time.Minute-time.Duration(i)*time.Millisecond {
			t.Fatalf("window charge %d: %+v", i, r)
		}
	}
	if r, _ := m.Take(ctx, "w", fw, 1, at(10)); r.Allowed || r.RetryAfter != time.Minute-10*time.Millisecond {
		t.Fatalf("after charges: %+v", r)
	}

	// A check decides like a take but leaves the state as it was.
	takes := []Take{{Key: "c", Limit: fw, N: 2, Check: true}}
	res := make([]Result, 1)
	for range 3 {
		if ok, _ := m.TakeRequest(ctx, takes, at(0), res); !ok || res[0].Remaining != 1 {
			t.Fatalf("check: %v %+v", ok, res[0])
		}
	}
	if m.Len() != 3 {
		t.Fatalf("a check stored its key: %d keys", m.Len())
	}
	if _, err := m.Charge(ctx, "x", Limit{Algorithm: SlidingWindowCounter, Limit: 1, Window: time.Second}, 1, at(0)); err == nil {
		t.Fatal("a SlidingWindowCounter took a late charge")
	}
}
