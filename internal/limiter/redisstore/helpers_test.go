package redisstore

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/limiter"
)

// t0 is 2026-02-05T00:00:00Z in ms, aligned to every window the tests use.
const t0 int64 = 1_770_249_600_000

// testTimeout is the budget for tests that are not about timeouts: generous, so a loaded
// machine running -race does not turn a correct decision into a timeout (a bound on a hang).
const testTimeout = 30 * time.Second

func at(ms int64) time.Time { return time.UnixMilli(t0 + ms) }

// newClient connects to url the way production does, closing the client when the test ends.
func newClient(t testing.TB, url string) redis.UniversalClient {
	t.Helper()
	c, err := NewClientFromURL(url)
	if err != nil {
		t.Fatalf("NewClientFromURL(%q): %v", url, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// newStore is New, closing the Store (stopping its batcher) when the test ends, before the
// client newClient registered earlier is closed.
func newStore(t testing.TB, client redis.UniversalClient, opts Options) *Store {
	t.Helper()
	s := New(client, opts)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

var prefixSeq atomic.Int64

// freshPrefix returns a key prefix no other store in this test binary uses, so tests sharing a
// server never see each other's state.
func freshPrefix(name string) string {
	return fmt.Sprintf("t%d-%s", prefixSeq.Add(1), name)
}

func mustTake(t testing.TB, s limiter.Store, key string, lim limiter.Limit, n int64, now time.Time) limiter.Result {
	t.Helper()
	r, err := s.Take(context.Background(), key, lim, n, now)
	if err != nil {
		t.Fatalf("Take(%q, %+v, %d, %d): %v", key, lim, n, now.UnixMilli(), err)
	}
	return r
}
