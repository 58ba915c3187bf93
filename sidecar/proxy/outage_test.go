package proxy_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/dataplane/breaker"
	"github.com/sluice-dev/sluice/internal/policy"
	st "github.com/sluice-dev/sluice/internal/testutil/sidecartest"
)

// TestRedisOutage kills (SIGKILL) or pauses (SIGSTOP) Redis under load and checks each failure
// mode: Local and Open answer no 5xx, Local admits exactly this pod's share, Closed answers
// 503; and the sidecar goes back to Redis by itself when Redis returns.
func TestRedisOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and stops redis-server")
	}
	const limit, replicas = 40, 4 // local share 10
	for _, mode := range []policy.FailureMode{policy.FailureLocal, policy.FailureOpen, policy.FailureClosed} {
		for _, how := range []string{"kill", "pause"} {
			t.Run(string(mode)+"/"+how, func(t *testing.T) {
				doc := st.Doc(t, st.Policy("api", []policy.Rule{st.Rule("per-phase", limit, time.Hour, func(r *policy.Rule) {
					r.Key = []policy.KeyPart{{Source: policy.SourceHeader, Name: "X-Phase"}}
				})}, func(p *policy.Policy) {
					p.Replicas, p.FailureMode = replicas, mode
				}))
				e := newEnv(t, doc, envOpt{cooldown: 100 * time.Millisecond, timeout: hungTimeout})
				phase := func(p string) func(int) map[string]string {
					return func(int) map[string]string { return map[string]string{"X-Phase": p} }
				}
				background := e.startLoad(4, "/", phase("background"))
				waitRequests(t, background, 100)

				start := time.Now()
				if how == "kill" {
					e.redis.Kill()
				} else {
					e.redis.Pause()
				}
				outage := e.startLoad(4, "/", phase("outage"))
				st.Eventually(t, func() error {
					if s := e.brk.State(); s != breaker.Open {
						return fmt.Errorf("breaker %s", s)
					}
					return nil
				})
				t.Logf("breaker open %s after the %s", time.Since(start).Round(time.Millisecond), how)
				waitRequests(t, outage, 300)
				// Let probes fail: open, half-open, open, half-open, open.
				opened := e.trans.Load()
				st.Eventually(t, func() error {
					if n := e.trans.Load() - opened; n < 4 {
						return fmt.Errorf("%d transitions since open", n)
					}
					return nil
				})
				during := outage.end()

				back := time.Now()
				if how == "kill" {
					e.redis.Restart()
				} else {
					e.redis.Resume()
				}
				st.Eventually(t, func() error {
					if s := e.brk.State(); s != breaker.Closed {
						return fmt.Errorf("breaker %s", s)
					}
					return nil
				})
				t.Logf("back on Redis %s after it returned", time.Since(back).Round(time.Millisecond))
				bg := background.end()
				t.Logf("outage answers %v; background answers %v", during, bg)

				switch mode {
				case "Local":
					if during[200] != limit/replicas {
						t.Errorf("admitted %d during the outage, want the local share %d", during[200], limit/replicas)
					}
				case "Open":
					if during[200] != sum(during) {
						t.Errorf("outage answers %v, want all admitted", during)
					}
				case "Closed":
					if during[503] != sum(during) {
						t.Errorf("outage answers %v, want all 503", during)
					}
				}
				if mode != "Closed" {
					for _, m := range []map[int]int{during, bg} {
						for code, n := range m {
							if code == 0 || code >= 500 {
								t.Errorf("%d answers %d (0 = transport error): %v", n, code, m)
							}
						}
					}
				}
				// Back on Redis: the full shared limit applies again to a fresh key. A round in
				// which a request was not decided in Redis (a loaded machine can time a call out,
				// and failed calls open the breaker, which sends the next round's requests to the
				// failure mode without calling Redis) proves nothing and is repeated on another
				// key; a round without one must be exact.
				fb := e.m.ForPolicy("api")
				undecided := func() float64 {
					return e.redisErrors() + fb.Local.Value() + fb.Open.Value() + fb.Closed.Value()
				}
				for round := 0; ; round++ {
					before := undecided()
					codes := e.codes(limit+1, "/", map[string]string{"X-Phase": fmt.Sprintf("after-%d", round)})
					if failed := undecided() - before; failed > 0 {
						if round == inconclusiveRounds {
							t.Fatalf("after the outage: %d rounds in a row had a request Redis did not decide", round+1)
						}
						t.Logf("after the outage, round %d: %.0f failed Redis calls and failure-mode decisions; another round", round, failed)
						continue
					}
					if count(codes, 200) != limit || codes[limit] != 429 {
						t.Errorf("after the outage: %d admitted of %d, want %d then 429", count(codes, 200), limit+1, limit)
					}
					break
				}
			})
		}
	}
}
