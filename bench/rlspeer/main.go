// Command rlspeer measures sluice-ratelimit (cmd/ratelimit) side by side with a reference
// decision service (bench/rlsref: what envoyproxy/ratelimit's Redis driver does, one pipelined
// INCRBY and EXPIRE per descriptor on a fixed-window key) in one invocation: the binaries
// against the same redis-server, under the same closed-loop gRPC load from this process (one
// HTTP/2 connection per service, -clients concurrent callers, one descriptor per request, a
// fixed window of one second that never denies), in rounds in which each service goes first in
// turn. sluice-ratelimit runs twice: with the policy's default response headers (Both) and with
// None (the peer sends none by default); -leased adds a third whose rule leases units. Per service and round: decisions per second, CPU per decision of the service's process
// and of redis-server (utime+stime from /proc), the latency of a call at the client (p50, p99),
// and Redis commands per decision (INFO commandstats, INFO's own calls left out). It prints a
// Markdown section for bench/results.md with the medians of the rounds and the ratios
// sluice-ratelimit ÷ reference.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rlsv3common "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/testutil/proc"
	"github.com/sluice-dev/sluice/internal/testutil/redisserver"
)

func main() {
	clients := flag.Int("clients", 32, "concurrent closed-loop callers per service")
	duration := flag.Duration("duration", 3*time.Second, "length of each service's phase in a round")
	rounds := flag.Int("rounds", 3, "rounds; each measures every service, each first in turn")
	sluiceBin := flag.String("sluice-bin", "", "sluice-ratelimit binary (default: go build ./cmd/ratelimit)")
	refBin := flag.String("ref-bin", "", "reference service binary (default: go build ./bench/rlsref)")
	leased := flag.Duration("leased", 0, "also measure a sluice-ratelimit whose rule leases units with this maxAge (0: not)")
	flag.Parse()
	if err := run(*clients, *duration, *rounds, *sluiceBin, *refBin, *leased); err != nil {
		fmt.Fprintln(os.Stderr, "rlspeer:", err)
		os.Exit(1)
	}
}

// service is one decision service under test.
type service struct {
	name   string
	pid    int
	client rlsv3.RateLimitServiceClient
}

// benchName names the namespace, policy, domain and descriptor value of the benchmark.
const benchName = "bench"

// limit is the rule of every service: a fixed window of one second (the peer's per-second
// limit) that never denies, so that every service does the same work on every call.
const limit = limiter.MaxLimit

// sample is one service's figures in one round.
type sample struct {
	decisions           int64
	wall                time.Duration
	serverCPU, redisCPU time.Duration
	redisCalls          int64
	p50, p99            time.Duration
}

