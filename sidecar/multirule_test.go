package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/testutil/proc"
	"github.com/sluice-dev/sluice/internal/testutil/redisserver"
	st "github.com/sluice-dev/sluice/internal/testutil/sidecartest"
)

// TestMultiRuleRequestChargesNothingWhenDenied is issue 21's scenario through the built
// sidecar: per-ip (5 an hour on the client IP) and per-key (2 an hour on X-API-Key). From one
// IP, key A sends 4 (2 admitted, 2 denied by per-key, charging per-ip nothing), then key B
// gets exactly 2 of 3 (per-ip at 4 of 5, then per-key denies). Once against Redis, once with
// Redis killed before the first request (the Local failure mode's shares).
func TestMultiRuleRequestChargesNothingWhenDenied(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	for _, redisDown := range []bool{false, true} {
		t.Run(map[bool]string{false: "redis", true: "redis-killed"}[redisDown], func(t *testing.T) {
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				_, _ = io.WriteString(w, "ok")
			}))
			defer up.Close()
			fixed := func(r *policy.Rule) { r.Algorithm, r.Burst = "FixedWindow", 0 }
			doc := st.Doc(t, st.Policy("api", []policy.Rule{
				st.Rule("per-ip", 5, time.Hour, fixed),
				st.Rule("per-key", 2, time.Hour, fixed, func(r *policy.Rule) {
					r.Key = []policy.KeyPart{{Source: policy.SourceHeader, Name: "X-API-Key"}}
				}),
			}, func(p *policy.Policy) { p.Selector.MatchLabels = map[string]string{"app": "multi"} }))
			redis := redisserver.StartTest(t)
			s := startSidecarDoc(t, up.URL, doc, "app=multi", redis.URL())
			if redisDown {
				redis.Kill()
			}
			send := func(key string) (int, string) {
				t.Helper()
				req, _ := http.NewRequest("GET", s.URL()+"/", nil)
				req.Header.Set("X-API-Key", key)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(b)
			}
			var codes []int
			for range 4 {
				code, body := send("A")
				codes = append(codes, code)
				if code == 429 && !strings.HasSuffix(body, `"policy":"api","rule":"per-key"}`) {
					t.Errorf("key A denied by %s, want per-key", body)
				}
			}
			if fmt.Sprint(codes) != "[200 200 429 429]" {
				t.Errorf("key A: %v, want 2 admitted then 2 denied", codes)
			}
			codes = codes[:0]
			for range 3 {
				code, _ := send("B")
				codes = append(codes, code)
			}
			if fmt.Sprint(codes) != "[200 200 429]" {
				t.Errorf("key B from the same IP: %v, want exactly 2 of 3", codes)
			}
			// per-ip is now at 4 of 5: a fresh key gets exactly one more.
			codes = codes[:0]
			for range 2 {
				code, body := send("C")
				codes = append(codes, code)
				if code == 429 && !strings.HasSuffix(body, `"policy":"api","rule":"per-ip"}`) {
					t.Errorf("key C denied by %s, want per-ip", body)
				}
			}
			if fmt.Sprint(codes) != "[200 429]" {
				t.Errorf("key C: %v, want 1 admitted then denied by per-ip", codes)
			}
			m := scrape(t, "http://"+s.Admin+"/metrics")
			for _, want := range []string{
				`sluice_requests_total{decision="allowed",policy="api",rule="per-ip"} 5`,
				`sluice_requests_total{decision="not_charged",policy="api",rule="per-ip"} 3`,
				`sluice_requests_total{decision="denied",policy="api",rule="per-ip"} 1`,
				`sluice_requests_total{decision="denied",policy="api",rule="per-key"} 3`,
				`sluice_requests_total{decision="not_charged",policy="api",rule="per-key"} 1`,
			} {
				if !strings.Contains(m, want) {
					t.Errorf("metrics lack %s", want)
				}
			}
			// Without Redis every request's two rules were decided locally.
			if want := `sluice_fallback_decisions_total{mode="local",policy="api"} 18`; redisDown && !strings.Contains(m, want) {
				t.Errorf("metrics lack %s:\n%s", want, grepLines(m, "sluice_fallback"))
			}
		})
	}
}

// startSidecarDoc starts the binary in front of upstream with the policy document doc, the pod
// labels labels and Redis at redisURL, and waits for /readyz. Its Redis budget is a generous
// 10 s unless extra sets --redis-timeout (the last one given counts): a test that is not about
// timeouts must not see a loaded machine turn a Redis decision into a local one.
func startSidecarDoc(t *testing.T, upstream string, doc []byte, labels, redisURL string, extra ...string) *sidecar {
	t.Helper()
	bin := sidecarBinary(t)
	cfg := filepath.Join(t.TempDir(), "policies.json")
	if err := os.WriteFile(cfg, doc, 0o600); err != nil {
		t.Fatal(err)
	}
	s := &sidecar{Addr: freeLoopback(t), Admin: freeLoopback(t), logs: &lockedBuffer{}}
	args := append([]string{
		"--listen", s.Addr, "--metrics-listen", s.Admin, "--upstream", upstream, "--config", cfg,
		"--pod-labels-file", "", "--pod-labels", labels, "--redis-url", redisURL, "--redis-timeout", "10s",
	}, extra...)
	s.cmd = proc.Own(exec.Command(bin, args...))
	s.cmd.Stdout, s.cmd.Stderr = s.logs, s.logs
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
		if t.Failed() {
			t.Logf("sidecar log:\n%s", s.Logs())
		}
	})
	st.Eventually(t, func() error {
		resp, err := http.Get("http://" + s.Admin + "/readyz")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("readyz %d", resp.StatusCode)
		}
		return nil
	})
	return s
}

func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
