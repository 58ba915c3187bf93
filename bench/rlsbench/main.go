// Command rlsbench measures the RLS server's decisions per second and CPU per decision under
// closed-loop load from a Go gRPC client, against the sidecar's own decision path (an HTTP
// request through the sidecar to a stub application) in the same run, on the same policy
// and the same redis-server, and prints a Markdown section for bench/results.md.
//
// Both servers and their clients run in this process: CPU is this process's user+system time
// (/proc/self/stat) over each phase, so it counts the client's work too in both; Redis's CPU is
// not counted in either. The sidecar's figure includes proxying to the application, which with
// the RLS server Envoy does.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rlsv3common "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-dev/sluice/internal/dataplane/breaker"
	"github.com/sluice-dev/sluice/internal/dataplane/config"
	"github.com/sluice-dev/sluice/internal/dataplane/decide"
	"github.com/sluice-dev/sluice/internal/dataplane/metrics"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/limiter/redisstore"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/rls"
	"github.com/sluice-dev/sluice/internal/testutil/redisserver"
	"github.com/sluice-dev/sluice/sidecar/proxy"
)

// benchName names the namespace, policy, domain and descriptor value of the benchmark.
const benchName = "bench"

func main() {
	clients := flag.Int("clients", 16, "closed-loop callers per phase")
	duration := flag.Duration("duration", 3*time.Second, "length of each phase")
	flag.Parse()
	if err := run(*clients, *duration); err != nil {
		fmt.Fprintln(os.Stderr, "rlsbench:", err)
		os.Exit(1)
	}
}

type phase struct {
	name      string
	n         int64
	wall, cpu time.Duration
}

func run(clients int, d time.Duration) error {
	srv, err := redisserver.Start()
	if err != nil {
		return err
	}
	defer srv.Close()
	client, err := redisstore.NewClientFromURL(srv.URL())
	if err != nil {
		return err
	}
	defer func() { _ = client.Close() }()
	store := redisstore.New(client, redisstore.Options{})
	defer func() { _ = store.Close() }()

	// One rule that admits everything (so both paths do the same work every call): a bucket of
	// 1e8 per second, keyed by a constant.
	rule := policy.Rule{Name: "r", Algorithm: "TokenBucket", Limit: limiter.MaxLimit, Burst: limiter.MaxLimit, WindowMs: 1000, Cost: 1, Mode: policy.Enforce}
	desc := rule
	desc.Match = &policy.Match{Descriptors: []policy.DescriptorEntry{{Key: "generic_key", Value: benchName}}}
	desc.Key = []policy.KeyPart{{Source: policy.SourceDescriptor, Name: "generic_key"}}
	rule.Key = []policy.KeyPart{{Source: policy.SourceMethod}}
	doc := &policy.Document{Version: policy.Version, Namespace: benchName, Policies: []policy.Policy{{
		Name: benchName, Domain: benchName, Selector: &policy.LabelSelector{}, Replicas: 1, FailureMode: policy.FailureLocal,
		Response: policy.Response{StatusCode: 429, Headers: policy.HeadersBoth}, Rules: []policy.Rule{desc, rule}}}}
	b, err := policy.Marshal(doc)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "rlsbench")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	file := filepath.Join(dir, policy.DataKey)
	if err := os.WriteFile(file, b, 0o600); err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	newDecider := func(m *metrics.Metrics) decide.Options {
		return decide.Options{Remote: store, Breaker: breaker.New(breaker.Options{}), Local: limiter.NewMemoryStore(limiter.MemoryStoreOptions{}), Metrics: m}
	}

	// The sidecar: its handler and server in front of a stub application.
	sm := metrics.New()
	sl := config.NewLoader(file, "", nil, sm, log)
	if err := sl.Load(); err != nil {
		return err
	}
	up := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }), ReadHeaderTimeout: time.Second}
	uln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go func() { _ = up.Serve(uln) }()
	defer func() { _ = up.Close() }()
	target, _ := url.Parse("http://" + uln.Addr().String())
	h := proxy.New(proxy.Options{Upstream: target, Config: sl.Current, Decider: decide.New(newDecider(sm)), Metrics: sm, Log: log})
	ps := proxy.NewServer(h, proxy.ServerOptions{Log: log})
	pln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go func() { _ = ps.Serve(pln) }()
	defer func() { _ = ps.Shutdown(context.Background()) }()
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	purl := "http://" + pln.Addr().String() + "/"

	// The RLS server.
	rm := metrics.New()
	rl := config.NewLoader(file, "", nil, rm, log)
	rl.Domains = true
	if err := rl.Load(); err != nil {
		return err
	}
	gs := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(gs, rls.New(rls.Options{Config: rl.Current, Decider: decide.New(newDecider(rm)), Metrics: rm}))
	gln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go func() { _ = gs.Serve(gln) }()
	defer gs.Stop()
	conn, err := grpc.NewClient(gln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	rc := rlsv3.NewRateLimitServiceClient(conn)
	req := &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*rlsv3common.RateLimitDescriptor{{
		Entries: []*rlsv3common.RateLimitDescriptor_Entry{{Key: "generic_key", Value: "bench"}}}}}

	sidecarCall := func() error {
		resp, err := hc.Get(purl)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("sidecar answered %d", resp.StatusCode)
		}
		return nil
	}
	rlsCall := func() error {
		resp, err := rc.ShouldRateLimit(context.Background(), req)
		if err != nil {
			return err
		}
		if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || resp.GetStatuses()[0].GetCurrentLimit() == nil {
			return fmt.Errorf("RLS answered %v", resp)
		}
		return nil
	}
	var phases []phase
	for _, p := range []struct {
		name string
		call func() error
	}{{"sidecar decision path (HTTP through the sidecar)", sidecarCall}, {"RLS server (gRPC ShouldRateLimit)", rlsCall}} {
		for range 200 { // warm up connections and pools
			if err := p.call(); err != nil {
				return err
			}
		}
		ph, err := measure(p.name, clients, d, p.call)
		if err != nil {
			return err
		}
		phases = append(phases, ph)
	}
	report(phases, clients, d)
	return nil
}

