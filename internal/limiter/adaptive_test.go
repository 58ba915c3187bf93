package limiter

import (
	"container/heap"
	"slices"
	"testing"
	"time"
)

// TestAdaptiveRounds steps an Adaptive limit through rounds of fixed latencies: at the floor it
// grows by the square root, within the tolerance too, above it shrinks in proportion (by at
// most half), and it stays within its bounds.
func TestAdaptiveRounds(t *testing.T) {
	ms := time.Millisecond
	a := NewAdaptive(AdaptiveParams{MinLimit: 4, MaxLimit: 40, TolerancePct: 150})
	round := func(lat time.Duration) int64 {
		t.Helper()
		for range max(a.Limit(), MinRoundSamples) {
			gen, _ := a.Acquire()
			a.Observe(lat, gen)
			a.Release()
		}
		return a.Limit()
	}
	for i, step := range []struct {
		lat  time.Duration
		want int64
	}{
		{10 * ms, 6},  // the floor: 4 + sqrt(4)
		{10 * ms, 8},  // 6 + 2
		{15 * ms, 10}, // at the tolerance: still the floor, + sqrt(8)
		{20 * ms, 7},  // above: 10 × 15 / 20
		{100 * ms, 4}, // far above: halved at most (7/2 = 3), then the minimum
		{10 * ms, 6},
	} {
		if got := round(step.lat); got != step.want {
			t.Fatalf("round %d at %s: limit %d, want %d", i, step.lat, got, step.want)
		}
	}
	for range 50 {
		round(time.Millisecond) // a new floor, lower: growth up to the maximum
	}
	if got := a.Limit(); got != 40 {
		t.Fatalf("limit %d after many rounds at the floor, want the maximum 40", got)
	}
}

// TestAdaptiveProbesTheFloor: an application that becomes slower for good (a new version
// answering in 20 ms at any load where it took 10) first shrinks the limit to its minimum, as
// it would if it were queueing; the next probe of the floor learns the new latency, and the
// limit grows back to its maximum within an epoch, rather than staying at the minimum.
func TestAdaptiveProbesTheFloor(t *testing.T) {
	a := NewAdaptive(AdaptiveParams{MinLimit: 4, MaxLimit: 40, TolerancePct: 125})
	round := func(lat time.Duration) {
		for range max(a.Limit(), MinRoundSamples) {
			gen, _ := a.Acquire()
			a.Observe(lat, gen)
			a.Release()
		}
	}
	for range 20 {
		round(10 * time.Millisecond)
	}
	if a.Limit() != 40 {
		t.Fatalf("limit %d at the floor, want the maximum 40", a.Limit())
	}
	for range 5 {
		round(20 * time.Millisecond)
	}
	if a.Limit() != 4 {
		t.Fatalf("limit %d after rounds at twice the floor, want the minimum 4", a.Limit())
	}
	rounds := 0
	for ; a.Limit() != 40 && rounds < 2*EpochRounds; rounds++ {
		round(20 * time.Millisecond)
	}
	if a.Limit() != 40 || rounds > EpochRounds {
		t.Fatalf("limit %d after %d rounds at the new latency, want the maximum 40 within an epoch (%d rounds)", a.Limit(), rounds, EpochRounds)
	}
}

func TestAdaptiveAcquireRelease(t *testing.T) {
	a := NewAdaptive(AdaptiveParams{MinLimit: 2, MaxLimit: 2})
	for i, want := range []bool{true, true, false} {
		if _, got := a.Acquire(); got != want {
			t.Fatalf("acquire %d: %v, want %v (2 admitted, the third shed)", i+1, got, want)
		}
	}
	a.Release()
	if _, ok := a.Acquire(); !ok || a.InFlight() != 2 {
		t.Fatalf("after a release: in flight %d", a.InFlight())
	}
	if p := (AdaptiveParams{}).WithDefaults(); p.MinLimit != DefaultAdaptiveMinLimit || p.MaxLimit != DefaultAdaptiveMaxLimit || p.TolerancePct != DefaultAdaptiveTolerancePct {
		t.Fatalf("defaults %+v", p)
	}
}