func run(clients int, d time.Duration, rounds int, sluiceBin, refBin string, leased time.Duration) error {
	dir, err := os.MkdirTemp("", "rlspeer")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	for _, b := range []struct {
		path *string
		pkg  string
	}{{&sluiceBin, "./cmd/ratelimit"}, {&refBin, "./bench/rlsref"}} {
		if *b.path != "" {
			continue
		}
		*b.path = filepath.Join(dir, filepath.Base(b.pkg))
		if out, err := exec.Command("go", "build", "-o", *b.path, b.pkg).CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %w\n%s", b.pkg, err, out)
		}
	}

	redis, err := redisserver.Start()
	if err != nil {
		return err
	}
	defer redis.Close()
	redisPID, err := infoField(redis, "server", "process_id")
	if err != nil {
		return err
	}

	ref, err := startRef(refBin, redis.Addr(), dir)
	if err != nil {
		return err
	}
	services := []*service{ref}
	// Sluice's default response headers (Both: the draft's and the legacy X-RateLimit-*), and
	// none, as the peer sends by default.
	type variant struct {
		name    string
		headers policy.HeaderStyle
		lease   *policy.Lease
	}
	variants := []variant{{"sluice-ratelimit", policy.HeadersBoth, nil}, {"sluice-ratelimit, headers None", policy.HeadersNone, nil}}
	if leased > 0 {
		variants = append(variants, variant{fmt.Sprintf("sluice-ratelimit, rule leased (maxAge %s)", leased), policy.HeadersBoth,
			&policy.Lease{MaxAgeMs: leased.Milliseconds()}})
	}
	for i, v := range variants {
		doc := &policy.Document{Version: policy.Version, Namespace: benchName, Policies: []policy.Policy{{
			Name: benchName, Domain: benchName, Selector: &policy.LabelSelector{}, Replicas: 1,
			// Closed: a Redis call the loaded machine made late fails the run instead of
			// being decided from the local share, which would not be a Redis decision.
			FailureMode: policy.FailureClosed,
			Response:    policy.Response{StatusCode: 429, Headers: v.headers},
			Rules: []policy.Rule{{Name: "per-second", Algorithm: "FixedWindow", Limit: limit, WindowMs: 1000, Cost: 1, Mode: policy.Enforce,
				Match: &policy.Match{Descriptors: []policy.DescriptorEntry{{Key: "generic_key", Value: benchName}}},
				Key:   []policy.KeyPart{{Source: policy.SourceDescriptor, Name: "generic_key"}}, Lease: v.lease}},
		}}}
		b, err := policy.Marshal(doc)
		if err != nil {
			return err
		}
		cfg := filepath.Join(dir, strconv.Itoa(i)+"-"+policy.DataKey)
		if err := os.WriteFile(cfg, b, 0o600); err != nil {
			return err
		}
		s, err := startSluice(sluiceBin, cfg, redis.URL(), filepath.Join(dir, strconv.Itoa(i)+"-sluice-ratelimit.log"))
		if err != nil {
			return err
		}
		s.name = v.name
		services = append(services, s)
	}

	req := &rlsv3.RateLimitRequest{Domain: benchName, Descriptors: []*rlsv3common.RateLimitDescriptor{{
		Entries: []*rlsv3common.RateLimitDescriptor_Entry{{Key: "generic_key", Value: benchName}}}}}
	samples := make([][]sample, len(services))
	load0 := loadavg()
	for round := range rounds {
		for k := range services {
			i := (k + round) % len(services) // each service first in turn
			s, err := measure(services[i], redis, redisPID, req, clients, d)
			if err != nil {
				return fmt.Errorf("%s, round %d: %w", services[i].name, round+1, err)
			}
			samples[i] = append(samples[i], s)
		}
	}
	extra := ""
	if leased > 0 {
		extra = " -leased " + leased.String()
	}
	report(services, samples, clients, d, rounds, extra, load0, loadavg())
	return nil
}

var readyClient = &http.Client{Timeout: 10 * time.Second}

// startSluice runs sluice-ratelimit on free loopback ports and waits for /readyz.
func startSluice(bin, cfg, redisURL, logPath string) (*service, error) {
	grpcAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	admin, err := freeAddr()
	if err != nil {
		return nil, err
	}
	// A long Redis budget: a late answer on a loaded machine waits rather than fails.
	cmd, err := start(bin, logPath, "--grpc-listen", grpcAddr, "--metrics-listen", admin,
		"--config", cfg, "--redis-url", redisURL, "--redis-timeout", "5s", "--log-level", "warn")
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(proc.Patience)
	for {
		resp, err := readyClient.Get("http://" + admin + "/readyz")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
			err = errors.New("/readyz: " + resp.Status)
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(logPath)
			return nil, fmt.Errorf("sluice-ratelimit not ready after %s: %w\n%s", proc.Patience, err, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return dial("sluice-ratelimit", cmd.Process.Pid, grpcAddr)
}

// startRef runs the reference service and reads its address from its first line.
func startRef(bin, redisAddr, dir string) (*service, error) {
	cmd := proc.Own(exec.Command(bin, "-redis-addr", redisAddr, "-limit", strconv.FormatInt(limit, 10), "-unit", "second"))
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, "rlsref.log"))
	if err != nil {
		return nil, err
	}
	cmd.Stderr = logf
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		return nil, fmt.Errorf("reading rlsref's address: %w", err)
	}
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
	if !ok {
		return nil, fmt.Errorf("rlsref said %q, not its address", line)
	}
	return dial("reference (envoyproxy/ratelimit's Redis driver)", cmd.Process.Pid, addr)
}

