package redisserver

import (
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// clusterTimeout bounds how long StartCluster waits for every node to report cluster_state:ok.
const clusterTimeout = 30 * time.Second

// Cluster is a Redis Cluster of masters without replicas, each a server owned by the test.
type Cluster struct {
	// Servers are the masters, in the order their slots were assigned.
	Servers []*TestServer
}

// StartCluster runs n cluster-enabled redis-servers (n >= 3, Redis Cluster's minimum of
// masters), joins them with `redis-cli --cluster create`, and waits until every node reports
// cluster_state:ok. Cleanup is registered with the test.
func StartCluster(t testing.TB, n int, opts ...Option) *Cluster {
	t.Helper()
	if n < 3 {
		t.Fatalf("redisserver: a cluster needs at least 3 masters, got %d", n)
	}
	cli, err := lookPath("redis-cli")
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{}
	for range n {
		c.Servers = append(c.Servers, StartTest(t, append(append([]Option{}, opts...), withCluster())...))
	}
	args := slices.Concat([]string{"--cluster", "create"}, c.Addrs(), []string{"--cluster-replicas", "0", "--cluster-yes"})
	out, err := exec.Command(cli, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("redisserver: redis-cli %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	c.waitOK(t, out)
	return c
}

// Addrs are the masters' host:port addresses.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Servers))
	for i, s := range c.Servers {
		addrs[i] = s.Addr()
	}
	return addrs
}

// waitOK polls CLUSTER INFO on every node until all say cluster_state:ok and know every
// other node, so a client's first CLUSTER SLOTS sees the final slot map.
func (c *Cluster) waitOK(t testing.TB, createOutput []byte) {
	t.Helper()
	deadline := time.Now().Add(clusterTimeout)
	want := "cluster_known_nodes:" + strconv.Itoa(len(c.Servers))
	for {
		ok := true
		var last string
		for _, s := range c.Servers {
			info, err := s.Do("CLUSTER", "INFO")
			if err != nil || !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, want) {
				ok, last = false, info
				if err != nil {
					last = err.Error()
				}
				break
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redisserver: cluster not ok within %s; last CLUSTER INFO:\n%s\nredis-cli output:\n%s", clusterTimeout, last, createOutput)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
