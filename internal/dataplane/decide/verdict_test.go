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

// TestAppendDuration: OpenAI's reset format is Go's time.Duration.String, for whole ms.
func TestAppendDuration(t *testing.T) {
	for _, d := range []time.Duration{0, time.Millisecond, 20 * time.Millisecond, 999 * time.Millisecond, time.Second,
		1050 * time.Millisecond, 1500 * time.Millisecond, 1007 * time.Millisecond, 1070 * time.Millisecond, 6 * time.Minute,
		time.Hour + 2*time.Minute + 3500*time.Millisecond, 100 * time.Hour, 59*time.Minute + 59999*time.Millisecond} {
		if got := string(AppendDuration(nil, d)); got != d.String() {
			t.Errorf("AppendDuration(%s) = %q", d, got)
		}
	}
}

// TestResetIsTheNextRequest: a reset says when the next request can pass: after a denial,
// the retry; after an admission, when remaining next grows (a bucket: the next unit, exact
// to 1 ms late; a fixed window: its end), 0 when nothing is used.
func TestResetIsTheNextRequest(t *testing.T) {
	tb := limiter.Limit{Algorithm: limiter.TokenBucket, Limit: 1, Window: time.Second, Burst: 5}
	queue := limiter.Limit{Algorithm: limiter.LeakyBucket, Mode: limiter.Queue, Limit: 1, Window: time.Second, Burst: 5, MaxDelay: 2 * time.Second}
	fw := limiter.Limit{Algorithm: limiter.FixedWindow, Limit: 3, Window: time.Minute}
	rule := &config.Rule{Name: "r"}
	for name, tc := range map[string]struct {
		lim   limiter.Limit
		state func(now int64) limiter.Result
		want  time.Duration
		ok    bool
	}{
		"bucket, full": {tb, func(now int64) limiter.Result {
			var s limiter.TokenBucketState
			return s.Take(tb, 1, now) // 4 left, the next unit back in 1 s
		}, time.Second, true},
		"bucket, emptied": {tb, func(now int64) limiter.Result {
			var s limiter.TokenBucketState
			s.Take(tb, 4, now)
			return s.Take(tb, 1, now+300) // 0 left, 0.3 of a token: 700 ms to the next
		}, 700 * time.Millisecond, true},
		"bucket, denied": {tb, func(now int64) limiter.Result {
			var s limiter.TokenBucketState
			s.Take(tb, 5, now)
			return s.Take(tb, 2, now+500) // 2 needed, 0.5 there: 1.5 s
		}, 1500 * time.Millisecond, true},
		"bucket, never": {tb, func(now int64) limiter.Result {
			var s limiter.TokenBucketState
			return s.Take(tb, 6, now)
		}, 0, false},
		"queue, delayed": {queue, func(now int64) limiter.Result {
			var s limiter.LeakyBucketState
			s.Take(queue, 2, now)
			return s.Take(queue, 1, now) // admitted after 2 s; 3 s of work queued, MaxDelay 2 s: none remaining for 1 s
		}, time.Second, true},
		"fixed window": {fw, func(now int64) limiter.Result {
			var s limiter.FixedWindowState
			return s.Take(fw, 1, now+15_000) // remaining 2, grows at the window's end
		}, 45 * time.Second, true},
	} {
		t.Run(name, func(t *testing.T) {
			var v Verdict
			v.Add(rule, tc.lim, tc.state(1_800_000_000_000-1_800_000_000_000%60_000))
			got, ok := v.ResetAfter()
			if ok != tc.ok || (ok && (got < tc.want || got > tc.want+time.Millisecond)) {
				t.Errorf("reset %s (%v), want %s (%v): %+v", got, ok, tc.want, tc.ok, v.Res)
			}
		})
	}
}