// start runs bin with args, its output in logPath, as a child that dies with this process.
func start(bin, logPath string, args ...string) (*exec.Cmd, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := proc.Own(exec.Command(bin, args...))
	cmd.Stdout, cmd.Stderr = logf, logf
	return cmd, cmd.Start()
}

func dial(name string, pid int, addr string) (*service, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	return &service{name: name, pid: pid, client: rlsv3.NewRateLimitServiceClient(conn)}, nil
}

// measure warms s up, then runs clients closed-loop callers for d.
func measure(s *service, redis *redisserver.Server, redisPID int, req *rlsv3.RateLimitRequest, clients int, d time.Duration) (sample, error) {
	call := func() error {
		resp, err := s.client.ShouldRateLimit(context.Background(), req)
		if err != nil {
			return err
		}
		if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || resp.GetStatuses()[0].GetCurrentLimit() == nil {
			return fmt.Errorf("answered %v", resp)
		}
		return nil
	}
	if _, err := callers(clients, 500/clients+1, 0, call); err != nil {
		return sample{}, err
	}
	calls0, err := commandCalls(redis)
	if err != nil {
		return sample{}, err
	}
	srv0, red0, start := cpuOf(s.pid), cpuOf(redisPID), time.Now()
	lat, err := callers(clients, 0, d, call)
	if err != nil {
		return sample{}, err
	}
	wall, srv1, red1 := time.Since(start), cpuOf(s.pid), cpuOf(redisPID)
	calls1, err := commandCalls(redis)
	if err != nil {
		return sample{}, err
	}
	slices.Sort(lat)
	n := int64(len(lat))
	return sample{decisions: n, wall: wall, serverCPU: srv1 - srv0, redisCPU: red1 - red0, redisCalls: calls1 - calls0,
		p50: lat[len(lat)/2], p99: lat[len(lat)*99/100]}, nil
}

// callers runs n goroutines calling call, each count times, or until d has passed when count
// is 0, and returns every call's latency.
func callers(n, count int, d time.Duration, call func() error) ([]time.Duration, error) {
	var wg sync.WaitGroup
	var firstErr atomic.Value
	lats := make([][]time.Duration, n)
	deadline := time.Now().Add(d)
	for g := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; count == 0 || i < count; i++ {
				t0 := time.Now()
				if count == 0 && !t0.Before(deadline) {
					return
				}
				if err := call(); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				lats[g] = append(lats[g], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return nil, err
	}
	return slices.Concat(lats...), nil
}

// cpuOf is pid's user+system CPU time from /proc/<pid>/stat (clock ticks of 10ms); 0 when it
// cannot be read.
func cpuOf(pid int) time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	u, _ := strconv.ParseInt(f[11], 10, 64)
	k, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+k) * 10 * time.Millisecond
}

// commandCalls is the number of commands Redis has run (INFO commandstats), without INFO's.
func commandCalls(redis *redisserver.Server) (int64, error) {
	out, err := redis.Do("INFO", "commandstats")
	if err != nil {
		return 0, err
	}
	var total int64
	for _, line := range strings.Split(out, "\n") {
		name, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") || name == "cmdstat_info" {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(v, "calls="), ",")
		n, err := strconv.ParseInt(calls, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("INFO commandstats: %q: %w", line, err)
		}
		total += n
	}
	return total, nil
}

// infoField is one integer field of an INFO section.
func infoField(redis *redisserver.Server, section, field string) (int, error) {
	out, err := redis.Do("INFO", section)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, errors.New("INFO " + section + " has no " + field)
}

