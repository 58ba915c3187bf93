package config

import (
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/dataplane/metrics"
	"github.com/sluice-dev/sluice/internal/policy"
	st "github.com/sluice-dev/sluice/internal/testutil/sidecartest"
)

// An adaptive rule's limit (its learned limit, its requests in flight) outlives a reload that
// leaves its parameters alone, and is made anew when they change; a rule that is dropped, or
// whose policy is gone, takes it along. An adaptive rule is not among the rules decided.
func TestAdaptivesSurviveReloads(t *testing.T) {
	m := metrics.New()
	doc := func(r *policy.Rule) *policy.Document {
		rules := []policy.Rule{st.Rule("rate", 10, time.Second)}
		if r != nil {
			rules = append(rules, *r)
		}
		p := st.Policy("guard", rules)
		return &policy.Document{Version: policy.Version, Namespace: "ns", Policies: []policy.Policy{p}}
	}
	var vs Verifiers
	var as Adaptives
	compile := func(r *policy.Rule) *Adaptive {
		t.Helper()
		c, err := compileFor(doc(r), nil, "", m, &vs, &as)
		if err != nil {
			t.Fatal(err)
		}
		as.retain(c)
		if n := len(c.Policies[0].Rules); n != 1 {
			t.Fatalf("%d rules decided, want only the rate rule", n)
		}
		if len(c.Policies[0].Adaptive) == 0 {
			return nil
		}
		return c.Policies[0].Adaptive[0]
	}
	rule := st.AdaptiveRule("app", 2, 10)
	first := compile(&rule)
	if _, ok := first.Acquire(); !ok {
		t.Fatal("the first request was shed")
	}
	if again := compile(&rule); again.AdaptiveLimit != first.AdaptiveLimit || again.InFlight() != 1 {
		t.Fatalf("a reload with the same parameters made a new limit (in flight %d)", again.InFlight())
	}
	other := st.AdaptiveRule("app", 2, 20)
	changed := compile(&other)
	if changed.AdaptiveLimit == first.AdaptiveLimit || changed.InFlight() != 0 {
		t.Fatal("new parameters kept the old limit")
	}
	if none := compile(nil); none != nil {
		t.Fatal("a policy without an adaptive rule has a limit")
	}
	if back := compile(&other); back.AdaptiveLimit == changed.AdaptiveLimit {
		t.Fatal("a limit dropped by a reload came back")
	}
}
