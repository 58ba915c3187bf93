package redisstore

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testutil/proc"
	"github.com/sluice-dev/sluice/internal/testutil/redisserver"
)

// connBound is the bound on a sidecar's connections per Redis node, written out rather
// than MaxConns so that raising MaxConns fails these tests.
const connBound = 2

// clientsNamed counts the connections named name (CLIENT SETNAME, the URL's client_name) in
// the server's CLIENT LIST.
func clientsNamed(t testing.TB, srv *redisserver.TestServer, name string) int {
	t.Helper()
	list, err := srv.Do("CLIENT", "LIST")
	if err != nil {
		t.Fatalf("CLIENT LIST on %s: %v", srv.Addr(), err)
	}
	return strings.Count(list, " name="+name+" ")
}

// sampleClients polls CLIENT LIST on each server until stop is closed and returns the most
// connections named name each one held at once.
func sampleClients(srvs []*redisserver.TestServer, name string, stop <-chan struct{}) func() []int {
	most := make([]int, len(srvs))
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			for i, srv := range srvs {
				list, err := srv.Do("CLIENT", "LIST")
				if err == nil {
					most[i] = max(most[i], strings.Count(list, " name="+name+" "))
				}
			}
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	return func() []int { <-done; return most }
}

// load runs callers goroutines of each Takes on keys (round robin, so that hot keys and
// distinct keys both batch) and fails the test on an error.
func load(t testing.TB, s *Store, keys []string, callers, each int) {
	t.Helper()
	lim := limiter.Limit{Algorithm: limiter.FixedWindow, Limit: limiter.MaxLimit, Window: time.Hour}
	var failed atomic.Value
	var wg sync.WaitGroup
	for g := range callers {
		wg.Go(func() {
			for i := range each {
				if _, err := s.Take(context.Background(), keys[(g+i)%len(keys)], lim, 1, time.Time{}); err != nil {
					failed.Store(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		t.Fatalf("Take under load: %v", err)
	}
}

// TestConnectionBoundSingleNode: under 64 concurrent callers a Store on a NewClient client holds
// at most MaxConns connections to Redis (CLIENT LIST, sampled during the load and read after
// it, when the pool still holds every connection it opened), and keeps at most MaxConns round
// trips in flight, pipelines doing the work.
func TestConnectionBoundSingleNode(t *testing.T) {
	srv := redisserver.StartTest(t)
	const name = "bound"
	client, err := NewClient(srv.URL()+"?client_name="+name, ClientOptions{IdleTimeout: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	s := newStore(t, client, Options{Prefix: freshPrefix("bound"), Timeout: testTimeout})
	keys := []string{"hot", "hot", "hot", "a", "b", "c", "d", "e"}

	stop := make(chan struct{})
	most := sampleClients([]*redisserver.TestServer{srv}, name, stop)
	load(t, s, keys, 64, 100)
	close(stop)
	sampled, after := most()[0], clientsNamed(t, srv, name)
	t.Logf("connections: at most %d sampled during the load, %d after it; round trips in flight at most %d; %d pipelines, the largest of %d calls",
		sampled, after, s.batch.mostInFlight.Load(), s.batch.batches.Load(), s.batch.largest.Load())
	if sampled > connBound || after > connBound {
		t.Errorf("the Store held %d connections during the load and %d after it, more than %d", sampled, after, connBound)
	}
	if after < 1 {
		t.Errorf("no connection named %q after the load: is CLIENT LIST read right?", name)
	}
	if got := s.batch.mostInFlight.Load(); got > connBound {
		t.Errorf("%d round trips in flight at once, more than %d", got, connBound)
	}
	if s.batch.largest.Load() < 2 {
		t.Errorf("no pipeline carried more than one call: the load did not need batching")
	}
}

// TestConnectionBoundCluster: against a 3-master cluster (one replica each), a Store whose keys
// live on two masters holds at most MaxConns connections to each of them and none to the third
// master or to any replica, under load and after it (its slot map is read through connections
// it holds, or on one of its own, closed at once and named apart).
func TestConnectionBoundCluster(t *testing.T) {
	c := redisserver.StartCluster(t, 3, redisserver.WithReplicas(1))
	const name = "cbound"
	addrs := c.Addrs()
	url := "redis+cluster://" + addrs[0] + "?addr=" + addrs[1] + "&addr=" + addrs[2] + "&client_name=" + name
	uc, err := NewClient(url, ClientOptions{IdleTimeout: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = uc.Close() })
	client := uc.(*redis.ClusterClient)
	s := newStore(t, client, Options{Prefix: freshPrefix("cbound"), Timeout: testTimeout})

	// Keys on masters 0 and 1 only: two hot ones and distinct ones on each.
	lim := limiter.Limit{Algorithm: limiter.FixedWindow, Limit: limiter.MaxLimit, Window: time.Hour}
	var keys []string
	perMaster := map[int]int{}
	for i := 0; perMaster[0] < 4 || perMaster[1] < 4; i++ {
		k := "k" + strconv.Itoa(i)
		node, err := client.MasterForKey(context.Background(), s.Keys(k, lim)[0])
		if err != nil {
			t.Fatal(err)
		}
		for j, a := range addrs[:2] {
			if node.Options().Addr == a && perMaster[j] < 4 {
				perMaster[j]++
				keys = append(keys, k)
			}
		}
	}

	all := append([]*redisserver.TestServer{}, c.Servers...)
	for _, rs := range c.Replicas {
		all = append(all, rs...)
	}
	stop := make(chan struct{})
	most := sampleClients(all, name, stop)
	load(t, s, keys, 64, 50)
	close(stop)
	sampled := most()
	for i, srv := range all {
		after := clientsNamed(t, srv, name)
		role := "replica"
		if i < len(c.Servers) {
			role = "master " + strconv.Itoa(i)
		}
		t.Logf("%s %s: at most %d connections during the load, %d after it", role, srv.Addr(), sampled[i], after)
		want := 0
		if i < 2 {
			want = connBound
			if after < 1 {
				t.Errorf("%s: no connection after the load, though keys live there", role)
			}
		}
		if sampled[i] > want || after > want {
			t.Errorf("%s: %d connections during the load, %d after, want at most %d", role, sampled[i], after, want)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for addr, b := range s.nodes {
		if got := b.mostInFlight.Load(); got > connBound {
			t.Errorf("master %s: %d round trips in flight at once, more than %d", addr, got, connBound)
		}
	}
}

// TestIdleTimeoutClosesConnections: with ClientOptions.IdleTimeout a Store that goes quiet ends
// up holding no connection at all, and the next Take dials again and succeeds.
func TestIdleTimeoutClosesConnections(t *testing.T) {
	srv := redisserver.StartTest(t)
	const name = "idle"
	const idle = 300 * time.Millisecond
	client, err := NewClient(srv.URL()+"?client_name="+name, ClientOptions{IdleTimeout: idle})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	s := newStore(t, client, Options{Prefix: freshPrefix("idle"), Timeout: testTimeout})
	load(t, s, []string{"a", "b", "hot"}, 16, 20)
	if n := clientsNamed(t, srv, name); n < 1 || n > connBound {
		t.Fatalf("%d connections after the load, want 1 to %d", n, connBound)
	}
	n := -1
	_ = wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, 30*idle, false, func(context.Context) (bool, error) {
		n = clientsNamed(t, srv, name)
		return n == 0, nil
	})
	if n != 0 {
		t.Fatalf("%d connections %s after the last call with an idle timeout of %s, want 0", n, 30*idle, idle)
	}
	load(t, s, []string{"a"}, 1, 1)
	if n := clientsNamed(t, srv, name); n < 1 {
		t.Fatalf("%d connections after a Take that followed the idle close", n)
	}
}

// TestScriptPreloaded: a Store loads its script on a cold Redis when it is created, before any
// Take, so no Take needs EVAL; New does not wait for Redis (it returns with Redis paused); and
// after a restart, which empties the script cache, the script is loaded again once the Store
// reconnects.
func TestScriptPreloaded(t *testing.T) {
	srv := redisserver.StartTest(t)
	loaded := func() bool {
		r, err := srv.Do("SCRIPT", "EXISTS", requestScript.Hash())
		return err == nil && r == "1"
	}
	waitLoaded := func(what string) {
		t.Helper()
		ok := false
		_ = wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, proc.Patience, true, func(context.Context) (bool, error) {
			ok = loaded()
			return ok, nil
		})
		if !ok {
			t.Fatalf("request script not loaded %s", what)
		}
	}
	client := newClient(t, srv.URL())

	srv.Pause()
	s := newStore(t, client, Options{Prefix: freshPrefix("preload"), Timeout: testTimeout})
	srv.Resume() // New returned with Redis paused: it did not wait for it
	waitLoaded("after New, with no Take")
	// The preloading goroutine counts its preload once Redis has answered it, which is after
	// the script is there for SCRIPT EXISTS to see: wait for it to be done.
	for s.batch.preloading.Load() {
		time.Sleep(time.Millisecond)
	}
	if got := s.batch.preloads.Load(); got != 1 {
		t.Errorf("%d scripts loaded, want 1", got)
	}
	load(t, s, []string{"a", "hot"}, 8, 20)
	if stats, err := srv.Do("INFO", "commandstats"); err != nil || strings.Contains(stats, "cmdstat_eval:") || !strings.Contains(stats, "cmdstat_evalsha:") {
		t.Errorf("with the script preloaded, a Take sent EVAL (or none sent EVALSHA): %v\n%s", err, stats)
	}

	srv.Restart()
	if loaded() {
		t.Fatal("the script survived a restart; this test cannot tell a preload")
	}
	// The first Takes after the restart may fail, on a dead connection or in the dial backoff a
	// failed dial starts; take until one reconnects.
	_ = wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, proc.Patience, true, func(context.Context) (bool, error) {
		_, err := s.Take(context.Background(), "a", limiter.Limit{Algorithm: limiter.FixedWindow, Limit: 10, Window: time.Hour}, 1, time.Time{})
		return err == nil, nil
	})
	waitLoaded("after the restart and a reconnect")
}

// deadDial dials n through next and returns the error the connection fails with (nil for a
// real one).
func deadDial(n *nodeConns, next redis.DialHook) error {
	conn, err := n.dial(context.Background(), "tcp", next)
	if err != nil {
		return err
	}
	if _, werr := conn.Write([]byte("PING")); werr != nil {
		return werr
	}
	return nil
}

// TestDialBackoffSpreads: after a failed dial a node refuses dials at once (the caller falls
// back) until a jittered instant below the backoff window, so a fleet whose Redis went away at
// one instant redials spread over the window; a later success resets the backoff.
func TestDialBackoffSpreads(t *testing.T) {
	const fleet = 200
	refused := errors.New("connection refused")
	fail := func(context.Context, string, string) (net.Conn, error) { return nil, refused }
	d := &dialer{idle: -1, nodes: map[string]*nodeConns{}}
	start := time.Now()
	var untils []time.Time
	for i := range fleet {
		n := d.node("10.0.0." + strconv.Itoa(i) + ":6379")
		if err := deadDial(n, fail); !errors.Is(err, refused) {
			t.Fatalf("first dial: %v, want a dead connection failing with the dial's error", err)
		}
		if err := deadDial(n, fail); !errors.Is(err, ErrDialBackoff) {
			t.Fatalf("a dial in the backoff: %v, want a dead connection failing with ErrDialBackoff", err)
		}
		n.mu.Lock()
		untils = append(untils, n.notUntil)
		n.mu.Unlock()
	}
	// The instants fall in [start, start + the window of one failure + 1ms], in many distinct
	// 5ms buckets rather than a few.
	window := minDialBackoff
	buckets := map[int64]int{}
	for _, u := range untils {
		off := u.Sub(start)
		if off < 0 || off > window+100*time.Millisecond {
			t.Fatalf("a dial backoff ends %s after the failures began, outside the %s window", off, window)
		}
		buckets[int64(off/(5*time.Millisecond))]++
	}
	most := 0
	for _, n := range buckets {
		most = max(most, n)
	}
	t.Logf("%d nodes' first redials fall in %d buckets of 5ms, at most %d in one", fleet, len(buckets), most)
	if len(buckets) < 10 || most > fleet/4 {
		t.Errorf("redials bunch: %d buckets of 5ms, up to %d of %d nodes in one", len(buckets), most, fleet)
	}

	// Success clears the backoff.
	n := d.node("10.0.0.0:6379")
	ok := func(context.Context, string, string) (net.Conn, error) {
		a, b := net.Pipe()
		_ = b.Close()
		return a, nil
	}
	n.mu.Lock()
	n.notUntil = time.Time{} // as if the backoff had run out
	n.mu.Unlock()
	conn, err := n.dial(context.Background(), "tcp", ok)
	if _, dead := conn.(*deadConn); err != nil || dead {
		t.Fatalf("dial after the backoff: %T, %v", conn, err)
	}
	_ = conn.Close()
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.failures != 0 || !n.notUntil.IsZero() {
		t.Errorf("after a successful dial: %d failures, backoff until %v", n.failures, n.notUntil)
	}
}
