package proxy_test

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/sluice-dev/sluice/internal/dataplane/breaker"
	"github.com/sluice-dev/sluice/internal/dataplane/config"
	"github.com/sluice-dev/sluice/internal/dataplane/decide"
	"github.com/sluice-dev/sluice/internal/dataplane/metrics"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/limiter/lease"
	"github.com/sluice-dev/sluice/internal/limiter/redisstore"
	"github.com/sluice-dev/sluice/internal/testutil/redisserver"
	"github.com/sluice-dev/sluice/internal/testutil/sidecartest"
	"github.com/sluice-dev/sluice/sidecar/proxy"
)

// env is a sidecar handler in front of an httptest upstream, deciding with a real redis-server.
type env struct {
	t       *testing.T
	up      *httptest.Server
	hits    atomic.Int64
	mu      sync.Mutex
	clock   *clocktesting.FakeClock // envOpt.clock
	arrived []time.Time             // when the upstream saw each request, on clock if set
	redis   *redisserver.TestServer
	vol     *sidecartest.AtomicDir
	loader  *config.Loader
	m       *metrics.Metrics
	brk     *breaker.Breaker
	leases  *lease.Engine
	trans   atomic.Int64 // breaker transitions
	srv     *testServer
	client  *http.Client
}

// testServer is a proxy.Server listening on a loopback port.
type testServer struct {
	URL string
}

// serve starts a proxy.Server for h on a free loopback port, shut down when t ends.
func serve(t *testing.T, h *proxy.Handler, log *slog.Logger) *testServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := proxy.NewServer(h, proxy.ServerOptions{Log: log})
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return &testServer{URL: "http://" + ln.Addr().String()}
}

type envOpt struct {
	noRedis  bool
	watch    bool // run the loader's watch loop (file events only: the re-check is an hour)
	cooldown time.Duration
	// timeout is the Redis store's budget: generousTimeout unless set. Only tests of what a hung
	// Redis does set a short one; any other test with a short budget would see a loaded
	// machine turn a Redis decision into a local one, a counter of its own.
	timeout time.Duration
	// clock, when set, is the handler's clock, and Redis decides at its instants (explicit
	// time) rather than at the server's.
	clock *clocktesting.FakeClock
	// upstream, when set, answers instead of env.upstream.
	upstream http.HandlerFunc
}

func newEnv(t *testing.T, doc []byte, o envOpt) *env {
	t.Helper()
	e := &env{t: t, m: metrics.New(), clock: o.clock}
	up := http.HandlerFunc(e.upstream)
	if o.upstream != nil {
		up = o.upstream
	}
	e.up = httptest.NewServer(up)
	t.Cleanup(e.up.Close)
	e.vol = sidecartest.NewAtomicDir(t)
	if doc != nil {
		e.vol.Write(t, map[string][]byte{"policies.json": doc})
	}
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	e.loader = config.NewLoader(e.vol.Path("policies.json"), "", map[string]string{"app": "test"}, e.m, log)
	if err := e.loader.Load(); err != nil {
		t.Fatal(err)
	}
	if o.watch {
		e.loader.Recheck = time.Hour
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { _ = e.loader.Run(ctx); close(done) }()
		t.Cleanup(func() { cancel(); <-done })
	}
	target, _ := url.Parse(e.up.URL)
	opts := proxy.Options{
		Upstream: target,
		Config:   e.loader.Current,
		Metrics:  e.m,
		Log:      log,
	}
	do := decide.Options{Local: limiter.NewMemoryStore(limiter.MemoryStoreOptions{}), Metrics: e.m, Log: log}
	if o.clock != nil {
		opts.Clock = o.clock
		do.Clock = o.clock
	}
	if !o.noRedis {
		e.redis = redisserver.StartTest(t)
		client, err := redisstore.NewClientFromURL(e.redis.URL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = client.Close() })
		ro := redisstore.Options{Timeout: cmp(o.timeout, generousTimeout), ExplicitTime: o.clock != nil}
		store := redisstore.New(client, ro)
		t.Cleanup(func() { _ = store.Close() })
		do.Remote = store
		e.leases = lease.New(store, lease.Options{})
		do.Leases = e.leases
		cd := cmp(o.cooldown, 100*time.Millisecond)
		e.brk = breaker.New(breaker.Options{Cooldown: cd, MaxCooldown: 4 * cd,
			OnTransition: func(_, to breaker.State, _ time.Duration) {
				e.m.BreakerState.Set(float64(to))
				e.trans.Add(1)
			}})
		do.Breaker = e.brk
	}
	opts.Decider = decide.New(do)
	e.srv = serve(t, proxy.New(opts), log)
	e.client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	t.Cleanup(e.client.CloseIdleConnections)
	return e
}

