package proxy_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/dataplane/breaker"
	"github.com/sluice-dev/sluice/internal/policy"
	st "github.com/sluice-dev/sluice/internal/testutil/sidecartest"
)

// TestCountWhenCountsOnlyMatchingResponses runs a login limit that counts only failures
// through the proxy, Redis and a real upstream answering with the statuses asked for: any
// number of successes pass uncounted, the failures count, and once the limit's failures have
// been seen every request is denied, a success included.
func TestCountWhenCountsOnlyMatchingResponses(t *testing.T) {
	for _, alg := range []string{"FixedWindow", "TokenBucket"} {
		for _, redis := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s redis=%v", alg, redis), func(t *testing.T) {
				rule := st.Rule("login-failures", 3, time.Hour, func(r *policy.Rule) {
					r.Algorithm = alg
					if alg == "FixedWindow" {
						r.Burst = 0
					}
					r.CountWhen = []policy.StatusRange{{Lo: 401, Hi: 401}, {Lo: 403, Hi: 403}, {Lo: 500, Hi: 599}}
				})
				e := newEnv(t, st.Doc(t, st.Policy("auth", []policy.Rule{rule})), envOpt{noRedis: !redis})
				steps := []struct {
					path string
					code int
				}{
					{"/status/200", 200}, {"/status/200", 200}, {"/status/200", 200}, {"/status/200", 200},
					{"/status/404", 404}, {"/status/429", 429}, // not listed: not counted
					{"/status/401", 401}, {"/status/200", 200}, {"/status/503", 503}, {"/status/200", 200},
					{"/status/403", 403}, // the third failure
					{"/status/200", 429}, {"/status/401", 429},
				}
				for i, s := range steps {
					resp, body := e.do("POST", s.path, nil)
					if resp.StatusCode != s.code {
						t.Fatalf("step %d %s: status %d, want %d: %s", i, s.path, resp.StatusCode, s.code, body)
					}
				}
				if got := e.hits.Load(); got != int64(len(steps)-2) {
					t.Errorf("upstream saw %d requests, want %d", got, len(steps)-2)
				}
			})
		}
	}
}

// TestCountWhenDuringAnOutageChargesRedisOnlyWhatCounted: requests a countWhen rule admitted on
// the local share while Redis was down go to Redis once it is back only if their responses
// counted (one 401 among the 200s): the check at admission charged nothing.
func TestCountWhenDuringAnOutageChargesRedisOnlyWhatCounted(t *testing.T) {
	if testing.Short() {
		t.Skip("stops and restarts redis-server")
	}
	rule := st.Rule("login-failures", 100, time.Hour, func(r *policy.Rule) {
		r.Algorithm, r.Burst = "FixedWindow", 0
		r.CountWhen = []policy.StatusRange{{Lo: 401, Hi: 401}}
	})
	e := newEnv(t, st.Doc(t, st.Policy("auth", []policy.Rule{rule})), envOpt{cooldown: 50 * time.Millisecond, timeout: 2 * time.Second})
	e.redis.Kill()
	for _, path := range []string{"/status/200", "/status/401", "/status/200"} {
		if resp, body := e.do("POST", path, nil); resp.StatusCode != 200 && resp.StatusCode != 401 {
			t.Fatalf("%s during the outage: %d %s", path, resp.StatusCode, body)
		}
	}
	e.redis.Restart()
	charged := e.m.OutageUnits.WithLabelValues("charged")
	st.Eventually(t, func() error {
		e.do("POST", "/status/200", nil) // not counted, wherever it is decided
		if s := e.brk.State(); s != breaker.Closed {
			return fmt.Errorf("breaker %s", s)
		}
		if got := charged.Value(); got != 1 {
			return fmt.Errorf("%v units charged to Redis, want the one 401", got)
		}
		return nil
	})
}
