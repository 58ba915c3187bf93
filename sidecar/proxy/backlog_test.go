package proxy_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/dataplane/breaker"
	"github.com/sluice-dev/sluice/internal/policy"
	st "github.com/sluice-dev/sluice/internal/testutil/sidecartest"
)

// TestOutageUsageIsCharged: a key spends this pod's whole share while Redis is down; once the
// breaker closes the sidecar charges that usage to Redis, so the shared limit has at most
// limit - spent left for the key, whether Redis came back empty (killed and restarted without
// persistence) or with its state (paused, then resumed: the usage before the outage counts too).
func TestOutageUsageIsCharged(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and stops redis-server")
	}
	const limit, replicas, share = 40, 4, 10
	for _, how := range []string{"restarted empty", "unreachable"} {
		t.Run(how, func(t *testing.T) {
			// One attempt on a fresh env. It is inconclusive (false) when a Redis call failed
			// while Redis was up (a loaded machine can time one out, and its outcome is
			// unknown): then it is repeated; a conclusive attempt must be exact.
			attempt := func() bool {
				doc := st.Doc(t, st.Policy("api", []policy.Rule{st.Rule("per-client", limit, time.Hour, func(r *policy.Rule) {
					r.Key = []policy.KeyPart{{Source: policy.SourceHeader, Name: "X-Client"}}
				})}, func(p *policy.Policy) { p.Replicas = replicas }))
				e := newEnv(t, doc, envOpt{cooldown: 100 * time.Millisecond, timeout: hungTimeout})
				client := map[string]string{"X-Client": "spender"}
				probe := map[string]string{"X-Client": "probe"}

				before := 0 // units the key spent in Redis before the outage, still there after it
				if how == "unreachable" {
					before = 5
					errs := e.redisErrors()
					if got := count(e.codes(before, "/", client), 200); got != before {
						t.Fatalf("%d of %d admitted before the outage", got, before)
					}
					if e.redisErrors() != errs {
						return false
					}
					e.redis.Pause()
				} else {
					e.redis.Kill()
				}
				st.Eventually(t, func() error {
					e.codes(1, "/", probe)
					if s := e.brk.State(); s != breaker.Open {
						return fmt.Errorf("breaker %s", s)
					}
					return nil
				})
				spent := count(e.codes(2*share, "/", client), 200)
				if spent != share {
					t.Fatalf("%d admitted during the outage, want the share %d", spent, share)
				}

				if how == "unreachable" {
					e.redis.Resume()
				} else {
					e.redis.Restart()
				}
				charged := e.m.OutageUnits.WithLabelValues("charged")
				st.Eventually(t, func() error {
					e.codes(1, "/", probe) // the probe closes the breaker, its success starts the flush
					if s := e.brk.State(); s != breaker.Closed {
						return fmt.Errorf("breaker %s", s)
					}
					// The probe key's own local admissions are charged too, once.
					if got := charged.Value(); got < float64(spent) {
						return fmt.Errorf("%v units charged, want at least %d", got, spent)
					}
					return nil
				})

				errs := e.redisErrors()
				codes := e.codes(limit+1, "/", client)
				if e.redisErrors() != errs {
					return false
				}
				left := count(codes, 200)
				t.Logf("%d spent before, %d during the outage; %d left after it; outage units %v charged, %v expired, %v dropped",
					before, spent, left, charged.Value(),
					e.m.OutageUnits.WithLabelValues("expired").Value(), e.m.OutageUnits.WithLabelValues("dropped").Value())
				if left > limit-spent {
					t.Errorf("%d admitted after the outage, more than limit - spent = %d", left, limit-spent)
				}
				if want := limit - before - spent; left != want {
					t.Errorf("%d admitted after the outage, want limit - before - spent = %d", left, want)
				}
				return true
			}
			for round := 0; !attempt(); round++ {
				if round == inconclusiveRounds {
					t.Fatalf("%d attempts in a row had a failed Redis call while Redis was up", round+1)
				}
				t.Logf("attempt %d: a Redis call failed while Redis was up; another attempt", round)
			}
		})
	}
}
