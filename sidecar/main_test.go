package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/inject"
	"github.com/sluice-dev/sluice/internal/limiter/redisstore"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/testutil/proc"
	"github.com/sluice-dev/sluice/internal/testutil/redisserver"
	st "github.com/sluice-dev/sluice/internal/testutil/sidecartest"
)

// TestBinary builds sluice-sidecar, starts it with flags and environment variables the way the
// webhook would, and checks it end to end: limiting through Redis, h2c, hot reload of a
// kubelet-style volume, labels file selection, /metrics, /readyz, and a SIGTERM that drains an
// in-flight request and exits 0.
func TestBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := sidecarBinary(t)
	redis := redisserver.StartTest(t)
	// The webhook passes the password in SLUICE_REDIS_PASSWORD, never in the URL.
	if _, err := redis.Do("CONFIG", "SET", "requirepass", "s3cret"); err != nil {
		t.Fatal(err)
	}

	var hits atomic.Int64
	release, slowArrived := make(chan struct{}), make(chan struct{}, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.URL.Path == "/slow" {
			slowArrived <- struct{}{}
			<-release
		}
		_, _ = fmt.Fprintf(w, "proto=%s", r.Proto)
	}))
	defer up.Close()

	vol := st.NewAtomicDir(t)
	podinfo := st.NewAtomicDir(t)
	limited := st.Doc(t, st.Policy("api", []policy.Rule{st.Rule("per-client", 3, time.Hour)}, func(p *policy.Policy) {
		p.Selector.MatchLabels = map[string]string{"app": "checkout"}
	}))
	vol.Write(t, map[string][]byte{"policies.json": limited})
	podinfo.Write(t, map[string][]byte{"labels": []byte("app=\"checkout\"\npod-template-hash=\"abc\"\n")})

	listen, metricsAddr := freeAddr(t), freeAddr(t)
	cmd := proc.Own(exec.Command(bin,
		"--listen", listen,
		"--upstream", up.URL,
		"--config", vol.Path("policies.json"),
		"--pod-labels-file", podinfo.Path("labels"),
		"--redis-timeout", "10s", // not about timeouts: a loaded machine must not turn a decision local
	))
	cmd.Env = append(os.Environ(), "SLUICE_REDIS_URL="+redis.URL(), "SLUICE_METRICS_LISTEN="+metricsAddr, inject.EnvRedisPassword+"=s3cret")
	logs, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var logText strings.Builder
	logDone := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(logs)
		for sc.Scan() {
			logText.WriteString(sc.Text() + "\n")
		}
		close(logDone)
	}()
	exited := make(chan error, 1)
	go func() { <-logDone; exited <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	base := "http://" + listen
	st.Eventually(t, func() error { // the race-built binary starts slowly beside other packages
		resp, err := http.Get("http://" + metricsAddr + "/readyz")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			b, _ := io.ReadAll(resp.Body)
			return fmt.Errorf("readyz %d %s", resp.StatusCode, b)
		}
		return nil
	})

	get := func(c *http.Client, path string) (int, string, http.Header) {
		t.Helper()
		resp, err := c.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header
	}
	var codes []int
	var lastBody string
	var lastHdr http.Header
	for range 4 {
		code, body, hdr := get(http.DefaultClient, "/")
		codes, lastBody, lastHdr = append(codes, code), body, hdr
	}
	if fmt.Sprint(codes) != "[200 200 200 429]" {
		t.Errorf("codes %v, want 3 admitted then 429", codes)
	}
	if !strings.HasPrefix(lastBody, `{"error":"rate_limit_exceeded","message":`) || !strings.HasSuffix(lastBody, `"policy":"api","rule":"per-client"}`) ||
		lastHdr.Get("Retry-After") != "1200" || lastHdr.Get("RateLimit") != `"per-client";r=0;t=1200` || lastHdr.Get("Content-Type") != "application/json" {
		t.Errorf("429 answer: %v %s", lastHdr, lastBody)
	}
	metricsBody := func() string {
		resp, err := http.Get("http://" + metricsAddr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	// Counted now: requests sent while the reload below is on its way may be denied too.
	if want := `sluice_requests_total{decision="denied",policy="api",rule="per-client"} 1`; !strings.Contains(metricsBody(), want) {
		t.Errorf("metrics lack %s", want)
	}
	// The limit lives in Redis under the sidecar's prefix.
	authed, err := redisstore.NewClientFromURL(strings.Replace(redis.URL(), "redis://", "redis://:s3cret@", 1))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = authed.Close() }()
	if keys, err := authed.Keys(t.Context(), "sluice:*").Result(); err != nil || len(keys) == 0 {
		t.Errorf("no sluice keys in Redis: %q %v", keys, err)
	}

	// h2c: prior-knowledge HTTP/2 over cleartext.
	h2c := &http.Client{Transport: &http.Transport{Protocols: h2cProtocols()}}
	vol.Write(t, map[string][]byte{"policies.json": st.Doc(t, st.Policy("api", []policy.Rule{st.Rule("per-client-v2", 1000, time.Hour)}, func(p *policy.Policy) {
		p.Selector.MatchLabels = map[string]string{"app": "checkout"}
	}))})
	st.Eventually(t, func() error {
		if code, _, _ := get(http.DefaultClient, "/"); code != 200 {
			return fmt.Errorf("still limited after the reload: %d", code)
		}
		return nil
	})
	code, body, hdr := get(h2c, "/")
	if code != 200 || body != "proto=HTTP/1.1" || hdr.Get("RateLimit-Policy") != `"per-client-v2";q=1000;w=3600` {
		t.Errorf("h2c: %d %q %v", code, body, hdr)
	}
	resp, err := h2c.Get(base + "/")
	if err != nil || resp.ProtoMajor != 2 {
		t.Errorf("h2c request served as %v (%v)", resp.Proto, err)
	} else {
		resp.Body.Close()
	}

	// The pod's labels change: the policy no longer selects it.
	podinfo.Write(t, map[string][]byte{"labels": []byte("app=\"cart\"\n")})
	st.Eventually(t, func() error {
		if _, _, h := get(http.DefaultClient, "/"); h.Get("RateLimit") != "" {
			return fmt.Errorf("still limited by a policy that no longer selects the pod")
		}
		return nil
	})

	m := metricsBody()
	for _, want := range []string{
		`sluice_config_generation 3`,
		`sluice_breaker_state 0`,
		`sluice_decision_duration_seconds_count`,
		`sluice_lease_store_calls_total 0`, // registered with Redis; no rule here is leased
		`sluice_leases_total 0`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}

	// SIGTERM with a request in flight: it completes, then the process exits 0.
	slow := make(chan error, 1)
	go func() {
		resp, err := http.Get(base + "/slow")
		if err == nil {
			_, err = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		slow <- err
	}()
	select {
	case <-slowArrived:
	case <-time.After(proc.Patience):
		t.Fatal("the slow request never reached the upstream")
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// Draining: not ready any more, the in-flight request still open.
	st.Eventually(t, func() error {
		resp, err := http.Get("http://" + metricsAddr + "/readyz")
		if err != nil {
			return nil // the admin listener may already be closed
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			return fmt.Errorf("readyz %d while draining", resp.StatusCode)
		}
		return nil
	})
	close(release)
	if err := <-slow; err != nil {
		t.Errorf("in-flight request during shutdown: %v", err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("exit: %v\n%s", err, logText.String())
		}
	case <-time.After(proc.Patience):
		t.Fatal("did not exit after SIGTERM")
	}
	for _, want := range []string{`"msg":"Loaded policies"`, `"msg":"Drained; exiting"`, `"generation":3`} {
		if !strings.Contains(logText.String(), want) {
			t.Errorf("log lacks %s:\n%s", want, logText.String())
		}
	}
}

func h2cProtocols() *http.Protocols {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &p
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestGCPercent: the sidecar collects at GOGC 50 unless the environment sets GOGC, which
// then wins (go_gc_gogc_percent reads the runtime's setting).
func TestGCPercent(t *testing.T) {
	up := newRawUpstream(t, func(*upstreamRequest) string { return "HTTP/1.1 204 No Content\r\n\r\n" })
	gogc := regexp.MustCompile(`(?m)^go_gc_gogc_percent (\S+)$`)
	for _, tc := range []struct{ env, want string }{{"", "50"}, {"100", "100"}} {
		t.Run("GOGC="+tc.env, func(t *testing.T) {
			t.Setenv("GOGC", tc.env)
			s := launchSidecar(t, up.URL(), filepath.Join(t.TempDir(), "absent.json"))
			m := gogc.FindStringSubmatch(scrape(t, "http://"+s.Admin+"/metrics"))
			if m == nil || m[1] != tc.want {
				t.Fatalf("go_gc_gogc_percent %v, want %s", m, tc.want)
			}
		})
	}
}
