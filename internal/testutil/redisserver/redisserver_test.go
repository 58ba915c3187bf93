package redisserver

import (
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestStartAnswersPingWithoutPersistence(t *testing.T) {
	s := StartTest(t)
	if s.Port() == 6379 {
		t.Fatal("helper picked the default Redis port")
	}
	if got, err := s.Do("PING"); err != nil || got != "PONG" {
		t.Fatalf("PING = %q, %v; want PONG", got, err)
	}
	for param, want := range map[string]string{"save": "", "appendonly": "no", "bind": "127.0.0.1"} {
		got, err := s.Do("CONFIG", "GET", param)
		if err != nil {
			t.Fatalf("CONFIG GET %s: %v", param, err)
		}
		if got != param+"\n"+want {
			t.Errorf("CONFIG GET %s = %q, want %q", param, got, param+"\n"+want)
		}
	}
	if !strings.HasPrefix(s.URL(), "redis://127.0.0.1:") {
		t.Errorf("URL() = %q", s.URL())
	}
}

func TestWithArgsOverridesDefaults(t *testing.T) {
	s := StartTest(t, WithArgs("--maxmemory", "12345678"))
	got, err := s.Do("CONFIG", "GET", "maxmemory")
	if err != nil || got != "maxmemory\n12345678" {
		t.Fatalf("CONFIG GET maxmemory = %q, %v", got, err)
	}
}

func TestTwoServersGetDistinctPortsAndData(t *testing.T) {
	a, b := StartTest(t), StartTest(t)
	if a.Addr() == b.Addr() {
		t.Fatalf("both servers on %s", a.Addr())
	}
	if _, err := a.Do("SET", "k", "a"); err != nil {
		t.Fatal(err)
	}
	if got, _ := b.Do("GET", "k"); got != "" {
		t.Fatalf("GET k on the second server = %q, want nothing", got)
	}
}

func TestStopKillRestart(t *testing.T) {
	for name, down := range map[string]func(*TestServer){
		"stop": (*TestServer).Stop,
		"kill": (*TestServer).Kill,
	} {
		t.Run(name, func(t *testing.T) {
			s := StartTest(t)
			if _, err := s.Do("SET", "k", "v"); err != nil {
				t.Fatal(err)
			}
			down(s)
			if _, err := net.DialTimeout("tcp", s.Addr(), time.Second); err == nil {
				t.Fatal("server still accepts connections after it went down")
			}
			down(s) // idempotent
			s.Restart()
			if got, err := s.Do("PING"); err != nil || got != "PONG" {
				t.Fatalf("PING after restart = %q, %v", got, err)
			}
			if got, _ := s.Do("GET", "k"); got != "" {
				t.Fatalf("GET k after restart = %q; persistence should be off", got)
			}
		})
	}
}

func TestRestartRunningServerKeepsPort(t *testing.T) {
	s := StartTest(t)
	addr := s.Addr()
	s.Restart()
	if s.Addr() != addr {
		t.Fatalf("address changed from %s to %s", addr, s.Addr())
	}
	if got, err := s.Do("PING"); err != nil || got != "PONG" {
		t.Fatalf("PING after restart = %q, %v", got, err)
	}
}

func TestPauseHoldsRepliesUntilResume(t *testing.T) {
	s := StartTest(t)
	s.Pause()
	if _, err := do(s.Addr(), 200*time.Millisecond, "PING"); err == nil {
		t.Fatal("paused server answered PING")
	} else if ne := net.Error(nil); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("PING to a paused server: %v, want a timeout", err)
	}
	s.Resume()
	if got, err := s.Do("PING"); err != nil || got != "PONG" {
		t.Fatalf("PING after resume = %q, %v", got, err)
	}
}

func TestStopPausedServer(t *testing.T) {
	s := StartTest(t)
	s.Pause()
	s.Stop()
	if _, err := net.DialTimeout("tcp", s.Addr(), time.Second); err == nil {
		t.Fatal("server still accepts connections after Stop")
	}
}

func TestClusterOfThreeMasters(t *testing.T) {
	c := StartCluster(t, 3)
	if len(c.Addrs()) != 3 {
		t.Fatalf("Addrs() = %v", c.Addrs())
	}
	owners := 0
	for _, s := range c.Servers {
		info, err := s.Do("CLUSTER", "INFO")
		if err != nil || !strings.Contains(info, "cluster_state:ok") {
			t.Fatalf("CLUSTER INFO on %s = %q, %v", s.Addr(), info, err)
		}
		if !strings.Contains(info, "cluster_slots_assigned:16384") {
			t.Fatalf("not every slot assigned: %s", info)
		}
		// Each master owns a share of the keyspace: SET on one key succeeds on exactly one node.
		if _, err := s.Do("SET", "probe", "x"); err == nil {
			owners++
		} else if !strings.HasPrefix(err.Error(), "MOVED") {
			t.Fatalf("SET on %s: %v, want success or MOVED", s.Addr(), err)
		}
	}
	if owners != 1 {
		t.Fatalf("key owned by %d nodes, want 1", owners)
	}
}

func TestMissingBinaryNamesMakeTest(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	s, err := Start()
	if err == nil {
		s.Close()
		t.Fatal("Start without redis-server on PATH succeeded")
	}
	if msg := err.Error(); !strings.Contains(msg, "redis-server is not on PATH") || !strings.Contains(msg, "make test") {
		t.Fatalf("Start without redis-server failed with %q; want it to name the binary and `make test`", msg)
	}
}

func TestCloseKillsAndRemovesDir(t *testing.T) {
	s, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := net.DialTimeout("tcp", s.Addr(), time.Second); err == nil {
		t.Fatal("server still accepts connections after Close")
	}
	if _, err := os.Stat(s.dir); !os.IsNotExist(err) {
		t.Fatalf("directory %s still there after Close: %v", s.dir, err)
	}
	s.Close() // idempotent
}

func TestClusterWithReplicas(t *testing.T) {
	c := StartCluster(t, 3, WithReplicas(1))
	if len(c.Servers) != 3 || len(c.Replicas) != 3 {
		t.Fatalf("%d masters, %d replica sets", len(c.Servers), len(c.Replicas))
	}
	for i, rs := range c.Replicas {
		if len(rs) != 1 {
			t.Fatalf("master %s has %d replicas, want 1", c.Servers[i].Addr(), len(rs))
		}
		role, err := rs[0].Do("ROLE")
		if err != nil || !strings.Contains(role, strconv.Itoa(c.Servers[i].Port())) {
			t.Fatalf("ROLE on the replica of %s: %q, %v", c.Servers[i].Addr(), role, err)
		}
	}
}