func freeAddr() (string, error) {
	port, err := redisserver.FreePort()
	return "127.0.0.1:" + strconv.Itoa(port), err
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func report(services []*service, samples [][]sample, clients int, d time.Duration, rounds int, extra, load0, load1 string) {
	type figures struct{ rate, srvCPU, redisCPU, p50, p99, calls float64 }
	fig := func(s sample) figures {
		n := float64(max(s.decisions, 1))
		return figures{rate: float64(s.decisions) / s.wall.Seconds(), srvCPU: float64(s.serverCPU.Microseconds()) / n,
			redisCPU: float64(s.redisCPU.Microseconds()) / n, p50: float64(s.p50.Microseconds()) / 1000,
			p99: float64(s.p99.Microseconds()) / 1000, calls: float64(s.redisCalls) / n}
	}
	median := func(xs []float64) float64 {
		xs = slices.Clone(xs)
		slices.Sort(xs)
		if len(xs)%2 == 1 {
			return xs[len(xs)/2]
		}
		return (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2
	}
	col := func(i int, f func(figures) float64) (vals []float64) {
		for _, s := range samples[i] {
			vals = append(vals, f(fig(s)))
		}
		return vals
	}
	cols := []struct {
		name string
		f    func(figures) float64
		unit string
	}{
		{"decisions/s", func(f figures) float64 { return f.rate }, "%.0f"},
		{"service CPU µs/decision", func(f figures) float64 { return f.srvCPU }, "%.1f"},
		{"Redis CPU µs/decision", func(f figures) float64 { return f.redisCPU }, "%.1f"},
		{"p50 ms", func(f figures) float64 { return f.p50 }, "%.2f"},
		{"p99 ms", func(f figures) float64 { return f.p99 }, "%.2f"},
		{"Redis commands/decision", func(f figures) float64 { return f.calls }, "%.3f"},
	}

	fmt.Printf("## RLS server vs a reference decision service (envoyproxy/ratelimit's Redis driver)\n\n")
	fmt.Printf("`go run ./bench/rlspeer -clients %d -duration %s -rounds %d%s` (load average %s at the start, %s at the end): "+
		"sluice-ratelimit (cmd/ratelimit) with the policy's default response headers (Both: response_headers_to_add carries the draft's and the legacy X-RateLimit-* fields), again with headers None (the peer sends none by default) and, with -leased, with the rule leasing units, and bench/rlsref (what envoyproxy/ratelimit's Redis driver does: per descriptor one pipelined INCRBY and EXPIRE on a fixed-window key) "+
		"as separate processes against one redis-server, %d closed-loop gRPC callers from the bench process, one descriptor per request, a one-second fixed window that never denies; "+
		"%d rounds of %s per service, each service first in turn. CPU is each process's utime+stime from /proc over its phase; Redis commands from INFO commandstats. "+
		"Medians of the rounds; ratio = sluice-ratelimit ÷ reference (decisions/s: higher is better; the rest: lower is better).\n\n",
		clients, d, rounds, extra, load0, load1, clients, rounds, d)
	fmt.Print("| service |")
	for _, c := range cols {
		fmt.Printf(" %s |", c.name)
	}
	fmt.Print("\n|---|")
	for range cols {
		fmt.Print("--:|")
	}
	fmt.Println()
	for i, s := range services {
		fmt.Printf("| %s |", s.name)
		for _, c := range cols {
			fmt.Printf(" "+c.unit+" |", median(col(i, c.f)))
		}
		fmt.Println()
	}
	// services[0] is the reference.
	for j := 1; j < len(services); j++ {
		fmt.Printf("| **ratio %s ÷ reference** |", services[j].name)
		for _, c := range cols {
			ref := median(col(0, c.f))
			if ref == 0 {
				fmt.Print(" - |")
				continue
			}
			fmt.Printf(" **%.2f×** |", median(col(j, c.f))/ref)
		}
		fmt.Println()
	}
	fmt.Println()
	for j := 1; j < len(services); j++ {
		fmt.Printf("Per round, %s ÷ reference (decisions/s, service CPU, Redis CPU per decision):", services[j].name)
		for r := range samples[0] {
			a, b := fig(samples[0][r]), fig(samples[j][r])
			fmt.Printf(" %d: %.2f×, %.2f×, %.2f×;", r+1, b.rate/a.rate, b.srvCPU/a.srvCPU, b.redisCPU/max(a.redisCPU, 1e-9))
		}
		fmt.Println()
	}
	fmt.Println()
}
