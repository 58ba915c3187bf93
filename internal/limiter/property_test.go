package limiter

import (
	"math/rand"
	"testing"
	"time"
)

const traces = 300 // random traces per property, each from its own fixed seed

// randomLimit draws small parameters, so that traces cross many windows and bucket states.
func randomLimit(rng *rand.Rand, alg Algorithm) Limit {
	l := Limit{
		Algorithm: alg,
		Limit:     1 + rng.Int63n(20),
		Window:    ms(1 + rng.Int63n(300)),
	}
	if alg == TokenBucket || alg == LeakyBucket {
		l.Burst = rng.Int63n(25) // 0 means Limit
	}
	return l
}

// randomGap draws the time to the next arrival: often none, mostly short, sometimes long.
func randomGap(rng *rand.Rand, w int64) int64 {
	switch rng.Intn(10) {
	case 0, 1, 2:
		return 0
	case 9:
		return rng.Int63n(3 * w)
	default:
		return rng.Int63n(max(1, w/5))
	}
}

func randomCost(rng *rand.Rand, capacity int64) int64 {
	if rng.Intn(20) == 0 {
		return capacity + 1 + rng.Int63n(3)
	}
	return 1 + rng.Int63n(min(3, capacity))
}

// TestExactOnRandomTraces checks on random traces, for every algorithm and mode, the bounds of
// every Result and that Remaining, RetryAfter and ResetAfter are exact (see checkExact).
func TestExactOnRandomTraces(t *testing.T) {
	for _, alg := range algorithms {
		modes := []LeakyMode{""}
		if alg == LeakyBucket {
			modes = []LeakyMode{Meter, Queue}
		}
		for _, mode := range modes {
			t.Run(string(alg)+string(mode), func(t *testing.T) {
				for seed := int64(0); seed < traces; seed++ {
					rng := rand.New(rand.NewSource(seed))
					lim := randomLimit(rng, alg)
					lim.Mode = mode
					if mode == Queue {
						lim.MaxDelay = ms(rng.Int63n(2 * lim.WindowMs()))
					}
					s, now := newState(alg), t0
					for i := 0; i < 200; i++ {
						now += randomGap(rng, lim.WindowMs())
						c := randomCost(rng, lim.Capacity())
						before := clone(s)
						r := s.Take(lim, c, now)
						if err := checkBounds(lim, r, c); err != nil {
							t.Fatalf("seed %d, %+v, request %d: %v", seed, lim, i, err)
						}
						if err := checkExact(lim, before, s, r, c, now); err != nil {
							t.Fatalf("seed %d, %+v, request %d at t0+%d cost %d: %v", seed, lim, i, now-t0, c, err)
						}
					}
				}
			})
		}
	}
}

// TestSlidingWindowLogNeverExceedsLimit: in every interval (t-W, t] at most L units are
// admitted. The densest intervals end at an admission, so those are the ones checked.
func TestSlidingWindowLogNeverExceedsLimit(t *testing.T) {
	for seed := int64(0); seed < traces; seed++ {
		rng := rand.New(rand.NewSource(seed))
		lim := randomLimit(rng, SlidingWindowLog)
		W := lim.WindowMs()
		var s SlidingWindowLogState
		var admitted []LogEntry
		now, total := t0, int64(0)
		for i := 0; i < 500; i++ {
			now += randomGap(rng, W)
			c := randomCost(rng, lim.Limit)
			if s.Take(lim, c, now).Allowed {
				admitted = append(admitted, LogEntry{T: now, Cost: c})
				total += c
			}
		}
		for i, end := range admitted {
			var sum int64
			for _, e := range admitted[:i+1] {
				if e.T > end.T-W {
					sum += e.Cost
				}
			}
			if sum > lim.Limit {
				t.Fatalf("seed %d, %+v: %d units in (%d, %d]", seed, lim, sum, end.T-W-t0, end.T-t0)
			}
		}
		if total == 0 {
			t.Fatalf("seed %d: nothing admitted, the trace tests nothing", seed)
		}
	}
}

