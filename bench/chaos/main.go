//go:build linux

// Command chaos tells the Redis outage story in figures: a fixed-rate load through two sidecars
// sharing one redis-server and one limit (failure mode Local), while the run kills Redis with
// SIGKILL, brings it back, pauses it with SIGSTOP and resumes it with SIGCONT.
//
// It starts everything itself on loopback (redis-server, an upstream in this process, two
// sidecars from --sidecar), sends --rate requests per second alternately to the two sidecars from
// an open-loop generator (latency measured from each request's scheduled start), and reports per
// phase: requests that failed (neither 200 nor 429, or no answer), requests admitted against
// the global limit and each pod's share of it, p50/p99 latency, decisions made locally (the
// sidecars' sluice_fallback_decisions_total), and how long the breakers took to open after
// each fault and to close again after each repair (the sidecars' "Redis circuit breaker changed
// state" log lines). The sidecars die with it (SIGTERM, or Pdeathsig if it is killed);
// redis-server, started through internal/testutil/redisserver, is killed when it returns or
// gets SIGTERM or SIGINT.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/testutil/redisserver"
	"github.com/sluice-dev/sluice/internal/upstream"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(1)
	}
}

// phase is a stretch of the run between two events.
type phase struct {
	name  string
	event string // what happened at its start
	start time.Time
	end   time.Time
}

// sample is one request of the load.
type sample struct {
	at      time.Time // scheduled start
	latency time.Duration
	status  int // -1: no answer
	pod     int
}

// transition is a breaker state change logged by a sidecar.
type transition struct {
	pod      int
	at       time.Time
	from, to string
}

