package breaker

import (
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

func newTest(t *testing.T) (*Breaker, *clocktesting.FakeClock, *[]string) {
	t.Helper()
	c := clocktesting.NewFakeClock(time.Date(2026, 2, 5, 0, 0, 0, 0, time.UTC))
	var log []string
	b := New(Options{Threshold: 3, Cooldown: time.Second, MaxCooldown: 4 * time.Second, Clock: c,
		OnTransition: func(from, to State, cd time.Duration) {
			log = append(log, from.String()+">"+to.String()+"@"+cd.String())
		}})
	return b, c, &log
}

func TestOpensAfterThresholdConsecutiveFailures(t *testing.T) {
	b, _, log := newTest(t)
	b.Failure()
	b.Failure()
	b.Success() // resets the count
	b.Failure()
	b.Failure()
	if b.State() != Closed || !b.Allow() {
		t.Fatalf("state %s after 2 consecutive failures, want closed", b.State())
	}
	b.Failure()
	if b.State() != Open || b.Allow() {
		t.Fatalf("state %s after 3 consecutive failures, want open and refusing", b.State())
	}
	if len(*log) != 1 || (*log)[0] != "closed>open@1s" {
		t.Errorf("transitions %v", *log)
	}
}

func TestHalfOpenLetsOneProbe(t *testing.T) {
	steps := []struct {
		name      string
		advance   time.Duration
		probeOK   bool
		wantState State
	}{
		{"probe fails: reopen with 2s", time.Second, false, Open},
		{"still open after 1.999s", 1999 * time.Millisecond, false, Open},
		{"probe fails: reopen with 4s", time.Millisecond, false, Open},
		{"probe fails: capped at 4s", 4 * time.Second, false, Open},
		{"probe succeeds: closed", 4 * time.Second, true, Closed},
	}
	b, c, log := newTest(t)
	for range 3 {
		b.Failure()
	}
	for _, s := range steps {
		c.Step(s.advance)
		if !b.Allow() {
			if s.name == "still open after 1.999s" {
				continue
			}
			t.Fatalf("%s: no probe allowed", s.name)
		}
		if s.name == "still open after 1.999s" {
			t.Fatalf("%s: allowed before the cooldown ended", s.name)
		}
		if b.State() != HalfOpen || b.Allow() {
			t.Fatalf("%s: state %s; a second caller must not probe", s.name, b.State())
		}
		if s.probeOK {
			b.Success()
		} else {
			b.Failure()
		}
		if b.State() != s.wantState {
			t.Fatalf("%s: state %s, want %s", s.name, b.State(), s.wantState)
		}
	}
	want := []string{"closed>open@1s", "open>half-open@1s", "half-open>open@2s", "open>half-open@2s",
		"half-open>open@4s", "open>half-open@4s", "half-open>open@4s", "open>half-open@4s", "half-open>closed@1s"}
	if len(*log) != len(want) {
		t.Fatalf("transitions %v\nwant %v", *log, want)
	}
	for i := range want {
		if (*log)[i] != want[i] {
			t.Errorf("transition %d = %s, want %s", i, (*log)[i], want[i])
		}
	}
	// Closed again: the cooldown is back to 1s.
	for range 3 {
		b.Failure()
	}
	c.Step(time.Second)
	if !b.Allow() {
		t.Error("cooldown not reset to 1s after closing")
	}
}

func TestReleaseLetsTheNextCallerProbe(t *testing.T) {
	b, c, _ := newTest(t)
	for range 3 {
		b.Failure()
	}
	c.Step(time.Second)
	if !b.Allow() {
		t.Fatal("no probe")
	}
	b.Release()
	if b.State() != HalfOpen || !b.Allow() {
		t.Fatalf("after Release: state %s, want another probe allowed", b.State())
	}
}

func TestLateOutcomesWhileOpenAreIgnored(t *testing.T) {
	b, c, _ := newTest(t)
	for range 3 {
		b.Failure()
	}
	b.Success() // a call that began before the breaker opened
	b.Failure()
	if b.State() != Open {
		t.Fatalf("state %s, want open", b.State())
	}
	c.Step(999 * time.Millisecond)
	if b.Allow() {
		t.Error("a late failure must not extend or shorten the cooldown; allowed early")
	}
	c.Step(time.Millisecond)
	if !b.Allow() {
		t.Error("no probe after the cooldown")
	}
}

func TestConcurrentUse(_ *testing.T) {
	b := New(Options{Threshold: 2, Cooldown: time.Nanosecond})
	done := make(chan struct{})
	for i := range 8 {
		go func() {
			defer func() { done <- struct{}{} }()
			for j := range 2000 {
				if b.Allow() {
					if (i+j)%3 == 0 {
						b.Failure()
					} else {
						b.Success()
					}
				}
				_ = b.State()
			}
		}()
	}
	for range 8 {
		<-done
	}
}

// TestJitterSpreadsTheProbes: breakers opened at one instant with Jitter half-open at instants
// spread over [cooldown/2, cooldown], never later, and not all at one.
func TestJitterSpreadsTheProbes(t *testing.T) {
	const fleet, step = 100, 10 * time.Millisecond
	c := clocktesting.NewFakeClock(time.Date(2026, 2, 5, 0, 0, 0, 0, time.UTC))
	bs := make([]*Breaker, fleet)
	for i := range bs {
		bs[i] = New(Options{Threshold: 1, Cooldown: time.Second, Clock: c, Jitter: true})
		bs[i].Failure()
	}
	probed := map[time.Duration]int{} // by step since the failures
	for elapsed := time.Duration(0); elapsed <= time.Second; elapsed += step {
		for i, b := range bs {
			if b != nil && b.Allow() {
				if elapsed < 500*time.Millisecond {
					t.Fatalf("breaker %d half-opened %s after opening, before half the cooldown", i, elapsed)
				}
				probed[elapsed]++
				bs[i] = nil
			}
		}
		c.Step(step)
	}
	most, total := 0, 0
	for _, n := range probed {
		most, total = max(most, n), total+n
	}
	if total != fleet {
		t.Fatalf("%d of %d breakers half-opened within the cooldown", total, fleet)
	}
	if len(probed) < 10 || most > fleet/4 {
		t.Errorf("probes bunch: %d distinct %s steps, up to %d of %d in one", len(probed), step, most, fleet)
	}
}