// TestTokenBucketEqualsLeakyBucketMeter: the two are one algorithm seen from two sides (level =
// cap*W - tokens), written separately; they must agree on every field of every Result.
func TestTokenBucketEqualsLeakyBucketMeter(t *testing.T) {
	for seed := int64(0); seed < 3*traces; seed++ {
		rng := rand.New(rand.NewSource(seed))
		tbLim := randomLimit(rng, TokenBucket)
		lbLim := tbLim
		lbLim.Algorithm, lbLim.Mode = LeakyBucket, Meter
		var tb TokenBucketState
		var lb LeakyBucketState
		now, admitted, denied := t0, 0, 0
		for i := 0; i < 300; i++ {
			now += randomGap(rng, tbLim.WindowMs())
			if rng.Intn(30) == 0 {
				now -= rng.Int63n(50) // a clock that goes back
			}
			c := randomCost(rng, tbLim.Capacity())
			a, b := tb.Take(tbLim, c, now), lb.TakeMeter(lbLim, c, now)
			if a != b {
				t.Fatalf("seed %d, %+v, request %d at t0+%d cost %d:\nTokenBucket %+v\nLeakyBucket %+v", seed, tbLim, i, now-t0, c, a, b)
			}
			if a.Allowed {
				admitted++
			} else {
				denied++
			}
		}
		if seed == 0 && (admitted == 0 || denied == 0) {
			t.Fatalf("seed 0 admitted %d, denied %d: the trace tests little", admitted, denied)
		}
	}
}

// TestTokenBucketGreedyClientTotal: a client that always has a request of cost 1 ready, sends
// it at once when admitted and waits exactly RetryAfter when denied, gets through, from a full
// bucket at t0 to t0+T inclusive,
//
//	admitted = cap + floor(L*T/W)
//
// exactly: the initial burst, plus the refill of T ms (L*T scaled units, W a token), none lost
// to rounding between requests. It needs (cap-1)*W >= L-1: a bucket that lacks less than one
// token must hold one ms of refill, or the overflow is lost at the cap (with Burst 1 and
// L > W, a ms refills more than the bucket lacks).
func TestTokenBucketGreedyClientTotal(t *testing.T) {
	for seed := int64(0); seed < traces; seed++ {
		rng := rand.New(rand.NewSource(seed))
		lim := randomLimit(rng, TokenBucket)
		lim.Burst = max(lim.Capacity(), 1+ceilDiv(lim.Limit-1, lim.WindowMs()))
		T := rng.Int63n(20 * lim.WindowMs())
		var s TokenBucketState
		now, admitted := t0, int64(0)
		for now <= t0+T {
			r := s.Take(lim, 1, now)
			if r.Allowed {
				admitted++
				continue
			}
			now += r.RetryAfter.Milliseconds()
		}
		want := lim.Capacity() + lim.Limit*T/lim.WindowMs()
		if admitted != want {
			t.Fatalf("seed %d, %+v, T=%dms: admitted %d, want cap + floor(L*T/W) = %d", seed, lim, T, admitted, want)
		}
	}
}

// TestLeakyBucketQueueSpacing: in Queue mode the exact start of the k-th admitted request,
// S_k = max(arrival_k, S_{k-1} + c_{k-1}*W/L), a rational kept here as S*L in integers, is what
// Delay rounds up: Delay_k = ceil(S_k - arrival_k). Requests that queue start exactly the leak
// interval c*W/L after the one before.
func TestLeakyBucketQueueSpacing(t *testing.T) {
	for seed := int64(0); seed < traces; seed++ {
		rng := rand.New(rand.NewSource(seed))
		lim := randomLimit(rng, LeakyBucket)
		lim.Mode, lim.MaxDelay = Queue, ms(rng.Int63n(3*lim.WindowMs()))
		W, L := lim.WindowMs(), lim.Limit
		var s LeakyBucketState
		now := int64(0)             // relative to t0, so that now*L stays small
		var startL int64 = -1 << 40 // S_{k-1}*L + c_{k-1}*W: when the queue ahead empties, times L
		queued := 0
		for i := 0; i < 400; i++ {
			now += randomGap(rng, W)
			c := randomCost(rng, lim.Capacity())
			r := s.Take(lim, c, t0+now)
			if !r.Allowed {
				continue
			}
			sL := max(now*L, startL) // exact start S_k, times L
			if sL > now*L {
				queued++
			}
			if want := ceilDiv(sL-now*L, L); r.Delay != ms(want) {
				t.Fatalf("seed %d, %+v, request %d at %dms: Delay %s, exact start %d/%d gives %dms", seed, lim, i, now, r.Delay, sL, L, want)
			}
			startL = sL + c*W
		}
		if seed == 0 && queued == 0 {
			t.Fatal("seed 0 queued nothing: the trace tests little")
		}
	}
}

