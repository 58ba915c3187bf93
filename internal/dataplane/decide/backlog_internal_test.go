package decide

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/limiter"
)

// TestBacklogBounds: the backlog keeps at most maxKeys keys and maxBytes bytes; admissions on
// further keys are dropped and counted, those on kept keys still add up (to the capacity).
func TestBacklogBounds(t *testing.T) {
	lim := limiter.Limit{Algorithm: limiter.TokenBucket, Limit: 100, Window: time.Hour}
	cases := map[string]struct {
		maxKeys, maxBytes, keys int
		wantKept                int
	}{
		"by keys":  {maxKeys: 10, maxBytes: 1 << 20, keys: 25, wantKept: 10},
		"by bytes": {maxKeys: 1000, maxBytes: 5 * (backlogEntryBytes + 6), keys: 25, wantKept: 5},
		"room":     {maxKeys: 1000, maxBytes: 1 << 20, keys: 25, wantKept: 25},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			outcomes := map[string]int64{}
			b := newBacklog(nil, c.maxKeys, c.maxBytes, func(o string, n int64) { outcomes[o] += n })
			for i := range c.keys {
				b.add(fmt.Sprintf("key-%02d", i), lim, 1, 0)
			}
			b.add("key-00", lim, 500, 1) // a kept key, beyond the capacity
			if len(b.m) != c.wantKept {
				t.Errorf("%d keys kept, want %d", len(b.m), c.wantKept)
			}
			if want := int64(c.keys - c.wantKept); outcomes["dropped"] != want {
				t.Errorf("%d units dropped, want %d", outcomes["dropped"], want)
			}
			if got := b.m[backlogKey{"key-00", lim}].units; got != lim.Capacity() {
				t.Errorf("key-00 holds %d units, want the capacity %d", got, lim.Capacity())
			}
			if b.bytes > c.maxBytes {
				t.Errorf("%d bytes, more than %d", b.bytes, c.maxBytes)
			}
		})
	}
}

// TestChargeable: what of a backlog entry still counts at flush time, per algorithm.
func TestChargeable(t *testing.T) {
	const w = 60_000 // ms
	lim := func(a limiter.Algorithm) limiter.Limit {
		return limiter.Limit{Algorithm: a, Limit: 60, Window: w * time.Millisecond}
	}
	cases := map[string]struct {
		lim        limiter.Limit
		e          backlogEntry
		nowMs, out int64
	}{
		"fixed window, same window":    {lim(limiter.FixedWindow), backlogEntry{units: 7, last: 10, win: 0}, w - 1, 7},
		"fixed window, next window":    {lim(limiter.FixedWindow), backlogEntry{units: 7, last: 10, win: 0}, w, 0},
		"counter, next window":         {lim(limiter.SlidingWindowCounter), backlogEntry{units: 7, last: 10, win: 0}, w + 5, 0},
		"log, within a window":         {lim(limiter.SlidingWindowLog), backlogEntry{units: 7, last: 10}, w + 9, 7},
		"log, a window later":          {lim(limiter.SlidingWindowLog), backlogEntry{units: 7, last: 10}, w + 10, 0},
		"token bucket, no time passed": {lim(limiter.TokenBucket), backlogEntry{units: 7, last: 10}, 10, 7},
		"token bucket, 2 refilled":     {lim(limiter.TokenBucket), backlogEntry{units: 7, last: 10}, 10 + 2000, 5},
		"token bucket, all refilled":   {lim(limiter.TokenBucket), backlogEntry{units: 7, last: 10}, 10 + 7000, 0},
		"leaky bucket, 3 leaked":       {lim(limiter.LeakyBucket), backlogEntry{units: 7, last: 10}, 10 + 3999, 4},
		"clock went back":              {lim(limiter.TokenBucket), backlogEntry{units: 7, last: 10}, 0, 7},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			if got := chargeable(c.lim, c.e, c.nowMs); got != c.out {
				t.Errorf("chargeable = %d, want %d", got, c.out)
			}
		})
	}
}
