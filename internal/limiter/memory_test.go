package limiter

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func at(ms int64) time.Time { return time.UnixMilli(t0 + ms) }

// TestMemoryStoreConcurrentOneKey: many goroutines on one key at one instant get exactly the
// capacity through, for every algorithm (run with -race).
func TestMemoryStoreConcurrentOneKey(t *testing.T) {
	const goroutines, each = 32, 100
	for _, lim := range Variants(1000, time.Minute, 0, time.Hour) {
		t.Run(lim.Name(), func(t *testing.T) {
			m := NewMemoryStore(MemoryStoreOptions{})
			var admitted atomic.Int64
			var wg sync.WaitGroup
			for g := 0; g < goroutines; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < each; i++ {
						r, err := m.Take(context.Background(), "client-1", lim, 1, at(0))
						if err != nil {
							t.Error(err)
							return
						}
						if r.Allowed {
							admitted.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			if got := admitted.Load(); got != lim.Capacity() {
				t.Errorf("%d of %d admitted, want exactly %d", got, goroutines*each, lim.Capacity())
			}
		})
	}
}

// TestMemoryStoreKeyBound: ten times the bound in distinct keys, each left with live state,
// never makes the store hold more than the bound.
func TestMemoryStoreKeyBound(t *testing.T) {
	for _, maxKeys := range []int{1, 7, 64, 1000} {
		t.Run(fmt.Sprint(maxKeys), func(t *testing.T) {
			m := NewMemoryStore(MemoryStoreOptions{MaxKeys: maxKeys})
			lim := Limit{Algorithm: TokenBucket, Limit: 10, Window: time.Hour}
			for i := 0; i < 10*maxKeys; i++ {
				r, err := m.Take(context.Background(), fmt.Sprint("attacker-", i), lim, 1, at(int64(i)))
				if err != nil || !r.Allowed {
					t.Fatalf("key %d: %+v, %v", i, r, err)
				}
				if n := m.Len(); n > maxKeys {
					t.Fatalf("after %d keys the store holds %d, bound %d", i+1, n, maxKeys)
				}
			}
			if n := m.Len(); n < maxKeys/2 {
				t.Errorf("the store holds %d of %d: it evicts more than it must", n, maxKeys)
			}
		})
	}
	if got := len(NewMemoryStore(MemoryStoreOptions{}).shards); got != 64 {
		t.Errorf("%d shards by default, want 64", got)
	}
}

// TestMemoryStoreEvictsClosestToExpiry: in a full store, a new key displaces an expired entry
// if there is one, else a live entry close to expiry, not the one that will be live longest.
func TestMemoryStoreEvictsClosestToExpiry(t *testing.T) {
	m := NewMemoryStore(MemoryStoreOptions{MaxKeys: 2}) // one shard of 2
	short := Limit{Algorithm: FixedWindow, Limit: 10, Window: time.Second}
	long := Limit{Algorithm: FixedWindow, Limit: 10, Window: time.Hour}
	mustTake(t, m, "long", long, at(0))
	mustTake(t, m, "short", short, at(0))
	mustTake(t, m, "new", short, at(10))
	if r := mustTake(t, m, "long", long, at(20)); r.Remaining != 8 {
		t.Errorf("the long-lived key lost its state: %+v", r)
	}
	if _, ok := m.shards[0].entries["short"]; ok {
		t.Error("the entry closest to expiry is still there")
	}
	// "new" expires at t0+1000: a key arriving later reuses its room, "long" stays.
	mustTake(t, m, "later", short, at(1500))
	if _, ok := m.shards[0].entries["long"]; !ok || m.Len() != 2 {
		t.Errorf("keys %v, want long and later", m.shards[0].entries)
	}
}

func mustTake(t *testing.T, m *MemoryStore, key string, lim Limit, now time.Time) Result {
	t.Helper()
	r, err := m.Take(context.Background(), key, lim, 1, now)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestMemoryStoreReclaimsExpired: a key is expired once its state is a fresh key's again
// (after ResetAfter); Sweep drops exactly those, and a key that left no state is not kept.
func TestMemoryStoreReclaimsExpired(t *testing.T) {
	m := NewMemoryStore(MemoryStoreOptions{})
	for i, lim := range Variants(5, time.Second, 0, time.Second) {
		r := mustTake(t, m, fmt.Sprint("key-", i), lim, at(0))
		if r.ResetAfter <= 0 || r.ResetAfter > 2*time.Second {
			t.Fatalf("%s: ResetAfter %s", lim.Name(), r.ResetAfter)
		}
	}
	if n := m.Len(); n != 6 {
		t.Fatalf("%d keys, want 6", n)
	}
	if n := m.Sweep(at(199)); n != 0 {
		t.Errorf("Sweep at 199ms dropped %d live keys", n)
	}
	// The buckets are full again after 1/5 s, the windows after 1-2 s.
	if n := m.Sweep(at(200)); n != 3 {
		t.Errorf("Sweep at 200ms dropped %d, want the 3 buckets", n)
	}
	if n := m.Sweep(at(2000)); n != 3 || m.Len() != 0 {
		t.Errorf("Sweep at 2s dropped %d, %d left", n, m.Len())
	}
	// A denial that changes nothing is not remembered.
	lim := Limit{Algorithm: TokenBucket, Limit: 5, Window: time.Second}
	if r, err := m.Take(context.Background(), "huge", lim, 6, at(0)); err != nil || r.Reason != ReasonCostExceedsCapacity || m.Len() != 0 {
		t.Errorf("%+v, %v, %d keys", r, err, m.Len())
	}
}

// TestMemoryStoreLimitChanged: a key used under an edited Limit keeps its state when only the
// numbers changed, and starts fresh when what the state means changed.
func TestMemoryStoreLimitChanged(t *testing.T) {
	tb := Limit{Algorithm: TokenBucket, Limit: 10, Window: time.Second, Burst: 10}
	tests := map[string]struct {
		first, then Limit
		want        Result
	}{
		"capacity lowered: the bucket is clamped to it": {
			tb, Limit{Algorithm: TokenBucket, Limit: 10, Window: time.Second, Burst: 4},
			// 7 tokens left, clamped to 4, one taken.
			Result{Allowed: true, Limit: 4, Remaining: 3, ResetAfter: 100 * time.Millisecond},
		},
		"rate raised: the content is kept": {
			tb, Limit{Algorithm: TokenBucket, Limit: 100, Window: time.Second, Burst: 10},
			Result{Allowed: true, Limit: 10, Remaining: 6, ResetAfter: 40 * time.Millisecond},
		},
		"window changed: fresh": {
			tb, Limit{Algorithm: TokenBucket, Limit: 10, Window: time.Minute, Burst: 10},
			Result{Allowed: true, Limit: 10, Remaining: 9, ResetAfter: 6 * time.Second},
		},
		"algorithm changed: fresh": {
			tb, Limit{Algorithm: FixedWindow, Limit: 10, Window: time.Second},
			Result{Allowed: true, Limit: 10, Remaining: 9, ResetAfter: time.Second},
		},
		"window limit lowered below the count: nothing remains": {
			Limit{Algorithm: FixedWindow, Limit: 10, Window: time.Second}, Limit{Algorithm: FixedWindow, Limit: 2, Window: time.Second},
			Result{Limit: 2, ResetAfter: time.Second, RetryAfter: time.Second, Reason: ReasonLimited},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			m := NewMemoryStore(MemoryStoreOptions{})
			for i := 0; i < 3; i++ {
				mustTake(t, m, "k", tc.first, at(0))
			}
			if got := mustTake(t, m, "k", tc.then, at(0)); got != tc.want {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestMemoryStoreErrors(t *testing.T) {
	valid := Limit{Algorithm: FixedWindow, Limit: 10, Window: time.Second}
	tests := map[string]struct {
		lim  Limit
		cost int64
		now  time.Time
		want error
	}{
		"zero Limit":        {Limit{}, 1, at(0), ErrInvalidLimit},
		"window not whole":  {Limit{Algorithm: FixedWindow, Limit: 10, Window: 1500 * time.Microsecond}, 1, at(0), ErrInvalidLimit},
		"log limit too big": {Limit{Algorithm: SlidingWindowLog, Limit: MaxLogLimit + 1, Window: time.Second}, 1, at(0), ErrInvalidLimit},
		"zero cost":         {valid, 0, at(0), ErrInvalidLimit},
		"negative cost":     {valid, -3, at(0), ErrInvalidLimit},
		"before the epoch":  {valid, 1, time.UnixMilli(-1), ErrInvalidTime},
		"far future":        {valid, 1, time.UnixMilli(MaxNowMs + 1), ErrInvalidTime},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			m := NewMemoryStore(MemoryStoreOptions{})
			mustTake(t, m, "k", valid, at(0)) // an existing entry must not bypass the checks
			if _, err := m.Take(context.Background(), "k", tc.lim, tc.cost, tc.now); !errors.Is(err, tc.want) {
				t.Errorf("error %v, want %v", err, tc.want)
			}
		})
	}
}

// TestMemoryStoreNoAllocs: taking on an existing key allocates nothing, for every algorithm.
func TestMemoryStoreNoAllocs(t *testing.T) {
	for _, lim := range Variants(100, time.Second, 0, time.Second) {
		t.Run(lim.Name(), func(t *testing.T) {
			m := NewMemoryStore(MemoryStoreOptions{})
			ctx := context.Background()
			now := at(0)
			for i := 0; i < 1000; i++ { // let the log's buffer reach its size
				now = now.Add(3 * time.Millisecond)
				mustTake(t, m, "client", lim, now)
			}
			allocs := testing.AllocsPerRun(1000, func() {
				now = now.Add(3 * time.Millisecond)
				if _, err := m.Take(ctx, "client", lim, 1, now); err != nil {
					t.Fatal(err)
				}
			})
			if allocs != 0 {
				t.Errorf("%v allocs per Take on an existing key", allocs)
			}
		})
	}
}

// TestMemoryStoreBoundsLogEntries: keys whose sliding logs fill up cannot hold more entries
// than MaxLogEntries (per shard, plus the one log being written), however many keys there are.
func TestMemoryStoreBoundsLogEntries(t *testing.T) {
	const maxLog = 4096
	m := NewMemoryStore(MemoryStoreOptions{MaxKeys: 100_000, MaxLogEntries: maxLog})
	lim := Limit{Algorithm: SlidingWindowLog, Limit: 200, Window: time.Hour}
	held := func() (entries, accounted int) {
		for i := range m.shards {
			sh := &m.shards[i]
			sh.mu.Lock()
			for _, e := range sh.entries {
				entries += e.logEntries()
			}
			accounted += sh.logEntries
			sh.mu.Unlock()
		}
		return entries, accounted
	}
	t0 := time.UnixMilli(1_770_249_600_000)
	for k := range 500 {
		key := fmt.Sprintf("client-%d", k)
		for i := range 200 { // distinct instants: one entry each
			if _, err := m.Take(context.Background(), key, lim, 1, t0.Add(time.Duration(i)*time.Millisecond)); err != nil {
				t.Fatal(err)
			}
		}
		entries, accounted := held()
		if entries != accounted {
			t.Fatalf("after %d keys: %d entries held, %d accounted", k+1, entries, accounted)
		}
		// Each shard stays within its share, except for the one log that grew past it.
		if limit := maxLog + len(m.shards)*256; entries > limit {
			t.Fatalf("after %d keys: %d log entries held, bound %d", k+1, entries, limit)
		}
	}
	if entries, _ := held(); entries < maxLog/2 {
		t.Fatalf("only %d entries held: the bound sheds far more than it needs to", entries)
	}
	// A key that kept its log still decides exactly.
	m2 := NewMemoryStore(MemoryStoreOptions{MaxLogEntries: maxLog})
	for i := range 200 {
		if r, _ := m2.Take(context.Background(), "one", lim, 1, t0.Add(time.Duration(i)*time.Millisecond)); !r.Allowed {
			t.Fatalf("request %d denied", i)
		}
	}
	if r, _ := m2.Take(context.Background(), "one", lim, 1, t0.Add(time.Second)); r.Allowed {
		t.Fatal("the 201st request in the window was admitted")
	}
}