func cmp(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

func (e *env) upstream(w http.ResponseWriter, r *http.Request) {
	e.hits.Add(1)
	e.mu.Lock()
	at := time.Now()
	if e.clock != nil {
		at = e.clock.Now()
	}
	e.arrived = append(e.arrived, at)
	e.mu.Unlock()
	switch r.URL.Path {
	case "/ws":
		if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
			http.Error(w, "no upgrade", 400)
			return
		}
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		_ = brw.Flush()
		line, _ := brw.ReadString('\n')
		_, _ = brw.WriteString("echo:" + line)
		_ = brw.Flush()
		return
	case "/stream":
		fl := http.NewResponseController(w)
		for i := 0; i < 3; i++ {
			_, _ = io.WriteString(w, "chunk\n")
			_ = fl.Flush()
		}
		return
	case "/echo":
		_, _ = io.Copy(w, r.Body)
		return
	}
	if code, ok := strings.CutPrefix(r.URL.Path, "/status/"); ok { // answers with that status
		n, _ := strconv.Atoi(code)
		w.WriteHeader(n)
		_, _ = io.WriteString(w, "status "+code)
		return
	}
	w.Header().Set("X-Upstream-Xff", r.Header.Get("X-Forwarded-For"))
	_, _ = io.WriteString(w, "ok")
}

// arrivals returns when the upstream saw each request so far.
func (e *env) arrivals() []time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.arrived)
}

// do sends a request and returns the response with its body read.
func (e *env) do(method, path string, hdr map[string]string) (*http.Response, string) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+path, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	return resp, string(b)
}

// codes sends n requests and returns their status codes.
func (e *env) codes(n int, path string, hdr map[string]string) []int {
	e.t.Helper()
	out := make([]int, n)
	for i := range out {
		resp, _ := e.do("GET", path, hdr)
		out[i] = resp.StatusCode
	}
	return out
}

// redisErrors is how many Redis calls of the env failed so far (sluice_redis_errors_total, every
// kind). A call that failed on a loaded machine (a timeout) has an unknown outcome, so a count
// that spans one proves nothing either way: tests repeat such a round rather than assert on it.
func (e *env) redisErrors() float64 {
	var n float64
	for _, kind := range []string{"timeout", "Unavailable", "late_charge"} {
		n += e.m.RedisErrors.WithLabelValues(kind).Value()
	}
	return n
}

// inconclusiveRounds bounds how many rounds in a row a test repeats because a Redis call
// failed in them: a machine that loaded is a hang's worth, not a verdict.
const inconclusiveRounds = 20

func count(codes []int, code int) int {
	n := 0
	for _, c := range codes {
		if c == code {
			n++
		}
	}
	return n
}

func (e *env) counter(policy, rule, decision string) float64 {
	r := e.m.ForRule(policy, rule)
	switch decision {
	case metrics.Allowed:
		return r.Allowed.Value()
	case metrics.Denied:
		return r.Denied.Value()
	case metrics.NotCharged:
		return r.NotCharged.Value()
	default:
		return r.ShadowDenied.Value()
	}
}

// load runs workers sending requests until stop is closed, each with headers hdr(i), and
// counts answers by status. Transport errors are counted as status 0.
type load struct {
	stop  chan struct{}
	wg    sync.WaitGroup
	mu    sync.Mutex
	codes map[int]int
}

func (e *env) startLoad(workers int, path string, hdr func(worker int) map[string]string) *load {
	l := &load{stop: make(chan struct{}), codes: map[int]int{}}
	for w := 0; w < workers; w++ {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				req, _ := http.NewRequest("GET", e.srv.URL+path, nil)
				for k, v := range hdr(w) {
					req.Header.Set(k, v)
				}
				code := 0
				resp, err := e.client.Do(req)
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
					code = resp.StatusCode
				}
				l.mu.Lock()
				l.codes[code]++
				l.mu.Unlock()
			}
		}()
	}
	return l
}

func (l *load) snapshot() map[int]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[int]int{}
	for k, v := range l.codes {
		out[k] = v
	}
	return out
}

func (l *load) end() map[int]int {
	close(l.stop)
	l.wg.Wait()
	return l.snapshot()
}

// rawUpgrade dials the sidecar and performs an Upgrade handshake by hand, returning the
// connection after the 101.
func rawUpgrade(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	_, _ = io.WriteString(conn, "GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade answered %d", resp.StatusCode)
	}
	return conn, br
}

// generousTimeout is the Redis budget of tests that are not about timeouts (the default): a
// bound on a hang, so that a loaded machine running -race never turns a Redis decision into a
// local one (a counter of its own, which would admit past a limit the test counts).
const generousTimeout = 30 * time.Second

// hungTimeout is the Redis budget of tests that pause Redis (SIGSTOP) and wait for decisions to
// time out: short, so that they fall back quickly.
const hungTimeout = 50 * time.Millisecond