func measure(name string, clients int, d time.Duration, call func() error) (phase, error) {
	var n atomic.Int64
	var firstErr atomic.Value
	cpu0, start := cpuTime(), time.Now()
	deadline := start.Add(d)
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				if err := call(); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return phase{}, err
	}
	return phase{name: name, n: n.Load(), wall: time.Since(start), cpu: cpuTime() - cpu0}, nil
}

// cpuTime is this process's user+system CPU time from /proc/self/stat (clock ticks of 10ms).
func cpuTime() time.Duration {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

func report(ps []phase, clients int, d time.Duration) {
	fmt.Printf("## RLS server vs the sidecar's decision path\n\n")
	fmt.Printf("`go run ./bench/rlsbench -clients %d -duration %s`: %d closed-loop callers per phase, one after the other, against one redis-server; one TokenBucket rule that admits every call, so both paths decide through Redis every time. CPU is the whole process's (servers and clients) user+system time from /proc/self/stat over the phase; Redis's is not counted. Ratio = RLS ÷ sidecar (decisions/s: higher is better; CPU per decision: lower is better). The sidecar's path also proxies each request to a stub application, which Envoy does in front of the RLS server.\n\n", clients, d, clients)
	fmt.Println("| path | decisions | decisions/s | CPU per decision |")
	fmt.Println("|---|--:|--:|--:|")
	rate := func(p phase) float64 { return float64(p.n) / p.wall.Seconds() }
	per := func(p phase) float64 { return float64(p.cpu.Microseconds()) / float64(max(p.n, 1)) }
	for _, p := range ps {
		fmt.Printf("| %s | %d | %.0f | %.1f µs |\n", p.name, p.n, rate(p), per(p))
	}
	if len(ps) == 2 {
		fmt.Printf("| **ratio RLS ÷ sidecar** | | **%.2f×** | **%.2f×** |\n", rate(ps[1])/rate(ps[0]), per(ps[1])/per(ps[0]))
	}
	fmt.Println()
}
