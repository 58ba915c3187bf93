package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The fault matrix (faults_test.go) runs the sidecar binary against real Redis deployments
// started by the test, under a closed-loop load, and injects one fault per test. These are its
// helpers: the load and its per-phase figures, the breaker's transitions read from the log, a
// metrics scrape, and the report `make chaos` collects into bench/chaos.md.

// sample is one request of a faultLoad.
type sample struct {
	at   time.Duration // start, from the load's start
	lat  time.Duration
	code int // 0: no answer (transport error)
}

// faultLoad is workers sending requests back to back until end, each recorded.
type faultLoad struct {
	start   time.Time
	stop    chan struct{}
	wg      sync.WaitGroup
	mu      sync.Mutex
	samples []sample
}

// startFaultLoad runs workers against base; req(worker, n) gives the n-th request's path and
// headers.
func startFaultLoad(base string, workers int, req func(worker, n int) (string, map[string]string)) *faultLoad {
	l := &faultLoad{start: time.Now(), stop: make(chan struct{})}
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: workers}}
	for w := range workers {
		l.wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-l.stop:
					return
				default:
				}
				path, hdr := req(w, n)
				r, _ := http.NewRequest("GET", base+path, nil)
				for k, v := range hdr {
					r.Header.Set(k, v)
				}
				begin := time.Now()
				code := 0
				if resp, err := client.Do(r); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
					code = resp.StatusCode
				}
				s := sample{at: begin.Sub(l.start), lat: time.Since(begin), code: code}
				l.mu.Lock()
				l.samples = append(l.samples, s)
				l.mu.Unlock()
			}
		})
	}
	return l
}

// count is how many of the load's requests have been answered (or failed) so far.
func (l *faultLoad) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.samples)
}

// now is the instant as an offset from the load's start, for phase boundaries.
func (l *faultLoad) now() time.Duration { return time.Since(l.start) }

// end stops the load and returns its samples in start order.
func (l *faultLoad) end() []sample {
	close(l.stop)
	l.wg.Wait()
	slices.SortFunc(l.samples, func(a, b sample) int { return int(a.at - b.at) })
	return l.samples
}

// phaseStats are the figures of the samples started in one phase.
type phaseStats struct {
	name                   string
	n, ok, limited, failed int
	p50, p99, maxLat       time.Duration
	from, to               time.Duration
}

func statsOf(name string, samples []sample, from, to time.Duration) phaseStats {
	p := phaseStats{name: name, from: from, to: to}
	var lats []time.Duration
	for _, s := range samples {
		if s.at < from || s.at >= to {
			continue
		}
		p.n++
		switch s.code {
		case http.StatusOK:
			p.ok++
		case http.StatusTooManyRequests:
			p.limited++
		default:
			p.failed++
		}
		lats = append(lats, s.lat)
	}
	if len(lats) > 0 {
		slices.Sort(lats)
		p.p50 = lats[len(lats)/2]
		p.p99 = lats[min(len(lats)-1, len(lats)*99/100)]
		p.maxLat = lats[len(lats)-1]
	}
	return p
}

func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d.Microseconds())/1000, 'f', 1, 64) + " ms"
}

func (p phaseStats) row() string {
	return fmt.Sprintf("| %s | %s–%s | %d | %d | %d | %d | %s | %s | %s |", p.name, ms(p.from), ms(p.to), p.n, p.ok, p.limited, p.failed, ms(p.p50), ms(p.p99), ms(p.maxLat))
}

const phaseHeader = "| phase | from–to (since load start) | requests | 200 | 429 | failed | p50 | p99 | max |\n|---|---|--:|--:|--:|--:|--:|--:|--:|"

// transition is one change of the breaker's state, from the sidecar's log.
type transition struct {
	at       time.Time
	from, to string
}

// transitions parses the sidecar's "Redis circuit breaker changed state" log lines.
func (s *sidecar) transitions() []transition {
	var out []transition
	sc := bufio.NewScanner(strings.NewReader(s.Logs()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var l struct {
			Time     time.Time `json:"time"`
			Msg      string    `json:"msg"`
			From, To string
		}
		if json.Unmarshal(sc.Bytes(), &l) != nil || l.Msg != "Redis circuit breaker changed state" {
			continue
		}
		out = append(out, transition{at: l.Time, from: l.From, to: l.To})
	}
	return out
}

// describeTransitions renders ts relative to the load's start.
func describeTransitions(ts []transition, start time.Time) string {
	var b strings.Builder
	for i, tr := range ts {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s→%s at %s", tr.from, tr.to, ms(tr.at.Sub(start)))
	}
	if b.Len() == 0 {
		return "none"
	}
	return b.String()
}

// metric sums the samples of the sidecar's metric name whose labels contain every one of
// labels (e.g. `policy="api"`).
func (s *sidecar) metric(t testing.TB, name string, labels ...string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + s.Admin + "/metrics")
	if err != nil {
		t.Fatalf("scraping metrics: %v", err)
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) || (len(line) > len(name) && line[len(name)] != '{' && line[len(name)] != ' ') {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(line, l)
		}
		if !ok {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			sum += v
		}
	}
	return sum
}

// faultUpstream is an upstream answering 200 "ok".
func faultUpstream(t testing.TB) string {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }))
	t.Cleanup(up.Close)
	return up.URL
}

// writePolicies writes doc as a policies.json in a new directory and returns its path.
func writePolicies(t testing.TB, doc []byte) string {
	p := filepath.Join(t.TempDir(), "policies.json")
	if err := os.WriteFile(p, doc, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// report logs a section of figures and, when SLUICE_FAULTS_REPORT names a file (make chaos),
// appends it there for bench/chaos.md.
func report(t testing.TB, title string, lines ...string) {
	t.Helper()
	text := "### " + title + "\n\n" + strings.Join(lines, "\n") + "\n\n"
	t.Log("\n" + text)
	path := os.Getenv("SLUICE_FAULTS_REPORT")
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Errorf("report: %v", err)
		return
	}
	defer f.Close()
	_, _ = f.WriteString(text)
}

// procStatus reads a field of /proc/pid/status in kB (VmRSS, VmHWM).
func procStatus(t testing.TB, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}
