package config

import (
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/dataplane/metrics"
	"github.com/sluice-dev/sluice/internal/policy"
	st "github.com/sluice-dev/sluice/internal/testutil/sidecartest"
)

// A policy's adaptive limit (its learned limit, its requests in flight) outlives a reload that
// leaves its parameters alone, and is made anew when they change; a policy that drops it, or
// is gone, takes it along.
func TestAdaptivesSurviveReloads(t *testing.T) {
	m := metrics.New()
	doc := func(a *policy.Adaptive) *policy.Document {
		p := st.Policy("guard", []policy.Rule{st.Rule("rate", 10, time.Second)}, func(p *policy.Policy) { p.Adaptive = a })
		return &policy.Document{Version: policy.Version, Namespace: "ns", Policies: []policy.Policy{p}}
	}
	var vs Verifiers
	var as Adaptives
	compile := func(a *policy.Adaptive) *Adaptive {
		t.Helper()
		c, err := compileFor(doc(a), nil, "", m, &vs, &as)
		if err != nil {
			t.Fatal(err)
		}
		as.retain(c)
		return c.Policies[0].Adaptive
	}
	params := policy.Adaptive{MinLimit: 2, MaxLimit: 10, TolerancePct: 125}
	first := compile(&params)
	if !first.Acquire() {
		t.Fatal("the first request was shed")
	}
	if again := compile(&params); again != first || again.InFlight() != 1 {
		t.Fatalf("a reload with the same parameters made a new limit (in flight %d)", again.InFlight())
	}
	other := params
	other.MaxLimit = 20
	changed := compile(&other)
	if changed == first || changed.InFlight() != 0 {
		t.Fatal("new parameters kept the old limit")
	}
	if none := compile(nil); none != nil {
		t.Fatal("a policy without adaptiveConcurrency has a limit")
	}
	if back := compile(&other); back == changed {
		t.Fatal("a limit dropped by a reload came back")
	}
}
