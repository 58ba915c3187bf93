package limiter

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// admitted takes cost-1 requests on key at now under lim until one is denied, and returns how
// many passed.
func admitted(t *testing.T, m *MemoryStore, key string, lim Limit, now time.Time) int64 {
	t.Helper()
	var n int64
	for mustTake(t, m, key, lim, now).Allowed {
		n++
		if n > 1000 {
			t.Fatalf("more than 1000 admitted under %+v", lim)
		}
	}
	return n
}

// TestLimitChangeMidWindow is the arithmetic docs/policy.md documents for a limit that changes
// mid-window (a tenant's entry edited, an Envoy override): a key that has used 80 of 100 at
// t0 gets, just after its limit drops to 50 or rises to 200, what each algorithm's kept state
// allows under the new limit, and a window later what the new limit allows afresh.
func TestLimitChangeMidWindow(t *testing.T) {
	const W = time.Minute
	tests := []struct {
		alg       Algorithm
		mode      LeakyMode
		now, next map[int64]int64 // new limit -> admitted at t0, and a window (two for SWC) later
	}{
		// The count of the window is kept: 80 > 50 admits nothing until the window ends.
		{alg: FixedWindow, now: map[int64]int64{50: 0, 200: 120}, next: map[int64]int64{50: 50, 200: 200}},
		// The log's 80 entries stay until they are a window old.
		{alg: SlidingWindowLog, now: map[int64]int64{50: 0, 200: 120}, next: map[int64]int64{50: 50, 200: 200}},
		// Both windows' counts are kept; the next window still weighs the 80 as its previous.
		{alg: SlidingWindowCounter, now: map[int64]int64{50: 0, 200: 120}, next: map[int64]int64{50: 50, 200: 200}},
		// The tokens left (20) are kept, clamped to the new burst, and refill at the new rate.
		{alg: TokenBucket, now: map[int64]int64{50: 20, 200: 20}, next: map[int64]int64{50: 50, 200: 200}},
		// The level (80 used) is kept, clamped to the new burst, and leaks at the new rate.
		{alg: LeakyBucket, mode: Meter, now: map[int64]int64{50: 0, 200: 120}, next: map[int64]int64{50: 50, 200: 200}},
	}
	for _, tc := range tests {
		for _, to := range []int64{50, 200} {
			t.Run(fmt.Sprintf("%s/to%d", tc.alg, to), func(t *testing.T) {
				m := NewMemoryStore(MemoryStoreOptions{})
				old := Limit{Algorithm: tc.alg, Limit: 100, Window: W, Mode: tc.mode}
				lim := old
				lim.Limit = to
				if tc.alg == TokenBucket || tc.alg == LeakyBucket {
					old.Burst, lim.Burst = 100, to
				}
				if r := mustTake(t, m, "k", old, at(0)); !r.Allowed || r.Remaining != 100-1 {
					t.Fatalf("first take: %+v", r)
				}
				if r := mustTake(t, m, "k", old, at(0)); !r.Allowed {
					t.Fatalf("second take: %+v", r)
				}
				for range 78 {
					mustTake(t, m, "k", old, at(0))
				}
				if got := admitted(t, m, "k", lim, at(1)); got != tc.now[to] {
					t.Errorf("just after the change: %d admitted, want %d", got, tc.now[to])
				}
				later := W + time.Millisecond // the 80 and the first of the rest are a window old
				if tc.alg == SlidingWindowCounter {
					later = 2 * W // the next window still weighs this one's count
				}
				if got := admitted(t, m, "k", lim, at(later.Milliseconds())); got != tc.next[to] {
					t.Errorf("%s later: %d admitted, want %d", later, got, tc.next[to])
				}
			})
		}
	}
}

// TestLimitChangeAfterExpiry: a key whose state was back to a fresh key's under its old limit
// (its ResetAfter has passed) starts fresh under the new one, as the same key does in Redis,
// where it expired with that ResetAfter as its TTL; before that, its state is kept.
func TestLimitChangeAfterExpiry(t *testing.T) {
	old := Limit{Algorithm: TokenBucket, Limit: 100, Window: time.Minute, Burst: 100}
	slow := Limit{Algorithm: TokenBucket, Limit: 10, Window: time.Minute, Burst: 100}
	for _, tc := range []struct {
		name string
		at   int64 // ms after the 80 were taken; the bucket is full again under old after 48 s
		want int64
	}{
		{"before its reset: 20 left, refilled at the new rate", 47_000, 20 + 47_000*10/60_000},
		{"at its reset: fresh", 48_000, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := NewMemoryStore(MemoryStoreOptions{})
			r := mustTake(t, m, "k", old, at(0))
			if r.Remaining != 99 {
				t.Fatalf("%+v", r)
			}
			if _, err := m.Take(context.Background(), "k", old, 79, at(0)); err != nil {
				t.Fatal(err)
			}
			if got := admitted(t, m, "k", slow, at(tc.at)); got != tc.want {
				t.Errorf("%d admitted, want %d", got, tc.want)
			}
		})
	}
}
