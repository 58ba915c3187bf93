package redisserver

import (
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// clusterTimeout bounds how long StartCluster waits for every node to report cluster_state:ok
// (and StartSentinels for its sentinels): a bound on a hang, not an expected time.
const clusterTimeout = 2 * time.Minute

// Cluster is a Redis Cluster of masters, with replicas if asked for (WithReplicas), each a
// server owned by the test.
type Cluster struct {
	// Servers are the masters, in the order their slots were assigned.
	Servers []*TestServer
	// Replicas are the replicas, Replicas[i] those of Servers[i].
	Replicas [][]*TestServer
}

// StartCluster runs n cluster-enabled redis-servers as masters (n >= 3, Redis Cluster's
// minimum), and with WithReplicas(r) r replicas of each, joins them with `redis-cli --cluster
// create`, and waits until every node reports cluster_state:ok and every replica has synced.
// Cleanup is registered with the test.
func StartCluster(t testing.TB, n int, opts ...Option) *Cluster {
	t.Helper()
	if n < 3 {
		t.Fatalf("redisserver: a cluster needs at least 3 masters, got %d", n)
	}
	cli, err := lookPath("redis-cli")
	if err != nil {
		t.Fatal(err)
	}
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	all := make([]*TestServer, 0, n*(1+cfg.replicas))
	for range cap(all) {
		all = append(all, StartTest(t, append(append([]Option{}, opts...), withCluster())...))
	}
	addrs := make([]string, len(all))
	for i, s := range all {
		addrs[i] = s.Addr()
	}
	args := slices.Concat([]string{"--cluster", "create"}, addrs, []string{"--cluster-replicas", strconv.Itoa(cfg.replicas), "--cluster-yes"})
	out, err := exec.Command(cli, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("redisserver: redis-cli %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	c := &Cluster{}
	c.waitOK(t, all, out)
	c.sortRoles(t, all)
	c.waitOK(t, all, out) // now the replicas' links too
	return c
}

// sortRoles reads each node's role (ROLE) and fills Servers and Replicas, the masters in the
// order they were started.
func (c *Cluster) sortRoles(t testing.TB, all []*TestServer) {
	t.Helper()
	index := map[int]int{} // master port -> index in Servers
	var replicas [][]string
	for _, s := range all {
		role, err := s.Do("ROLE")
		if err != nil {
			t.Fatalf("redisserver: ROLE on %s: %v", s.Addr(), err)
		}
		if strings.HasPrefix(role, "master") {
			index[s.Port()] = len(c.Servers)
			c.Servers = append(c.Servers, s)
		} else {
			replicas = append(replicas, strings.Fields(role))
		}
	}
	c.Replicas = make([][]*TestServer, len(c.Servers))
	for _, s := range all {
		if _, ok := index[s.Port()]; ok {
			continue
		}
		// ROLE on a replica: slave, master host, master port, state, offset.
		f := replicas[0]
		replicas = replicas[1:]
		if len(f) < 3 {
			t.Fatalf("redisserver: ROLE on replica %s: %v", s.Addr(), f)
		}
		port, _ := strconv.Atoi(f[2])
		i, ok := index[port]
		if !ok {
			t.Fatalf("redisserver: replica %s of unknown master port %d", s.Addr(), port)
		}
		c.Replicas[i] = append(c.Replicas[i], s)
	}
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
// other node, so a client's first CLUSTER SLOTS sees the final slot map, and every replica
// known to c reports its link to its master up.
func (c *Cluster) waitOK(t testing.TB, nodes []*TestServer, createOutput []byte) {
	t.Helper()
	deadline := time.Now().Add(clusterTimeout)
	want := "cluster_known_nodes:" + strconv.Itoa(len(nodes))
	for {
		ok := true
		var last string
		for _, s := range nodes {
			info, err := s.Do("CLUSTER", "INFO")
			if err != nil || !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, want) {
				ok, last = false, info
				if err != nil {
					last = err.Error()
				}
				break
			}
		}
		for _, rs := range c.Replicas {
			for _, s := range rs {
				if info, err := s.Do("INFO", "replication"); ok && (err != nil || !strings.Contains(info, "master_link_status:up")) {
					ok, last = false, info
				}
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