func run() error {
	sidecarBin := flag.String("sidecar", "", "sluice-sidecar binary")
	policyPath := flag.String("policy", "", "rendered policies.json (replicas 2, failure mode Local)")
	labels := flag.String("pod-labels", "app=chaos", "labels the sidecars claim, to match the policy's selector")
	rate := flag.Int("rate", 800, "requests per second offered in total, alternately to each sidecar")
	phaseLen := flag.Duration("phase", 10*time.Second, "length of each phase")
	warmup := flag.Duration("warmup", 3*time.Second, "load before the first phase, not reported")
	out := flag.String("out", "", "write the Markdown report here as well as to standard output")
	work := flag.String("work", "", "directory for logs (default: a temporary one, removed)")
	flag.Parse()
	if *sidecarBin == "" || *policyPath == "" {
		return errors.New("--sidecar and --policy are required")
	}
	doc, err := readPolicy(*policyPath)
	if err != nil {
		return err
	}
	pol, rule := doc.Policies[0], doc.Policies[0].Rules[0]
	if *work == "" {
		if *work, err = os.MkdirTemp("", "sluice-chaos-"); err != nil {
			return err
		}
		defer func() { _ = os.RemoveAll(*work) }()
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	procs := &processes{}
	defer procs.stopAll()

	// Redis, restartable on the same port; redis-server from PATH, its log in the work directory.
	redis, err := redisserver.Start(redisserver.WithDir(*work), redisserver.WithArgs("--loglevel", "warning"))
	if err != nil {
		return err
	}
	defer redis.Close()

	// The application: a short answer over keep-alive.
	upLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	upSrv := &http.Server{Handler: &upstream.Handler{Name: "chaos"}, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = upSrv.Serve(upLn) }()
	defer func() { _ = upSrv.Close() }()

	// Two sidecars, as two pods of one Deployment.
	var (
		mu          sync.Mutex
		transitions []transition
	)
	var sidecarURLs, metricsURLs [2]string
	var logWG sync.WaitGroup
	for pod := range 2 {
		port, err := redisserver.FreePort()
		if err != nil {
			return err
		}
		mport, err := redisserver.FreePort()
		if err != nil {
			return err
		}
		cmd := exec.Command(*sidecarBin, "--listen", fmt.Sprintf("127.0.0.1:%d", port),
			"--upstream", "http://"+upLn.Addr().String(), "--config", *policyPath,
			"--pod-labels-file", "", "--pod-labels", *labels,
			"--redis-url", redis.URL(),
			"--metrics-listen", fmt.Sprintf("127.0.0.1:%d", mport))
		stderr, err := cmd.StderrPipe()
		if err != nil {
			return err
		}
		logFile, err := os.Create(filepath.Join(*work, fmt.Sprintf("sidecar-%d.log", pod)))
		if err != nil {
			return err
		}
		defer func() { _ = logFile.Close() }()
		if err := procs.start(cmd); err != nil {
			return err
		}
		logWG.Go(func() {
			sc := bufio.NewScanner(stderr)
			for sc.Scan() {
				line := sc.Bytes()
				_, _ = logFile.Write(append(line, '\n'))
				var e struct {
					Time time.Time `json:"time"`
					Msg  string    `json:"msg"`
					From string    `json:"from"`
					To   string    `json:"to"`
				}
				if json.Unmarshal(line, &e) == nil && e.Msg == "Redis circuit breaker changed state" {
					mu.Lock()
					transitions = append(transitions, transition{pod: pod, at: e.Time, from: e.From, to: e.To})
					mu.Unlock()
				}
			}
		})
		sidecarURLs[pod] = fmt.Sprintf("http://127.0.0.1:%d/", port)
		metricsURLs[pod] = fmt.Sprintf("http://127.0.0.1:%d", mport)
		if err := waitReady(ctx, metricsURLs[pod]+"/readyz"); err != nil {
			return fmt.Errorf("sidecar %d: %w (log in %s)", pod, err, logFile.Name())
		}
	}

	// The load, open loop.
	interval := time.Second / time.Duration(*rate)
	total := *warmup + 5**phaseLen
	samples := make([]sample, int(total/interval))
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1024, DisableCompression: true}, Timeout: 5 * time.Second}
	begin := time.Now().Add(100 * time.Millisecond)
	var loadWG sync.WaitGroup
	loadWG.Go(func() {
		var wg sync.WaitGroup
		for i := range samples {
			at := begin.Add(time.Duration(i) * interval)
			time.Sleep(time.Until(at))
			if ctx.Err() != nil {
				break
			}
			pod := i % 2
			wg.Go(func() {
				s := sample{at: at, pod: pod, status: -1}
				if resp, err := client.Get(sidecarURLs[pod]); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
					s.status = resp.StatusCode
				}
				s.latency = time.Since(at)
				samples[i] = s
			})
		}
		wg.Wait()
	})

	// The faults.
	phases := []phase{
		{name: "steady", event: "load running, Redis up"},
		{name: "killed", event: "kill -9 redis-server"},
		{name: "restarted", event: "redis-server started again (empty)"},
		{name: "paused", event: "kill -STOP redis-server"},
		{name: "resumed", event: "kill -CONT redis-server"},
	}
	fallback := make([][2]float64, len(phases)+1) // local decisions per pod at each boundary
	sleepUntil := func(t time.Time) error {
		select {
		case <-time.After(time.Until(t)):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for i := range phases {
		if err := sleepUntil(begin.Add(*warmup + time.Duration(i)**phaseLen)); err != nil {
			return err
		}
		fallback[i] = scrapeFallback(metricsURLs)
		phases[i].start = time.Now()
		var err error
		switch phases[i].name {
		case "killed":
			err = redis.Kill()
		case "restarted":
			err = redis.Restart()
		case "paused":
			err = redis.Pause()
		case "resumed":
			err = redis.Resume()
		}
		if err != nil {
			return err
		}
		if i > 0 {
			phases[i-1].end = phases[i].start //nolint:gosec // i > 0
		}
	}
	if err := sleepUntil(begin.Add(total)); err != nil {
		return err
	}
	phases[len(phases)-1].end = time.Now()
	loadWG.Wait()
	fallback[len(phases)] = scrapeFallback(metricsURLs)
	procs.stopAll()
	logWG.Wait()

	mu.Lock()
	defer mu.Unlock()
	report := render(reportInput{
		policy: pol, rule: rule, rate: *rate, phaseLen: *phaseLen, warmup: *warmup,
		phases: phases, samples: samples, transitions: transitions, fallback: fallback,
	})
	fmt.Print(report)
	if *out != "" {
		return os.WriteFile(*out, []byte(report), 0o644)
	}
	return nil
}

type reportInput struct {
	policy      policy.Policy
	rule        policy.Rule
	rate        int
	phaseLen    time.Duration
	warmup      time.Duration
	phases      []phase
	samples     []sample
	transitions []transition
	fallback    [][2]float64
}

func render(in reportInput) string {
	var b strings.Builder
	replicas := max(1, int64(in.policy.Replicas))
	perSecond := float64(in.rule.Limit) * float64(time.Second) / float64(time.Duration(in.rule.WindowMs)*time.Millisecond)
	share := perSecond / float64(replicas)
	fmt.Fprintf(&b, "Load: %d req/s open loop, alternately to 2 sidecars (%d req/s each); policy %q: %s %d per %d ms",
		in.rate, in.rate/2, in.policy.Name, in.rule.Algorithm, in.rule.Limit, in.rule.WindowMs)
	if in.rule.Burst > 0 {
		fmt.Fprintf(&b, " (burst %d)", in.rule.Burst)
	}
	fmt.Fprintf(&b, ", replicas %d, failureMode %s: global limit %.0f/s, each pod's share %.0f/s. "+
		"Phases of %s after %s of warm-up; latency from each request's scheduled start.\n\n",
		replicas, in.policy.FailureMode, perSecond, share, in.phaseLen, in.warmup)

	b.WriteString("| phase | event at its start | sent | failed | admitted/s (pod 0, pod 1) | vs global limit | pod 0, pod 1 vs share | 429 | local decisions | breaker opened after | back on Redis after | p50 | p99 |\n")
	b.WriteString("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for i, p := range in.phases {
		var sent, failed, limited int
		var admitted [2]int
		var lat []time.Duration
		for _, s := range in.samples {
			if s.at.Before(p.start) || !s.at.Before(p.end) || s.latency == 0 {
				continue
			}
			sent++
			lat = append(lat, s.latency)
			switch s.status {
			case http.StatusOK:
				admitted[s.pod]++
			case http.StatusTooManyRequests:
				limited++
			default:
				failed++
			}
		}
		secs := p.end.Sub(p.start).Seconds()
		a0, a1 := float64(admitted[0])/secs, float64(admitted[1])/secs
		local := (in.fallback[i+1][0] - in.fallback[i][0]) + (in.fallback[i+1][1] - in.fallback[i][1])
		opened, closed := "–", "–"
		switch p.name {
		case "killed", "paused":
			opened = firstAfter(in.transitions, p.start, "open")
		case "restarted", "resumed":
			closed = firstAfter(in.transitions, p.start, "closed")
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %.0f (%.0f, %.0f) | %.2f | %.2f, %.2f | %d | %.0f%% | %s | %s | %s | %s |\n",
			p.name, p.event, sent, failed, a0+a1, a0, a1, (a0+a1)/perSecond, a0/share, a1/share, limited,
			100*local/float64(max(1, sent)), opened, closed, pct(lat, 0.50), pct(lat, 0.99))
	}
	b.WriteString("\nBreaker transitions (from the sidecars' logs, relative to the start of the phase they fall in):\n\n")
	for _, t := range in.transitions {
		name, rel := "warm-up", t.at.Sub(in.phases[0].start)
		for _, p := range in.phases {
			if !t.at.Before(p.start) {
				name, rel = p.name, t.at.Sub(p.start)
			}
		}
		fmt.Fprintf(&b, "- pod %d: %s → %s at %s%+.1f ms\n", t.pod, t.from, t.to, name, float64(rel)/1e6)
	}
	if len(in.transitions) == 0 {
		b.WriteString("- none\n")
	}
	return b.String()
}

// firstAfter reports, per pod, how long after since the breaker first moved to state to.
func firstAfter(ts []transition, since time.Time, to string) string {
	parts := make([]string, 0, 2)
	for pod := range 2 {
		got := "never"
		for _, t := range ts {
			if t.pod == pod && t.to == to && !t.at.Before(since) {
				got = fmt.Sprintf("%.0f ms", float64(t.at.Sub(since))/1e6)
				break
			}
		}
		parts = append(parts, got)
	}
	return strings.Join(parts, ", ")
}

func pct(lat []time.Duration, p float64) string {
	if len(lat) == 0 {
		return "–"
	}
	s := slices.Clone(lat)
	slices.Sort(s)
	return fmt.Sprintf("%.2f ms", float64(s[int(float64(len(s)-1)*p)])/1e6)
}

// scrapeFallback returns each sidecar's sluice_fallback_decisions_total summed over its labels.
func scrapeFallback(metricsURLs [2]string) [2]float64 {
	var out [2]float64
	c := &http.Client{Timeout: 2 * time.Second}
	for pod, u := range metricsURLs {
		resp, err := c.Get(u + "/metrics")
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			line := sc.Text()
			if !strings.HasPrefix(line, "sluice_fallback_decisions_total{") {
				continue
			}
			f := strings.Fields(line)
			if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
				out[pod] += v
			}
		}
		_ = resp.Body.Close()
	}
	return out
}

