package proxy_test

import (
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/sluice-dev/sluice/internal/policy"
	st "github.com/sluice-dev/sluice/internal/testutil/sidecartest"
)

// TestAdaptiveLimitLearnsFromForwardedRequests: the forwarded requests' latency reaches the
// adaptive limit. On a fake clock every request answers at the floor's latency, so a round of
// limiter.MinRoundSamples (10) requests grows the limit from minLimit 4 by its square root, to
// 6, and not before the round ends; requests a rule denies are not forwarded and teach nothing.
func TestAdaptiveLimitLearnsFromForwardedRequests(t *testing.T) {
	doc := st.Doc(t, st.Policy("guard", []policy.Rule{st.Rule("per-client", 12, time.Hour), st.AdaptiveRule("app", 4, 1000)}))
	e := newEnv(t, doc, envOpt{noRedis: true, clock: clocktesting.NewFakeClock(time.Unix(1_770_249_600, 0))})
	limit, _ := e.m.Adaptive("guard", "app")
	if got := e.codes(9, "/", nil); count(got, 200) != 9 {
		t.Fatalf("codes %v, want 9 admitted", got)
	}
	if l := limit.Value(); l != 4 {
		t.Fatalf("limit %v after 9 requests, want minLimit 4 (the round is not over)", l)
	}
	e.codes(1, "/", nil)
	if l := limit.Value(); l != 6 {
		t.Fatalf("limit %v after a round of 10 at the floor, want 4 + isqrt(4) = 6", l)
	}
	// The rule admits 12: 2 more pass, then denials, which are not forwarded.
	if got := e.codes(12, "/", nil); count(got, 200) != 2 {
		t.Fatalf("codes %v, want 2 admitted", got)
	}
	if l := limit.Value(); l != 6 {
		t.Fatalf("limit %v, want 6: denied requests are no samples", l)
	}
}
