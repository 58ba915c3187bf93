package redisserver

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// Sentinels is a Sentinel deployment for tests: a master, its replicas, and sentinels
// monitoring it under one name, each a server owned by the test.
type Sentinels struct {
	// Name is the monitored master's name (the master_name of a redis+sentinel:// URL).
	Name string
	// Master and Replicas are the data nodes as started; after a failover a replica is master.
	Master   *TestServer
	Replicas []*TestServer
	// Sentinels are the redis-server --sentinel processes.
	Sentinels []*TestServer
}

// StartSentinels runs a master, replicas replicas of it and n sentinels (redis-server
// --sentinel) monitoring it as name with the given quorum, down-after-milliseconds downAfter
// and failover-timeout 3*downAfter (at least 3 s), and waits until the replicas are in sync and
// every sentinel knows the replicas and the other sentinels, so a failover can run.
func StartSentinels(t testing.TB, name string, replicas, n, quorum int, downAfter time.Duration) *Sentinels {
	t.Helper()
	d := &Sentinels{Name: name, Master: StartTest(t)}
	for range replicas {
		d.Replicas = append(d.Replicas, StartTest(t, WithArgs("--replicaof", "127.0.0.1", fmt.Sprint(d.Master.Port()))))
	}
	failoverTimeout := max(3*downAfter, 3*time.Second)
	conf := fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d %d\nsentinel down-after-milliseconds %s %d\nsentinel failover-timeout %s %d\nsentinel parallel-syncs %s 1\n",
		name, d.Master.Port(), quorum, name, downAfter.Milliseconds(), name, failoverTimeout.Milliseconds(), name)
	for range n {
		d.Sentinels = append(d.Sentinels, StartTest(t, withSentinel(conf)))
	}
	deadline := time.Now().Add(clusterTimeout)
	for {
		err := d.ready(replicas, n)
		if err == nil {
			return d
		}
		if time.Now().After(deadline) {
			t.Fatalf("redisserver: sentinels not ready within %s: %v", clusterTimeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (d *Sentinels) ready(replicas, n int) error {
	for _, r := range d.Replicas {
		info, err := r.Do("INFO", "replication")
		if err != nil {
			return err
		}
		if !strings.Contains(info, "master_link_status:up") {
			return fmt.Errorf("replica %s: link to the master not up", r.Addr())
		}
	}
	for _, s := range d.Sentinels {
		reply, err := s.Do("SENTINEL", "MASTER", d.Name)
		if err != nil {
			return err
		}
		f := fields(reply)
		if f["num-slaves"] != fmt.Sprint(replicas) || f["num-other-sentinels"] != fmt.Sprint(n-1) {
			return fmt.Errorf("sentinel %s knows %s replicas and %s other sentinels", s.Addr(), f["num-slaves"], f["num-other-sentinels"])
		}
	}
	return nil
}

// MasterAddr is the master's host:port as the first sentinel that answers reports it.
func (d *Sentinels) MasterAddr() (string, error) {
	var last error
	for _, s := range d.Sentinels {
		reply, err := s.Do("SENTINEL", "GET-MASTER-ADDR-BY-NAME", d.Name)
		if err != nil {
			last = err
			continue
		}
		hp := strings.Split(strings.TrimSpace(reply), "\n")
		if len(hp) != 2 {
			return "", fmt.Errorf("sentinel %s: master address %q", s.Addr(), reply)
		}
		return hp[0] + ":" + hp[1], nil
	}
	return "", last
}

// URL is a redis+sentinel:// URL naming every sentinel.
func (d *Sentinels) URL() string {
	u := "redis+sentinel://" + d.Sentinels[0].Addr() + "?master_name=" + d.Name
	for _, s := range d.Sentinels[1:] {
		u += "&addr=" + s.Addr()
	}
	return u
}

// fields parses a flat key/value array reply (one element per line) into a map.
func fields(reply string) map[string]string {
	lines := strings.Split(strings.TrimSpace(reply), "\n")
	m := make(map[string]string, len(lines)/2)
	for i := 0; i+1 < len(lines); i += 2 {
		m[lines[i]] = lines[i+1]
	}
	return m
}
