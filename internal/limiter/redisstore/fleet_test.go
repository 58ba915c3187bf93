package redisstore

import (
	"context"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testutil/proc"
	"github.com/sluice-dev/sluice/internal/testutil/redisserver"
)

// infoField reads one field of INFO section on srv; -1 when it cannot.
func infoField(srv *redisserver.TestServer, section, field string) int64 {
	info, err := srv.Do("INFO", section)
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return -1
			}
			return n
		}
	}
	return -1
}

// connsByName counts srv's client connections per name (CLIENT LIST).
func connsByName(t testing.TB, srv *redisserver.TestServer) map[string]int {
	t.Helper()
	list, err := srv.Do("CLIENT", "LIST")
	if err != nil {
		t.Fatalf("CLIENT LIST: %v", err)
	}
	out := map[string]int{}
	for _, line := range strings.Split(list, "\n") {
		for _, f := range strings.Fields(line) {
			if name, ok := strings.CutPrefix(f, "name="); ok && name != "" {
				out[name]++
			}
		}
	}
	return out
}

// TestFaultFleetRestart is the fleet figure of bench/results.md: SLUICE_FLEET_CLIENTS (default
// 2,000) Store clients, each its own NewClient client as in one sidecar each, in this process
// against one redis-server. Each makes one Take and goes idle: the test reports Redis's
// connected_clients and its memory per connection. Then every client takes every 500 ms (at a
// random phase) and Redis is restarted on the same port: the test reports the accepted
// connections per 100 ms (INFO stats total_connections_received, sampled) until every client
// has reconnected, Redis having been down for a second. No client ever holds more than 2 connections (CLIENT LIST, by client name),
// and no 100 ms takes half the reconnections.
func TestFaultFleetRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("2,000 clients and a Redis restart")
	}
	fleet := 2000
	if v := os.Getenv("SLUICE_FLEET_CLIENTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 10 {
			t.Fatalf("SLUICE_FLEET_CLIENTS=%q: want a number of at least 10", v)
		}
		fleet = n
	}
	const interval = 500 * time.Millisecond
	srv := redisserver.StartTest(t)
	memBefore := infoField(srv, "memory", "used_memory")
	clientsBefore := infoField(srv, "clients", "connected_clients")
	var heapBefore runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&heapBefore)

	lim := limiter.Limit{Algorithm: limiter.FixedWindow, Limit: limiter.MaxLimit, Window: time.Hour}
	stores := make([]*Store, fleet)
	dialers := make([]*dialer, fleet)
	// The instants of the clients' connections (Unix ns), as the clients see them.
	var dialsMu sync.Mutex
	var dialed []int64
	onDial := func(string) {
		now := time.Now().UnixNano()
		dialsMu.Lock()
		dialed = append(dialed, now)
		dialsMu.Unlock()
	}
	for i := range fleet {
		d := &dialer{idle: -1, nodes: map[string]*nodeConns{}, onDial: onDial}
		c, err := buildClient(srv.URL()+"?client_name=f"+strconv.Itoa(i), d)
		if err != nil {
			t.Fatal(err)
		}
		s := New(c, Options{Prefix: "fleet", Timeout: testTimeout})
		t.Cleanup(func() { _ = s.Close(); _ = c.Close() })
		stores[i], dialers[i] = s, d
	}
	// One Take each, 64 at a time.
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	var failed atomic.Int64
	for _, s := range stores {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if _, err := s.Take(context.Background(), "k", lim, 1, time.Time{}); err != nil {
				failed.Add(1)
			}
		})
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d of %d first Takes failed", n, fleet)
	}
	// The preloads (SCRIPT EXISTS after each first connection) may still be running: wait for
	// them to end.
	for _, s := range stores {
		for s.batch.preloading.Load() {
			time.Sleep(time.Millisecond)
		}
	}
	checkBound := func(when string) int {
		t.Helper()
		total := 0
		for name, n := range connsByName(t, srv) {
			if n > connBound {
				t.Errorf("%s: client %s holds %d connections, more than %d", when, name, n, connBound)
			}
			total += n
		}
		return total
	}
	held := checkBound("idle")
	clients := infoField(srv, "clients", "connected_clients")
	memAfter := infoField(srv, "memory", "used_memory")
	memClients := infoField(srv, "memory", "mem_clients_normal")
	var heapAfter runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&heapAfter)
	perConn := (memAfter - memBefore) / max(1, clients-clientsBefore)
	t.Logf("FLEET idle: %d clients hold %d connections (%.2f per client); Redis connected_clients %d; used_memory +%d bytes, %d bytes per connection (mem_clients_normal %d, %d per connection); Go heap in this process %d bytes per client",
		fleet, held, float64(held)/float64(fleet), clients, memAfter-memBefore, perConn, memClients, memClients/max(1, clients-clientsBefore),
		(int64(heapAfter.HeapInuse)-int64(heapBefore.HeapInuse))/int64(fleet))

	// Traffic: every client takes every interval, at its own phase.
	stop := make(chan struct{})
	var takes, errs atomic.Int64
	for _, s := range stores {
		wg.Go(func() {
			phase := time.NewTimer(rand.N(interval)) //nolint:gosec // a phase, not a secret
			select {
			case <-phase.C:
			case <-stop:
				phase.Stop()
				return
			}
			tick := time.NewTicker(interval)
			defer tick.Stop()
			for {
				if _, err := s.Take(context.Background(), "k", lim, 1, time.Time{}); err != nil {
					errs.Add(1)
				} else {
					takes.Add(1)
				}
				select {
				case <-tick.C:
				case <-stop:
					return
				}
			}
		})
	}
	time.Sleep(2 * interval)

	// Restart; sample the accepted connections every 100 ms, from a goroutine of its own,
	// until every client is back (connected_clients, which is cheap to read, unlike CLIENT
	// LIST).
	type sample struct {
		at       time.Duration // since Redis came back
		accepted int64         // since the previous sample
	}
	var (
		samplesMu sync.Mutex
		samples   []sample
		upAt      atomic.Int64 // Unix ns; 0 while Redis is down
		polls     atomic.Int64 // the connections of the polls below
	)
	sampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		last, lastPolls := int64(-1), int64(0)
		for {
			select {
			case <-tick.C:
			case <-sampling:
				return
			}
			up := upAt.Load()
			if up == 0 {
				continue
			}
			total := infoField(srv, "stats", "total_connections_received")
			if total < 0 {
				continue
			}
			if last < 0 {
				last = 0 // a new process counts from 0
			}
			p := polls.Load()
			samplesMu.Lock()
			// This sample's own connection and the polls' are among those counted.
			samples = append(samples, sample{time.Since(time.Unix(0, up)), total - last - 1 - (p - lastPolls)})
			samplesMu.Unlock()
			last, lastPolls = total, p
		}
	}()
	restarted := time.Now()
	srv.Stop()
	stopped := time.Now()
	time.Sleep(time.Second) // a restart that takes a while: the clients fail meanwhile
	srv.Restart()
	up := time.Now()
	upAt.Store(up.UnixNano())
	deadline := up.Add(proc.Patience)
	back := int64(0)
	for time.Now().Before(deadline) {
		// The fleet's connections, less the one reading this (the sampler's may be among
		// them too).
		polls.Add(1)
		if back = min(int64(fleet), infoField(srv, "clients", "connected_clients")-1); back >= int64(fleet) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	recovered := time.Since(up)
	time.Sleep(300 * time.Millisecond) // a last sample or two
	close(sampling)
	<-sampled
	close(stop)
	wg.Wait()
	held = checkBound("after the restart")

	var dials, refused int64
	for _, d := range dialers {
		n := d.node(srv.Addr())
		dials += n.dials.Load()
		refused += n.refused.Load()
	}
	var per []string
	most, sum := int64(0), int64(0)
	for _, s := range samples {
		per = append(per, s.at.Round(10*time.Millisecond).String()+":"+strconv.FormatInt(s.accepted, 10))
		most = max(most, s.accepted)
		sum += s.accepted
	}
	t.Logf("FLEET restart: Redis down for %s; %d of %d clients back (%d connections) %s after it came up; accepted connections per 100ms sample (time since up:count): [%s], at most %d, %d in all",
		up.Sub(restarted).Round(time.Millisecond), back, fleet, held, recovered.Round(10*time.Millisecond), strings.Join(per, " "), most, sum)
	// The clients' own account: their connections per 100 ms from the first one after the
	// stop (Redis answers before Restart, which polls it, returns).
	dialsMu.Lock()
	first := int64(0)
	for _, at := range dialed {
		if at > stopped.UnixNano() && (first == 0 || at < first) {
			first = at
		}
	}
	buckets := map[int64]int64{}
	var last int64
	for _, at := range dialed {
		if first > 0 && at >= first {
			b := (at - first) / int64(100*time.Millisecond)
			buckets[b]++
			last = max(last, b)
		}
	}
	dialsMu.Unlock()
	var hist []string
	mostDials, reconnects := int64(0), int64(0)
	for b := int64(0); b <= last; b++ {
		hist = append(hist, strconv.FormatInt(buckets[b], 10))
		mostDials, reconnects = max(mostDials, buckets[b]), reconnects+buckets[b]
	}
	t.Logf("FLEET reconnections by the clients' clocks, per 100ms from the first one after the stop: [%s], at most %d, %d in all", strings.Join(hist, " "), mostDials, reconnects)
	t.Logf("FLEET traffic: %d Takes answered, %d failed (fell back) during the test; dials %d, refused in backoff %d", takes.Load(), errs.Load(), dials, refused)
	if back < int64(fleet) {
		t.Errorf("only %d of %d clients reconnected within %s", back, fleet, deadline.Sub(up))
	}
	if mostDials > reconnects/2 {
		t.Errorf("%d of %d reconnections in one 100ms: a thundering herd", mostDials, reconnects)
	}
}
