package redisstore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testutil/redisserver"
)

// TestCluster runs the store against three masters: the keys of each limiter hash to one slot,
// limiters spread over the masters, and decisions equal limiter.MemoryStore's.
func TestCluster(t *testing.T) {
	c := redisserver.StartCluster(t, 3)
	addrs := c.Addrs()
	client := newClient(t, "redis+cluster://"+addrs[0]+"?addr="+addrs[1]+"&addr="+addrs[2])
	rs := newStore(t, client, Options{Prefix: freshPrefix("cluster"), Timeout: testTimeout, ExplicitTime: true})
	ms := limiter.NewMemoryStore(limiter.MemoryStoreOptions{})
	if rs.batch != nil {
		t.Fatal("a cluster client's Store batches; a hung master would hold back every node's decisions")
	}

	keys := []string{"user:1", "user:2", "10.0.0.1", "{tag}", "a}b{c", "tenant/x", "y", "z"}
	for _, lim := range limiter.Variants(3, time.Second, 0, time.Second) {
		for _, key := range keys {
			rk := rs.Keys(key, lim)
			slot, err := client.ClusterKeySlot(context.Background(), rk[0]).Result()
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range rk[1:] {
				if s, _ := client.ClusterKeySlot(context.Background(), k).Result(); s != slot {
					t.Fatalf("%s: key %s in slot %d, %s in slot %d", lim.Name(), rk[0], slot, k, s)
				}
			}
			for step := range 6 {
				now := at(int64(step) * 150)
				want := mustTake(t, ms, key+string(lim.Algorithm)+string(lim.Mode), lim, 1, now)
				got := mustTake(t, rs, key, lim, 1, now)
				if got != want {
					t.Fatalf("%s key %q step %d: redis %+v, memory %+v", lim.Name(), key, step, got, want)
				}
			}
		}
	}
	used := 0
	for _, s := range c.Servers {
		n, err := s.Do("DBSIZE")
		if err != nil {
			t.Fatal(err)
		}
		if n != "0" {
			used++
		}
	}
	if used < 2 {
		t.Errorf("limiters landed on %d of 3 masters; with %d keys they should spread", used, len(keys))
	}
	// Every key the store wrote has a TTL.
	for _, s := range c.Servers {
		out, err := s.Do("KEYS", "*")
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range strings.Fields(out) {
			if ttl, _ := s.Do("PTTL", k); strings.HasPrefix(ttl, "-") {
				t.Errorf("key %s on %s has PTTL %s", k, s.Addr(), ttl)
			}
		}
	}
}