// kneeRun is a closed load of clients on an application whose latency is base while at most
// knee requests are in flight and grows in proportion beyond (base × in flight / knee), behind
// gate, in simulated time: a shed client comes back after base. It returns the requests
// completed and the p99 latency over the second half of d, the gate's mean limit there, and
// how many of those completions found it within knee..2×knee.
func kneeRun(gate *Adaptive, clients int, base, d time.Duration, knee int64) (done int, p99 time.Duration, meanLimit int64, inBand int) {
	type event struct {
		at  time.Duration
		lat time.Duration // a completion's latency; 0 for an arrival
		gen Generation    // a completion's generation of the limit at its admission
		seq int
	}
	var q eventHeap[event]
	q.less = func(a, b event) bool { return a.at < b.at || a.at == b.at && a.seq < b.seq }
	seq := 0
	push := func(e event) { seq++; e.seq = seq; heap.Push(&q, e) }
	for range clients {
		push(event{})
	}
	var lats []time.Duration
	var limitSum, limitN int64
	for q.Len() > 0 {
		e := heap.Pop(&q).(event)
		if e.at > d {
			break
		}
		if e.lat > 0 { // a completion: the client sends its next request at once
			gate.Observe(e.lat, e.gen)
			gate.Release()
			if e.at > d/2 {
				done++
				lats = append(lats, e.lat)
				limitSum += gate.Limit()
				limitN++
				if l := gate.Limit(); l >= knee && l <= 2*knee {
					inBand++
				}
			}
			push(event{at: e.at})
			continue
		}
		gen, ok := gate.Acquire()
		if !ok {
			push(event{at: e.at + base})
			continue
		}
		lat := base * time.Duration(max(knee, gate.InFlight())) / time.Duration(knee)
		push(event{at: e.at + lat, lat: lat, gen: gen})
	}
	slices.Sort(lats)
	if len(lats) > 0 {
		p99 = lats[len(lats)*99/100]
	}
	if limitN > 0 {
		meanLimit = limitSum / limitN
	}
	return done, p99, meanLimit, inBand
}

type eventHeap[T any] struct {
	items []T
	less  func(a, b T) bool
}

func (h *eventHeap[T]) Len() int           { return len(h.items) }
func (h *eventHeap[T]) Less(i, j int) bool { return h.less(h.items[i], h.items[j]) }
func (h *eventHeap[T]) Swap(i, j int)      { h.items[i], h.items[j] = h.items[j], h.items[i] }
func (h *eventHeap[T]) Push(x any)         { h.items = append(h.items, x.(T)) }
func (h *eventHeap[T]) Pop() any {
	x := h.items[len(h.items)-1]
	h.items = h.items[:len(h.items)-1]
	return x
}

// TestAdaptiveSettlesAtTheKnee: 64 clients in a closed loop on an application whose latency
// grows past 8 requests in flight (simulated time, so the run is exact and repeatable). The
// adaptive limit settles near the knee (and stays there, but for its probes of the floor),
// keeps the p99 within 2× the floor's latency, and completes at least 0.9 of what the best
// fixed limit does, found by a sweep of 1..64 on the same load.
func TestAdaptiveSettlesAtTheKnee(t *testing.T) {
	const (
		clients = 64
		knee    = 8
		base    = 10 * time.Millisecond
		d       = 40 * time.Second
	)
	best, bestLimit := 0, int64(0)
	for l := int64(1); l <= clients; l++ {
		done, _, _, _ := kneeRun(NewAdaptive(AdaptiveParams{MinLimit: l, MaxLimit: l}), clients, base, d, knee)
		if done > best {
			best, bestLimit = done, l
		}
	}
	done, p99, limit, inBand := kneeRun(NewAdaptive(AdaptiveParams{}), clients, base, d, knee)
	t.Logf("adaptive: %d done (best fixed limit %d: %d), p99 %s, mean limit %d, %d of the completions within %d..%d", done, bestLimit, best, p99, limit, inBand, knee, 2*knee)
	if limit < knee/2 || limit > 2*knee {
		t.Errorf("the limit settled at %d, want near the knee %d (%d..%d)", limit, knee, knee/2, 2*knee)
	}
	// Settled, not swinging: all but the probes' rounds (one in EpochRounds) within the band.
	if inBand*100 < done*97 {
		t.Errorf("%d of %d completions found the limit within %d..%d, want at least 97 %%", inBand, done, knee, 2*knee)
	}
	if p99 > 2*base {
		t.Errorf("p99 %s, want within 2× the floor's %s", p99, base)
	}
	if done*10 < best*9 {
		t.Errorf("%d done, want at least 0.9 of the best fixed limit's %d", done, best)
	}
}