// TestSlidingWindowCounterFixedWindowBound: whatever the estimate says, no aligned window ever
// gets more than L units.
func TestSlidingWindowCounterFixedWindowBound(t *testing.T) {
	for seed := int64(0); seed < traces; seed++ {
		rng := rand.New(rand.NewSource(seed))
		lim := randomLimit(rng, SlidingWindowCounter)
		W := lim.WindowMs()
		var s SlidingWindowCounterState
		perWindow := map[int64]int64{}
		now := t0
		for i := 0; i < 500; i++ {
			now += randomGap(rng, W)
			c := randomCost(rng, lim.Limit)
			if s.Take(lim, c, now).Allowed {
				if perWindow[now/W] += c; perWindow[now/W] > lim.Limit {
					t.Fatalf("seed %d, %+v: %d units in window %d", seed, lim, perWindow[now/W], now/W)
				}
			}
		}
	}
}

// maxInSlidingInterval is the most units admitted in any (t-W, t].
func maxInSlidingInterval(admitted []int64, W int64) int64 {
	var best int64
	for i, end := range admitted {
		var n int64
		for _, t := range admitted[:i+1] {
			if t > end-W {
				n++
			}
		}
		best = max(best, n)
	}
	return best
}

// TestSlidingWindowCounterWorstCase shows the estimate's error documented on
// SlidingWindowCounterState: L units at the last ms of a window, then a client that asks every
// ms of the next window, gets L + L - ceil(L/W) units into one sliding interval. Evenly spread
// arrivals are held to L.
func TestSlidingWindowCounterWorstCase(t *testing.T) {
	lim := Limit{Algorithm: SlidingWindowCounter, Limit: 100, Window: time.Second}
	W, L := lim.WindowMs(), lim.Limit

	var s SlidingWindowCounterState
	var admitted []int64
	for i := int64(0); i < L; i++ {
		if !s.Take(lim, 1, t0+W-1).Allowed {
			t.Fatal("the first burst is denied")
		}
		admitted = append(admitted, t0+W-1)
	}
	for now := t0 + W; now < t0+2*W; now++ {
		for s.Take(lim, 1, now).Allowed {
			admitted = append(admitted, now)
		}
	}
	if got, want := maxInSlidingInterval(admitted, W), 2*L-ceilDiv(L, W); got != want {
		t.Errorf("adversarial: %d units in one sliding interval, want %d", got, want)
	}

	for _, every := range []int64{5, 10, 20} { // twice, once and half the limit's rate
		var s SlidingWindowCounterState
		admitted = admitted[:0]
		sent := 0
		for now := t0; now < t0+10*W; now += every {
			sent++
			if s.Take(lim, 1, now).Allowed {
				admitted = append(admitted, now)
			}
		}
		if got := maxInSlidingInterval(admitted, W); got > L {
			t.Errorf("one request every %dms: %d units in one sliding interval, want <= %d", every, got, L)
		}
		// At the limit's rate, the rounding costs at most one request per window; below it, none.
		lost := sent - len(admitted)
		t.Logf("one request every %dms: %d of %d denied, at most %d in a sliding interval", every, lost, sent, maxInSlidingInterval(admitted, W))
		if (every == W/L && lost > 10) || (every > W/L && lost > 0) {
			t.Errorf("one request every %dms: %d of %d denied", every, lost, sent)
		}
	}
}
