package redisstore

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testutil/redisserver"
)

// memoryUsage is MEMORY USAGE summed over a limiter's keys, in bytes.
func memoryUsage(t *testing.T, srv *redisserver.TestServer, keys []string) int {
	t.Helper()
	total := 0
	for _, k := range keys {
		out, err := srv.Do("MEMORY", "USAGE", k, "SAMPLES", "0")
		if err != nil || out == "" {
			t.Fatalf("MEMORY USAGE %s = %q, %v", k, out, err)
		}
		n, err := strconv.Atoi(out)
		if err != nil {
			t.Fatal(err)
		}
		total += n
	}
	return total
}

// TestMemoryPerKey measures what one limiter costs in Redis (MEMORY USAGE, so the key name,
// the value and Redis's per-key overhead), logs it for the docs, and fails if a layout change
// makes it balloon.
func TestMemoryPerKey(t *testing.T) {
	srv := redisserver.StartTest(t)
	s := newStore(t, newClient(t, srv.URL()), Options{Timeout: testTimeout, ExplicitTime: true})
	for _, lim := range limiter.Variants(100, time.Minute, 0, time.Minute) {
		keys := s.Keys("client-42", lim)
		mustTake(t, s, "client-42", lim, 1, at(0))
		n := memoryUsage(t, srv, keys)
		t.Logf("%-22s %3d bytes, key %s", lim.Name(), n, keys[0])
		// Issue 13's goal: at most 100 bytes for the string layouts.
		if limit := 100; lim.Algorithm == limiter.SlidingWindowLog && n > 256 || lim.Algorithm != limiter.SlidingWindowLog && n > limit {
			t.Errorf("%s: %d bytes for one limiter", lim.Name(), n)
		}
	}
	// The log grows with the entries inside the window: one per instant with admitted units.
	lim := limiter.Limit{Algorithm: limiter.SlidingWindowLog, Limit: limiter.MaxLogLimit, Window: time.Hour}
	prev, prevEntries := 0, 0
	for _, entries := range []int{1, 100, 1000, 10000} {
		for i := prevEntries; i < entries; i++ {
			mustTake(t, s, "log", lim, 1, at(int64(i)))
		}
		n := memoryUsage(t, srv, s.Keys("log", lim))
		t.Logf("SlidingWindowLog, %5d entries: %6d bytes (%.1f bytes/entry)", entries, n, float64(n)/float64(entries))
		if entries > 1 && float64(n-prev)/float64(entries-prevEntries) > 32 {
			t.Errorf("log grows by %d bytes for %d entries", n-prev, entries-prevEntries)
		}
		prev, prevEntries = n, entries
	}
}

// TestEveryKeyHasATTL: after random traffic, every key in Redis expires; with server time the
// TTL is at most the ResetAfter of the key's last decision, and a decision that leaves a key
// as good as absent leaves no key.
func TestEveryKeyHasATTL(t *testing.T) {
	srv := redisserver.StartTest(t)
	client := newClient(t, srv.URL())
	for _, serverTime := range []bool{false, true} {
		s := newStore(t, client, Options{Prefix: freshPrefix("ttl"), Timeout: testTimeout, ExplicitTime: !serverTime})
		last := map[string]limiter.Result{}
		for _, lim := range limiter.Variants(5, 2*time.Second, 7, time.Second) {
			for i := range 40 {
				key := strconv.Itoa(i % 4)
				r := mustTake(t, s, key, lim, int64(1+i%3), time.Now())
				for _, k := range s.Keys(key, lim) {
					last[k] = r
				}
			}
			// A request that can never pass, on a fresh key, leaves nothing behind.
			never := mustTake(t, s, "never", lim, lim.Capacity()+1, time.Now())
			if never.Reason != limiter.ReasonCostExceedsCapacity {
				t.Fatalf("%+v", never)
			}
			for _, k := range s.Keys("never", lim) {
				if n, _ := client.Exists(context.Background(), k).Result(); n != 0 {
					t.Errorf("%s: key %s written for a request that changed nothing", lim.Name(), k)
				}
			}
		}
		keys, err := client.Keys(context.Background(), s.prefix+":*").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			ttl, err := client.PTTL(context.Background(), k).Result()
			if err != nil {
				t.Fatal(err)
			}
			if ttl <= 0 {
				t.Errorf("serverTime=%v: key %s has PTTL %s", serverTime, k, ttl)
			}
			if serverTime && ttl > last[k].ResetAfter {
				t.Errorf("key %s expires in %s, after its ResetAfter %s", k, ttl, last[k].ResetAfter)
			}
			if !serverTime && ttl < ExplicitTimeMinTTL-time.Minute {
				t.Errorf("explicit time: key %s expires in %s, want about %s", k, ttl, ExplicitTimeMinTTL)
			}
			if !strings.HasPrefix(k, s.prefix+":{") {
				t.Errorf("stray key %s", k)
			}
		}
		if len(keys) == 0 {
			t.Errorf("serverTime=%v: no keys written", serverTime)
		}
	}
}

// TestServerTimeIgnoresNow: without ExplicitTime the caller's now does not matter, even an
// instant the explicit mode would reject.
func TestServerTimeIgnoresNow(t *testing.T) {
	srv := redisserver.StartTest(t)
	s := newStore(t, newClient(t, srv.URL()), Options{Timeout: testTimeout})
	lim := limiter.Limit{Algorithm: limiter.FixedWindow, Limit: 3, Window: time.Hour}
	var got []bool
	for _, now := range []time.Time{time.Now(), {}, time.UnixMilli(-5), time.Now().Add(1000 * time.Hour), time.Now()} {
		got = append(got, mustTake(t, s, "k", lim, 1, now).Allowed)
	}
	// The only way this fails besides a bug: the 5 calls straddle an hour boundary.
	if want := []bool{true, true, true, false, false}; !equal(got, want) {
		t.Errorf("admissions %v, want %v: the now argument should be ignored", got, want)
	}
}

func equal(a, b []bool) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestBucketStateAcrossEncodings: the buckets' state has a 12-byte layout for instants below
// 2^43 ms and a 14-byte one beyond (see arith.lua); a bucket whose instants cross from one to
// the other, up to limiter.MaxNowMs, decides as limiter.MemoryStore does.
func TestBucketStateAcrossEncodings(t *testing.T) {
	srv := redisserver.StartTest(t)
	s := newStore(t, newClient(t, srv.URL()), explicitTime("encodings"))
	ms := limiter.NewMemoryStore(limiter.MemoryStoreOptions{})
	for _, lim := range limiter.Variants(limiter.MaxLimit, limiter.MaxWindow, limiter.MaxLimit, limiter.MaxWindow)[3:] {
		for _, start := range []int64{1<<43 - 5, limiter.MaxNowMs - 9} {
			for i := range int64(10) {
				now := time.UnixMilli(start + i)
				want, got := mustTake(t, ms, lim.Name()+strconv.FormatInt(start, 10), lim, limiter.MaxLimit/3+i, now), mustTake(t, s, lim.Name()+strconv.FormatInt(start, 10), lim, limiter.MaxLimit/3+i, now)
				if got != want {
					t.Fatalf("%s at %d: redis %+v, memory %+v", lim.Name(), start+i, got, want)
				}
			}
		}
	}
}
