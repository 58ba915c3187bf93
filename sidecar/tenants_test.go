package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/testutil/redisserver"
	st "github.com/sluice-dev/sluice/internal/testutil/sidecartest"
)

// tenantsDoc is a policy whose rule per-tenant, a SlidingWindowLog of 2 an hour keyed by
// X-Tenant (no window boundary a test could straddle), has a table of n tenants t00000.. with
// limit 1 + i%3, but for the limits in edits.
func tenantsDoc(t *testing.T, n int, edits map[string]int64) []byte {
	t.Helper()
	limits := make([]policy.TenantLimit, n)
	for i := range limits {
		limits[i] = policy.TenantLimit{Value: fmt.Sprintf("t%05d", i), Limit: tenantLimit(i)}
		if l, ok := edits[limits[i].Value]; ok {
			limits[i].Limit = l
		}
	}
	return st.Doc(t, st.Policy("api", []policy.Rule{st.Rule("per-tenant", 2, time.Hour, func(r *policy.Rule) {
		r.Algorithm, r.Burst = "SlidingWindowLog", 0
		r.Key = []policy.KeyPart{{Source: policy.SourceHeader, Name: "X-Tenant"}}
		r.Tenants = &policy.Tenants{Limits: limits}
	})}))
}

func tenantLimit(i int) int64 { return 1 + int64(i%3) }

// TestTenantTableThroughTheSidecar runs the sidecar binary with a table of 10,000 tenants, on
// Redis and on its local store (no Redis: its whole share, one pod): every tenant gets exactly
// its own limit, a tenant not in the table and a request without the header the rule's; then
// the table is edited (the sidecar reloads the file, as the kubelet swaps it) and the edited
// tenants get what docs/policy.md says a limit changed mid-window gives a SlidingWindowLog: a
// fresh tenant its new limit, one that used 2 of 2 and rises to 5 three more, one that used 3
// of 3 and drops to 1 none.
func TestTenantTableThroughTheSidecar(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and sends 30,000 requests a store")
	}
	const n = 10_000
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }))
	defer up.Close()
	for _, store := range []string{"redis", "local"} {
		t.Run(store, func(t *testing.T) {
			// Redis's timeout is a bound on a hang: a loaded machine must not turn decisions
			// into local ones (checked at the end).
			flags := []string{"--redis-url", ""}
			if store == "redis" {
				flags = []string{"--redis-url", redisserver.StartTest(t).URL(), "--redis-timeout", "30s"}
			}
			vol := st.NewAtomicDir(t)
			vol.Write(t, map[string][]byte{"policies.json": tenantsDoc(t, n, nil)})
			s := launchSidecar(t, up.URL, vol.Path("policies.json"), flags...)
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
			send := func(tenant string) int {
				req, _ := http.NewRequest("GET", s.URL()+"/", nil)
				if tenant != "" {
					req.Header.Set("X-Tenant", tenant)
				}
				resp, err := client.Do(req)
				if err != nil {
					t.Error(err)
					return 0
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				return resp.StatusCode
			}
			// admits sends until a request is denied and returns how many passed (at most
			// limit+1 are sent: one more than a correct sidecar admits).
			admits := func(tenant string, limit int64) int64 {
				for i := range limit + 1 {
					if code := send(tenant); code == http.StatusTooManyRequests {
						return i
					} else if code != http.StatusOK {
						t.Errorf("tenant %q: status %d", tenant, code)
						return -1
					}
				}
				return limit + 1
			}

			skip := map[string]bool{"t00007": true} // left fresh for the edit
			var (
				mu    sync.Mutex
				wrong []string
				wg    sync.WaitGroup
			)
			work := make(chan int)
			for range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range work {
						tenant, want := fmt.Sprintf("t%05d", i), tenantLimit(i)
						if got := admits(tenant, want); got != want {
							mu.Lock()
							wrong = append(wrong, fmt.Sprintf("%s: %d admitted, want %d", tenant, got, want))
							mu.Unlock()
						}
					}
				}()
			}
			for i := range n {
				if !skip[fmt.Sprintf("t%05d", i)] {
					work <- i
				}
			}
			close(work)
			wg.Wait()
			if len(wrong) > 0 {
				t.Fatalf("%d of %d tenants did not get their limit, e.g. %v", len(wrong), n, wrong[:min(5, len(wrong))])
			}
			if got := admits("nobody", 2); got != 2 {
				t.Errorf("a tenant not in the table: %d admitted, want the rule's 2", got)
			}
			if got := admits("", 2); got != 2 {
				t.Errorf("a request without X-Tenant: %d admitted, want the rule's 2", got)
			}

			generation := configGeneration(t, s)
			edits := map[string]int64{"t00007": 6, "t00004": 5, "t00005": 1}
			vol.Write(t, map[string][]byte{"policies.json": tenantsDoc(t, n, edits)})
			st.Eventually(t, func() error {
				if g := configGeneration(t, s); g <= generation {
					return fmt.Errorf("configuration generation %d: not reloaded yet", g)
				}
				return nil
			})
			for tenant, want := range map[string]int64{"t00007": 6, "t00004": 5 - 2, "t00005": 0} {
				if got := admits(tenant, want); got != want {
					t.Errorf("after the edit, %s: %d admitted, want %d", tenant, got, want)
				}
			}
			if m := scrape(t, "http://"+s.Admin+"/metrics"); store == "redis" && fallbacks.MatchString(m) {
				t.Errorf("some decisions were not Redis's:\n%s", grepLines(m, "sluice_fallback"))
			}
		})
	}
}

var (
	generationLine = regexp.MustCompile(`(?m)^sluice_config_generation (\d+)$`)
	fallbacks      = regexp.MustCompile(`(?m)^sluice_fallback_decisions_total\{.*\} [1-9]`)
)

// configGeneration is the sidecar's sluice_config_generation.
func configGeneration(t *testing.T, s *sidecar) int {
	t.Helper()
	m := generationLine.FindStringSubmatch(scrape(t, "http://"+s.Admin+"/metrics"))
	if m == nil {
		t.Fatal("no sluice_config_generation")
	}
	g, _ := strconv.Atoi(m[1])
	return g
}
