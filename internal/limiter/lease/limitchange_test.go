package lease

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/limiter/redisstore"
	"github.com/sluice-dev/sluice/internal/testutil/redisserver"
)

// TestLimitChangeUnderLeases: a leased key whose limit changes mid-window (a tenant's entry
// edited) gets what the exact rule gives (docs/policy.md): the pod's lease of the old limit
// ends at its first decision under the new one, its unused units go back, and the key's
// state, counting only the units spent, meets the new limit. A key that used 80 of 100 gets
// nothing more under 50 and 120 more under 200 (a token bucket: its 20 tokens left), on Redis
// as on the memory store. (Before the engine restarted a changed key's entry field by field,
// the first such decision unlocked an unlocked mutex and crashed the process.)
func TestLimitChangeUnderLeases(t *testing.T) {
	srv := redisserver.StartTest(t)
	client, err := redisstore.NewClientFromURL(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	ctx := context.Background()
	for _, base := range leasable {
		for _, to := range []int64{50, 200} {
			for _, store := range []string{"redis", "memory"} {
				t.Run(fmt.Sprintf("%s/to%d/%s", base.Name(), to, store), func(t *testing.T) {
					var st Store = limiter.NewMemoryStore(limiter.MemoryStoreOptions{})
					if store == "redis" {
						rs := redisstore.New(client, redisstore.Options{Prefix: fmt.Sprintf("lc-%s-%d", base.Name(), to), Timeout: 30 * time.Second, ExplicitTime: true})
						t.Cleanup(func() { _ = rs.Close() })
						st = rs
					}
					e := New(st, Options{})
					p := Params{MaxAge: time.Second, MaxUnits: 30}
					old := base
					old.Limit, old.Window = 100, time.Minute
					lim := old
					lim.Limit = to
					if old.Algorithm == limiter.TokenBucket || old.Algorithm == limiter.LeakyBucket {
						old.Burst, lim.Burst = 100, to
					}
					now := time.UnixMilli(t0 - t0%60_000) // the start of a minute
					for i := range 80 {
						if r, err := e.Take(ctx, "k", old, p, 1, now); err != nil || !r.Allowed {
							t.Fatalf("request %d under 100: %+v %v", i+1, r, err)
						}
					}
					if e.Held() == 0 {
						t.Fatal("the key holds no leased units: the test would not exercise a lease")
					}
					want := max(0, to-80) // the count (or level) of 80 kept
					if old.Algorithm == limiter.TokenBucket {
						want = min(100-80, to) // the 20 tokens left kept, within the new burst
					}
					n := int64(0)
					for ; n <= want; n++ {
						r, err := e.Take(ctx, "k", lim, p, 1, now)
						if err != nil {
							t.Fatal(err)
						}
						if !r.Allowed {
							break
						}
					}
					if n != want {
						t.Fatalf("%d admitted under %d after 80 spent, want %d", n, to, want)
					}
				})
			}
		}
	}
}
