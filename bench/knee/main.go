// Command knee measures a concurrency limit in front of an application with a knee, for
// bench/adaptive.sh. In one process it serves the application (the upstream) and drives
// closed-loop load at the proxy in front of it (the sidecar), then prints one TSV row.
//
// The upstream: a request that arrives with n requests in flight (itself included) is served
// in floor × max(n, knee) / knee. Up to knee requests in flight each take the floor; past it
// the upstream serves no more per second (knee / floor), every request only waits longer, as
// an application whose threads, connections or cores are all busy does. The limit worth
// having is the knee: below it throughput is lost, above it latency grows for nothing.
//
// The load: -clients clients, each sending GET requests back to back through -target for
// -warmup and then -duration; only the -duration window is measured. A shed client (503)
// waits Retry-After, capped at -backoff, before its next request: the sidecar's Retry-After
// is 1 s, which would leave the clients idle and hide what the limit does under pressure,
// while not waiting at all would have a shed client spin against the sidecar.
//
// With -metrics, the limit's series (-limit-series, one line of the sidecar's /metrics) is
// read every -sample over the measured window: its value at the end and the median, least and
// most of the samples are reported.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// columns are the TSV row's fields, in order (-header prints them).
var columns = []string{"config", "clients", "duration_s", "ok_per_s", "shed_per_s", "other",
	"p50_ms", "p99_ms", "floor_ms", "p99_over_floor", "peak_inflight",
	"limit_end", "limit_median", "limit_min", "limit_max"}

func main() {
	label := flag.String("label", "run", "the row's name (its first column)")
	header := flag.Bool("header", false, "print the TSV header and exit")
	listen := flag.String("listen", "127.0.0.1:0", "the upstream's address")
	target := flag.String("target", "", "URL to send the load to (the sidecar in front of -listen)")
	ready := flag.String("ready", "", "a URL to wait for a 200 from, once the upstream serves, before the load (the sidecar's /readyz)")
	metricsURL := flag.String("metrics", "", "the sidecar's /metrics URL (empty: no limit is read)")
	series := flag.String("limit-series", `sluice_adaptive_limit{policy="knee",rule="guard"}`, "the limit's series in -metrics, name and labels as exposed")
	floor := flag.Duration("floor", 20*time.Millisecond, "the upstream's service time up to -knee requests in flight")
	knee := flag.Int64("knee", 8, "requests in flight the upstream serves at its floor")
	clients := flag.Int("clients", 64, "closed-loop clients")
	warmup := flag.Duration("warmup", 10*time.Second, "load sent first and not measured")
	duration := flag.Duration("duration", 10*time.Second, "the measured load's duration")
	backoff := flag.Duration("backoff", 10*time.Millisecond, "the most a shed client waits (Retry-After capped)")
	sample := flag.Duration("sample", 100*time.Millisecond, "how often the limit is read")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("knee: ")
	if *header {
		fmt.Println(strings.Join(columns, "\t"))
		return
	}
	if *target == "" || *knee < 1 || *floor <= 0 || *clients < 1 || *duration <= 0 {
		log.Fatal("want -target, -knee >= 1, -floor > 0, -clients >= 1 and -duration > 0")
	}

	up := &upstream{floor: *floor, knee: *knee}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Handler: up, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	if *ready != "" {
		if err := waitReady(*ready); err != nil {
			log.Fatal(err)
		}
	}

	start := time.Now()
	from, end := start.Add(*warmup), start.Add(*warmup+*duration)
	up.measure(from, end)
	lg := &load{target: *target, backoff: *backoff, from: from, end: end,
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: *clients, DisableCompression: true}, Timeout: time.Minute}}
	var wg sync.WaitGroup
	for range *clients {
		wg.Go(lg.client1)
	}
	var limits []float64
	limitEnd := -1.0
	if *metricsURL != "" {
		limits, limitEnd = sampleLimit(*metricsURL, *series, *sample, from, end)
	}
	wg.Wait()
	// Shutdown waits for the upstream's handlers: the service times of the last arrivals.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		log.Fatal(err)
	}
	if lg.ok.Load() == 0 {
		log.Fatalf("no request succeeded through %s (%d shed, %d other answers)", *target, lg.shed.Load(), lg.other.Load())
	}

	svc, peak := up.results()
	secs := duration.Seconds()
	ms := func(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond)) }
	p50, p99 := percentile(svc, 50), percentile(svc, 99)
	row := []string{*label, strconv.Itoa(*clients), fmt.Sprintf("%g", secs),
		fmt.Sprintf("%.1f", float64(lg.ok.Load())/secs), fmt.Sprintf("%.1f", float64(lg.shed.Load())/secs), strconv.FormatInt(lg.other.Load(), 10),
		ms(p50), ms(p99), ms(*floor), fmt.Sprintf("%.2f", float64(p99)/float64(*floor)), strconv.FormatInt(peak, 10)}
	if limitEnd < 0 || len(limits) == 0 {
		row = append(row, "-", "-", "-", "-")
	} else {
		slices.Sort(limits)
		row = append(row, fmt.Sprintf("%g", limitEnd), fmt.Sprintf("%g", limits[(len(limits)-1)/2]),
			fmt.Sprintf("%g", limits[0]), fmt.Sprintf("%g", limits[len(limits)-1]))
	}
	fmt.Println(strings.Join(row, "\t"))
}

