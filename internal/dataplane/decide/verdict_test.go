package decide

import (
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/dataplane/config"
	"github.com/sluice-dev/sluice/internal/limiter"
)

// TestVerdictShowsTheDecidingRule: the rule whose numbers both front ends report is the
// enforced denial with the longest retry, else the least remaining (enforced before shadow at a
// tie); a shadow denial never denies, and a denied request waits for nothing.
func TestVerdictShowsTheDecidingRule(t *testing.T) {
	a, b, shadow := &config.Rule{Name: "a"}, &config.Rule{Name: "b"}, &config.Rule{Name: "s", Shadow: true}
	allow := func(rem int64, delay time.Duration) limiter.Result {
		return limiter.Result{Allowed: true, Remaining: rem, Delay: delay}
	}
	deny := func(retry time.Duration) limiter.Result {
		return limiter.Result{RetryAfter: retry, ResetAfter: time.Hour}
	}
	type add struct {
		rule *config.Rule
		res  limiter.Result
	}
	for name, tc := range map[string]struct {
		adds   []add
		show   *config.Rule
		denied bool
		delay  time.Duration
	}{
		"least remaining":               {[]add{{a, allow(5, 0)}, {b, allow(2, 0)}}, b, false, 0},
		"enforced before shadow at tie": {[]add{{shadow, allow(2, 0)}, {a, allow(2, 0)}}, a, false, 0},
		"shadow denial does not deny":   {[]add{{a, allow(5, 0)}, {shadow, deny(time.Second)}}, shadow, false, 0},
		"longest retry of the denials":  {[]add{{a, deny(time.Second)}, {b, deny(3 * time.Second)}, {shadow, deny(time.Minute)}}, b, true, 0},
		"denial over any allowance":     {[]add{{a, deny(time.Second)}, {b, allow(0, 0)}}, a, true, 0},
		"longest delay of the enforced": {[]add{{a, allow(5, time.Second)}, {b, allow(6, 2*time.Second)}, {shadow, allow(9, time.Minute)}}, a, false, 2 * time.Second},
		"no delay once denied":          {[]add{{a, allow(5, time.Second)}, {b, deny(time.Second)}}, b, true, 0},
		"never passes: reset is retry":  {[]add{{a, limiter.Result{RetryAfter: -1, ResetAfter: time.Minute}}, {b, deny(time.Second)}}, a, true, 0},
	} {
		t.Run(name, func(t *testing.T) {
			var v Verdict
			for _, x := range tc.adds {
				v.Add(x.rule, limiter.Limit{}, x.res)
			}
			if v.Show != tc.show || v.Denied != tc.denied || v.Delay != tc.delay {
				t.Errorf("show %v denied %v delay %v; want %v %v %v", v.Show.Name, v.Denied, v.Delay, tc.show.Name, tc.denied, tc.delay)
			}
		})
	}
}
