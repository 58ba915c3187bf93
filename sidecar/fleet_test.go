package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/inject"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/testutil/proc"
	"github.com/sluice-dev/sluice/internal/testutil/redisserver"
	st "github.com/sluice-dev/sluice/internal/testutil/sidecartest"
)

// TestFaultFleetSharesHoldTheLimit runs a fleet of four sidecar binaries, each told its pod's name
// as the webhook tells it (SLUICE_POD_NAME), behind a policy that lists the four pods as the
// controller renders them, and a fifth whose pod the file does not know yet. With Redis killed
// every sidecar decides with its share: the fleet admits exactly the limit of each rule (6 as
// 2,2,1,1 and 2 as 1,1,0,0), the new pod admits nothing, and every other answer is a 429,
// never a 5xx: with a Retry-After from a pod that holds a share, without one (and the reason
// in the body) from a pod that holds none, since no wait lets the request pass there.
func TestFaultFleetSharesHoldTheLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "sluice-sidecar")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	redis := redisserver.StartTest(t)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }))
	defer up.Close()

	pods := []string{"web-a", "web-b", "web-c", "web-d"}
	hourly := func(name string, limit int64, prefix string) policy.Rule {
		return st.Rule(name, limit, time.Hour, func(r *policy.Rule) { r.Match = &policy.Match{PathPrefix: prefix} })
	}
	vol := st.NewAtomicDir(t)
	vol.Write(t, map[string][]byte{policy.DataKey: st.Doc(t, st.Policy("api",
		[]policy.Rule{hourly("six", 6, "/six"), hourly("two", 2, "/two")},
		func(p *policy.Policy) { p.Replicas, p.Pods = int32(len(pods)), pods }))})

	redis.Kill()
	type sidecar struct{ pod, base, metrics string }
	var fleet []sidecar
	for _, pod := range append(pods, "web-new") {
		listen, metricsAddr := freeAddr(t), freeAddr(t)
		cmd := proc.Own(exec.Command(bin, "--listen", listen, "--metrics-listen", metricsAddr, "--upstream", up.URL,
			"--config", vol.Path(policy.DataKey), "--pod-labels-file", "",
			"--redis-url", redis.URL(), "--redis-timeout", "20ms", "--breaker-threshold", "1"))
		cmd.Env = append(cmd.Environ(), inject.EnvName(inject.FlagPodName)+"="+pod)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		fleet = append(fleet, sidecar{pod, "http://" + listen, metricsAddr})
	}
	for _, s := range fleet {
		st.Eventually(t, func() error {
			resp, err := http.Get("http://" + s.metrics + "/readyz")
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s: readyz %d", s.pod, resp.StatusCode)
			}
			return nil
		})
	}

	want := map[string][]int{"/six": {2, 2, 1, 1, 0}, "/two": {1, 1, 0, 0, 0}}
	for path, shares := range want {
		total := 0
		for i, s := range fleet {
			admitted := 0
			for range 5 { // more than any share
				resp, err := http.Get(s.base + path)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				switch ra := resp.Header.Get("Retry-After"); resp.StatusCode {
				case http.StatusOK:
					admitted++
				case http.StatusTooManyRequests:
					if shares[i] == 0 { // no wait lets a request pass here while Redis is down
						if ra != "" || !strings.Contains(string(body), `"reason":"no_local_share"`) ||
							resp.Header.Get("X-RateLimit-Remaining") != "0" {
							t.Errorf("%s %s, no share: Retry-After %q, remaining %q, body %s", s.pod, path, ra, resp.Header.Get("X-RateLimit-Remaining"), body)
						}
					} else if n, err := strconv.Atoi(ra); err != nil || n < 1 || n > 3600 {
						t.Errorf("%s %s: Retry-After %q, want 1..3600 seconds", s.pod, path, ra)
					}
				default:
					t.Errorf("%s %s: status %d, want 200 or 429", s.pod, path, resp.StatusCode)
				}
			}
			if admitted != shares[i] {
				t.Errorf("%s %s: admitted %d, want its share %d", s.pod, path, admitted, shares[i])
			}
			total += admitted
		}
		if limit := shares[0] + shares[1] + shares[2] + shares[3]; total != limit {
			t.Errorf("%s: the fleet admitted %d with Redis down, want the limit %d", path, total, limit)
		}
	}
}