// upstream is the application with a knee. Safe for concurrent use.
type upstream struct {
	floor time.Duration
	knee  int64

	inflight atomic.Int64

	mu sync.Mutex
	// from and end bound the arrivals measured (none before measure sets them).
	from, end time.Time
	svc       []time.Duration // service times of the arrivals measured
	peak      int64           // the most in flight at a measured arrival
}

// measure sets the window of arrivals measured.
func (u *upstream) measure(from, end time.Time) {
	u.mu.Lock()
	u.from, u.end = from, end
	u.mu.Unlock()
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	arrived := time.Now()
	n := u.inflight.Add(1)
	defer u.inflight.Add(-1)
	// floor × max(1, n/knee) in integer nanoseconds, n/knee not rounded down: rounding it
	// would make the latency a staircase of whole floors, flat from the knee to twice it.
	time.Sleep(u.floor * time.Duration(max(n, u.knee)) / time.Duration(u.knee))
	_, _ = io.WriteString(w, "ok\n")
	served := time.Since(arrived)
	u.mu.Lock()
	defer u.mu.Unlock()
	if !arrived.Before(u.from) && arrived.Before(u.end) {
		u.svc = append(u.svc, served)
		u.peak = max(u.peak, n)
	}
}

// results returns the measured service times, sorted, and the peak in flight.
func (u *upstream) results() ([]time.Duration, int64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	slices.Sort(u.svc)
	return u.svc, u.peak
}

// load is the closed-loop clients' shared state; the counts are of responses finished inside
// [from, end).
type load struct {
	target    string
	backoff   time.Duration
	from, end time.Time
	client    *http.Client

	ok, shed, other atomic.Int64
}

// client1 is one client: a request, and the next as soon as it is answered (after a shed
// one, a back-off), until end.
func (l *load) client1() {
	for time.Now().Before(l.end) {
		code, retryAfter := l.get()
		done := time.Now()
		measured := !done.Before(l.from) && done.Before(l.end)
		switch {
		case code == http.StatusOK:
			if measured {
				l.ok.Add(1)
			}
			continue
		case code == http.StatusServiceUnavailable:
			if measured {
				l.shed.Add(1)
			}
		case measured:
			l.other.Add(1)
		}
		// Retry-After, capped so that the shed clients keep pressing on the limit (and a
		// failure's back-off is the cap, so that nothing spins).
		wait := l.backoff
		if retryAfter >= 0 {
			wait = min(wait, retryAfter)
		}
		time.Sleep(wait)
	}
}

// get sends one request: its status (0 when it failed) and Retry-After (-1: none, or not in
// seconds).
func (l *load) get() (int, time.Duration) {
	resp, err := l.client.Get(l.target)
	if err != nil {
		return 0, -1
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	ra := time.Duration(-1)
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s >= 0 {
		ra = time.Duration(s) * time.Second
	}
	return resp.StatusCode, ra
}

// admin reads the sidecar's /readyz and /metrics.
var admin = &http.Client{Timeout: 5 * time.Second}

// readyTimeout is how long the sidecar may take to be ready.
const readyTimeout = 10 * time.Second

// waitReady polls url until it answers 200, for at most readyTimeout.
func waitReady(url string) error {
	deadline := time.Now().Add(readyTimeout)
	for {
		resp, err := admin.Get(url)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %v: %w", url, readyTimeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// sampleLimit reads series from url every period from from until end: the samples, and the
// value read at end (-1 when it could not be read). A sample that fails is left out.
func sampleLimit(url, series string, period time.Duration, from, end time.Time) ([]float64, float64) {
	time.Sleep(time.Until(from))
	var samples []float64
	t := time.NewTicker(period)
	defer t.Stop()
	for now := time.Now(); now.Before(end); now = <-t.C {
		if v, err := scrape(url, series); err == nil {
			samples = append(samples, v)
		} else {
			log.Printf("reading %s: %v", series, err)
		}
	}
	v, err := scrape(url, series)
	if err != nil {
		log.Printf("reading %s at the end: %v", series, err)
		return samples, -1
	}
	return samples, v
}

// scrape returns series' value in the Prometheus text exposition at url.
func scrape(url, series string) (float64, error) {
	resp, err := admin.Get(url)
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return 0, errors.New(resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("no series %s", series)
}

// percentile is the nearest-rank p-th percentile of sorted (0 when empty).
func percentile(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := (len(sorted)*p + 99) / 100
	return sorted[max(i-1, 0)]
}