func readPolicy(path string) (policy.Document, error) {
	var doc policy.Document
	raw, err := os.ReadFile(path)
	if err != nil {
		return doc, err
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return doc, fmt.Errorf("%s: %w", path, err)
	}
	if len(doc.Policies) != 1 || len(doc.Policies[0].Rules) != 1 {
		return doc, fmt.Errorf("%s: want one policy with one rule", path)
	}
	return doc, nil
}

// processes are the children of this run: each dies with it.
type processes struct {
	mu    sync.Mutex
	procs []*exec.Cmd
}

func (p *processes) start(cmd *exec.Cmd) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	p.mu.Lock()
	p.procs = append(p.procs, cmd)
	p.mu.Unlock()
	return nil
}

// stopAll resumes and terminates every child still running and waits for it.
func (p *processes) stopAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, cmd := range p.procs {
		if cmd.ProcessState != nil {
			continue
		}
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	p.procs = nil
}

// waitReady polls url until it answers 200.
func waitReady(ctx context.Context, url string) error {
	err := wait.PollUntilContextTimeout(ctx, 25*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		resp, err := http.Get(url) //nolint:gosec // the driver's own loopback sidecar
		if err != nil {
			return false, nil
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		return fmt.Errorf("%s never answered 200: %w", url, err)
	}
	return nil
}
