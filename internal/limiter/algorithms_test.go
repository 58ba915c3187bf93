package limiter

import (
	"testing"
	"time"
)

// step is one or more requests in a step table: n requests (default 1) of cost (default 1),
// the first at t0+at, the next every `every` ms. want, when set, is the exact Result of each
// (its Limit is filled in); otherwise only allow is checked.
type step struct {
	at, every int64
	n         int
	cost      int64
	allow     bool
	want      *Result
}

func allow(remaining, resetMs int64) *Result {
	return &Result{Allowed: true, Remaining: remaining, ResetAfter: ms(resetMs)}
}

func queued(remaining, resetMs, delayMs int64) *Result {
	return &Result{Allowed: true, Remaining: remaining, ResetAfter: ms(resetMs), Delay: ms(delayMs)}
}

func deny(remaining, resetMs, retryMs int64) *Result {
	return &Result{Remaining: remaining, ResetAfter: ms(resetMs), RetryAfter: ms(retryMs), Reason: ReasonLimited}
}

func tooLong(remaining, resetMs, retryMs int64) *Result {
	return &Result{Remaining: remaining, ResetAfter: ms(resetMs), RetryAfter: ms(retryMs), Reason: ReasonDelayTooLong}
}

func never(remaining, resetMs int64) *Result {
	return &Result{Remaining: remaining, ResetAfter: ms(resetMs), RetryAfter: NeverRetry, Reason: ReasonCostExceedsCapacity}
}

type stepTable map[string]struct {
	lim   Limit
	steps []step
}

// run replays each table on a fresh state, checking every Result exactly where the step says
// and, for every request, the bounds and exactness properties of checkBounds and checkExact.
func (tt stepTable) run(t *testing.T) {
	for name, tc := range tt {
		t.Run(name, func(t *testing.T) {
			if err := tc.lim.Validate(); err != nil {
				t.Fatal(err)
			}
			s := newState(tc.lim.Algorithm)
			latest := int64(0)
			for i, st := range tc.steps {
				n, cost := max(st.n, 1), max(st.cost, 1)
				for j := 0; j < n; j++ {
					now := t0 + st.at + int64(j)*st.every
					before := clone(s)
					got := s.Take(tc.lim, cost, now)
					wantAllow := st.allow
					if st.want != nil {
						want := *st.want
						want.Limit = tc.lim.Capacity()
						if got != want {
							t.Fatalf("step %d request %d at t0+%dms cost %d:\n got %+v\nwant %+v", i, j, now-t0, cost, got, want)
						}
						wantAllow = want.Allowed
					}
					if got.Allowed != wantAllow {
						t.Fatalf("step %d request %d at t0+%dms cost %d: allowed %v, want %v (%+v)", i, j, now-t0, cost, got.Allowed, wantAllow, got)
					}
					if err := checkBounds(tc.lim, got, cost); err != nil {
						t.Fatalf("step %d request %d at t0+%dms: %v", i, j, now-t0, err)
					}
					if now >= latest {
						latest = now
						if err := checkExact(tc.lim, before, s, got, cost, now); err != nil {
							t.Fatalf("step %d request %d at t0+%dms: %v", i, j, now-t0, err)
						}
					}
				}
			}
		})
	}
}

// The seed document's configuration: windowMs 60000, max 100.
var perMinute = Limit{Limit: 100, Window: time.Minute}

func with(l Limit, alg Algorithm) Limit { l.Algorithm = alg; return l }

func TestFixedWindow(t *testing.T) {
	lim := with(perMinute, FixedWindow)
	stepTable{
		"seed 2.1: normal requests, the 101st in the window is denied until the next window": {lim, []step{
			{at: 0, want: allow(99, 60_000)},
			{at: 1000, every: 500, n: 98, allow: true},
			{at: 59_000, want: allow(0, 1000)},
			{at: 59_999, want: deny(0, 1, 1)},
			{at: 60_000, want: allow(99, 60_000)},
		}},
		"seed 2.2: a burst at each side of the boundary admits 200 within 2s (2x the limit)": {lim, []step{
			{at: 59_000, every: 10, n: 99, allow: true},
			{at: 59_990, want: allow(0, 10)},
			{at: 59_999, want: deny(0, 1, 1)},
			{at: 60_000, every: 10, n: 100, allow: true},
			{at: 61_000, want: deny(0, 59_000, 59_000)},
		}},
		"cost above the limit is never admitted": {lim, []step{
			{at: 5, cost: 101, want: never(100, 0)},
			{at: 5, cost: 100, want: allow(0, 59_995)},
			{at: 6, cost: 101, want: never(0, 59_994)},
		}},
		"costs count units": {lim, []step{
			{at: 0, cost: 60, want: allow(40, 60_000)},
			{at: 1, cost: 41, want: deny(40, 59_999, 59_999)},
			{at: 2, cost: 40, want: allow(0, 59_998)},
		}},
		"a clock that goes back counts in the latest window": {lim, []step{
			{at: 60_000, want: allow(99, 60_000)},
			{at: 59_999, want: allow(98, 60_000)},
			{at: 60_001, want: allow(97, 59_999)},
		}},
	}.run(t)
}

func TestSlidingWindowLog(t *testing.T) {
	lim := with(perMinute, SlidingWindowLog)
	stepTable{
		"seed 1.2: 100 at one instant, the rest denied until the first expires": {lim, []step{
			{at: 0, n: 99, allow: true},
			{at: 0, want: allow(0, 60_000)},
			{at: 0, want: deny(0, 60_000, 60_000)},
			{at: 59_999, want: deny(0, 1, 1)},
			// (t-W, t]: at t0+60000 the requests of t0 are out of the window.
			{at: 60_000, want: allow(99, 60_000)},
			{at: 60_001, want: allow(98, 60_000)},
		}},
		"seed 1.3: across windows, requests leave the window one instant at a time": {lim, []step{
			{at: 0, n: 50, allow: true},
			{at: 30_000, n: 49, allow: true},
			{at: 30_000, want: allow(0, 60_000)},
			{at: 59_999, want: deny(0, 30_001, 1)},
			{at: 60_001, want: allow(49, 60_000)},
			// The 50 of t0+30000 have left; the one of t0+60001 is still in the window.
			{at: 90_001, want: allow(98, 60_000)},
		}},
		"seed 5.2: the boundary burst that fixed window admits is denied": {lim, []step{
			{at: 59_000, n: 100, allow: true},
			{at: 60_000, want: deny(0, 59_000, 59_000)},
			{at: 60_000, n: 99, allow: false},
			{at: 119_000, n: 100, allow: true},
		}},
		"retry waits for enough of the oldest entries": {lim, []step{
			{at: 0, cost: 30, want: allow(70, 60_000)},
			{at: 10, cost: 30, want: allow(40, 60_000)},
			{at: 20, cost: 40, want: allow(0, 60_000)},
			{at: 30, cost: 50, want: deny(0, 59_990, 59_980)}, // t0 and t0+10 must both leave
			{at: 30, cost: 101, want: never(0, 59_990)},
			{at: 60_010, cost: 50, want: allow(10, 60_000)},
		}},
		"a clock that goes back is the newest entry's instant": {lim, []step{
			{at: 1000, want: allow(99, 60_000)},
			{at: 900, want: allow(98, 60_000)},
		}},
	}.run(t)
}

func TestSlidingWindowCounter(t *testing.T) {
	small := Limit{Algorithm: SlidingWindowCounter, Limit: 10, Window: time.Second}
	stepTable{
		"the previous window counts for the part of it still in the sliding interval": {small, []step{
			{at: 0, n: 9, allow: true},
			{at: 0, want: allow(0, 1999)},
			// Curr fills the window: next window, Prev'=10, e2 = 999-floor(9*1000/10) = 99.
			{at: 999, want: deny(0, 1000, 100)},
			// e=0, rest=999: 10*999 > (10-0-1)*1000; e' = 999-floor(9*1000/10) = 99.
			{at: 1000, want: deny(0, 999, 99)},
			{at: 1098, want: deny(0, 901, 1)},
			{at: 1099, want: allow(0, 1900)},
			// 10*(999-e) <= (10-1-1)*1000 from e=199.
			{at: 1150, want: deny(0, 1849, 49)},
			{at: 1199, want: allow(0, 1800)},
			{at: 3000, want: allow(9, 1999)},
		}},
		"retry in the next window when this one is full": {small, []step{
			{at: 500, n: 9, allow: true},
			{at: 999, want: allow(0, 1000)},
			{at: 999, want: deny(0, 1000, 100)},
			{at: 999, cost: 10, want: deny(0, 1000, 1000)}, // the last ms of the next window
			{at: 999, cost: 11, want: never(0, 1000)},
			{at: 1999, cost: 10, want: allow(0, 1000)},
		}},
		"seed 5.2: the boundary burst is denied, pro rata": {with(perMinute, SlidingWindowCounter), []step{
			{at: 59_000, n: 100, allow: true},
			// The estimate assumes the previous 100 were spread over the window: at e=599ms,
			// 100*(59999-599)/60000 = 99 of them count, so one more fits.
			{at: 60_000, want: deny(0, 59_999, 599)},
			{at: 60_599, want: allow(0, 119_400)},
			{at: 60_599, want: deny(0, 119_400, 600)},
		}},
		"only the previous window left: reset at this window's last ms": {small, []step{
			{at: 900, cost: 4, want: allow(6, 1099)},
			{at: 1500, cost: 10, want: deny(8, 499, 499)},
			{at: 1500, cost: 4, want: allow(4, 1499)},
		}},
		"a clock that goes back counts at the start of the latest window": {small, []step{
			{at: 1500, want: allow(9, 1499)},
			{at: 500, want: allow(8, 1999)},
		}},
		"a 1ms window is exact": {Limit{Algorithm: SlidingWindowCounter, Limit: 2, Window: time.Millisecond}, []step{
			{at: 0, n: 2, allow: true},
			{at: 0, want: deny(0, 1, 1)},
			{at: 1, n: 2, allow: true},
		}},
	}.run(t)
}

func TestTokenBucket(t *testing.T) {
	// The seed's capacity 100, refill 100 per second: one token per 10ms.
	lim := Limit{Algorithm: TokenBucket, Limit: 100, Window: time.Second, Burst: 100}
	stepTable{
		"seed 3.1: a full bucket admits a burst of 100, then one per 10ms": {lim, []step{
			{at: 0, want: allow(99, 10)},
			{at: 0, n: 98, allow: true},
			{at: 0, want: allow(0, 1000)},
			{at: 0, want: deny(0, 1000, 10)},
			{at: 9, want: deny(0, 991, 1)},
			{at: 10, want: allow(0, 1000)},
			{at: 20, want: allow(0, 1000)},
			{at: 25, want: deny(0, 995, 5)},
		}},
		"seed 3.2: after a long idle the burst is still only the capacity": {lim, []step{
			{at: 0, want: allow(99, 10)},
			{at: 60_000, n: 100, allow: true},
			{at: 60_000, n: 50, allow: false},
		}},
		"seed 3.3: one request every 10ms is always admitted": {lim, []step{
			{at: 0, every: 10, n: 500, want: allow(99, 10)},
		}},
		"seed 5.2: 100 at 59s and 100 at 60s both pass, the average rate is kept": {lim, []step{
			{at: 59_000, n: 100, allow: true},
			{at: 60_000, n: 100, allow: true},
			{at: 60_000, want: deny(0, 1000, 10)},
		}},
		"seed config: burst 100, refill 1 per second": {Limit{Algorithm: TokenBucket, Limit: 1, Window: time.Second, Burst: 100}, []step{
			{at: 0, n: 99, allow: true},
			{at: 0, want: allow(0, 100_000)},
			{at: 0, want: deny(0, 100_000, 1000)},
			{at: 1000, want: allow(0, 100_000)},
			{at: 100_999, want: allow(98, 1001)},
		}},
		"costs and a cost above the capacity": {lim, []step{
			{at: 0, cost: 101, want: never(100, 0)},
			{at: 0, cost: 100, want: allow(0, 1000)},
			{at: 5, cost: 101, want: never(0, 995)},
			{at: 15, cost: 3, want: deny(1, 985, 15)},
			{at: 30, cost: 3, want: allow(0, 1000)},
		}},
		"burst defaults to the limit": {Limit{Algorithm: TokenBucket, Limit: 5, Window: time.Second}, []step{
			{at: 0, n: 5, allow: true},
			{at: 0, want: deny(0, 1000, 200)},
		}},
		"a clock that goes back neither refills nor refunds": {lim, []step{
			{at: 1000, cost: 100, want: allow(0, 1000)},
			{at: 500, want: deny(0, 1000, 10)},
			{at: 1010, want: allow(0, 1000)},
		}},
	}.run(t)
}

func TestLeakyBucketMeter(t *testing.T) {
	// The seed's capacity 100, leak 100 per second: one unit per 10ms.
	lim := Limit{Algorithm: LeakyBucket, Limit: 100, Window: time.Second, Burst: 100, Mode: Meter}
	stepTable{
		"seed 4.1: 100 at once fill the bucket, then one per 10ms": {lim, []step{
			{at: 0, want: allow(99, 10)},
			{at: 0, n: 99, allow: true},
			{at: 0, want: deny(0, 1000, 10)},
			{at: 10, want: allow(0, 1000)},
			{at: 20, want: allow(0, 1000)},
		}},
		"seed 4.2: one every 10ms keeps the level low, always admitted": {lim, []step{
			{at: 0, every: 10, n: 500, want: allow(99, 10)},
		}},
		// One every 5ms: the level before request j is 1000j - 500j = 500j scaled units until
		// it exceeds 99000 (the bucket less one request), at j = 199 (t0+995ms).
		"seed 4.3: twice the rate fills the bucket, then every other request passes": {lim, []step{
			{at: 0, every: 5, n: 199, allow: true},
			{at: 995, want: deny(0, 995, 5)},
			{at: 1000, want: allow(0, 1000)},
			{at: 1005, want: deny(0, 995, 5)},
			{at: 1010, want: allow(0, 1000)},
		}},
		"mode defaults to Meter": {Limit{Algorithm: LeakyBucket, Limit: 100, Window: time.Second}, []step{
			{at: 0, n: 100, allow: true},
			{at: 0, want: deny(0, 1000, 10)},
		}},
		"a cost above the capacity": {lim, []step{
			{at: 0, cost: 101, want: never(100, 0)},
		}},
	}.run(t)
}

func TestLeakyBucketQueue(t *testing.T) {
	lim := Limit{Algorithm: LeakyBucket, Limit: 100, Window: time.Second, Burst: 100, Mode: Queue, MaxDelay: time.Second}
	short := lim
	short.MaxDelay = 500 * time.Millisecond
	zero := lim
	zero.MaxDelay = 0
	stepTable{
		"100 at once wait 0, 10, ..., 990ms; the 101st finds the bucket full": {lim, []step{
			{at: 0, want: queued(99, 10, 0)},
			{at: 0, want: queued(98, 20, 10)},
			{at: 0, n: 97, allow: true},
			{at: 0, want: queued(0, 1000, 990)},
			{at: 0, want: deny(0, 1000, 10)},
			{at: 10, want: queued(0, 1000, 990)},
		}},
		"MaxDelay 500ms: the 52nd would wait 510ms": {short, []step{
			{at: 0, n: 50, allow: true},
			{at: 0, want: queued(0, 510, 500)},
			{at: 0, want: tooLong(0, 510, 10)},
			{at: 10, want: queued(0, 510, 500)},
			{at: 10, cost: 30, want: tooLong(0, 510, 10)},
			{at: 10, cost: 101, want: never(0, 510)},
		}},
		"MaxDelay 0: only an empty queue admits": {zero, []step{
			{at: 0, want: queued(0, 10, 0)},
			{at: 5, want: tooLong(0, 5, 5)},
			{at: 10, want: queued(0, 10, 0)},
		}},
	}.run(t)
}

// TestLeakyBucketQueueDelays checks that the k-th of a burst starts at ceil(k*c*W/L) ms, the
// exact spacing c*W/L rounded up, also when it is not a whole number of ms.
func TestLeakyBucketQueueDelays(t *testing.T) {
	tests := map[string]struct {
		lim  Limit
		cost int64
		want []int64
	}{
		"3 per second: 333.3ms apart": {
			Limit{Algorithm: LeakyBucket, Limit: 3, Window: time.Second, Burst: 6, Mode: Queue, MaxDelay: time.Minute}, 1,
			[]int64{0, 334, 667, 1000, 1334, 1667},
		},
		"cost 2 at 7 per 100ms": {
			Limit{Algorithm: LeakyBucket, Limit: 7, Window: 100 * time.Millisecond, Burst: 8, Mode: Queue, MaxDelay: time.Minute}, 2,
			[]int64{0, 29, 58, 86},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var s LeakyBucketState
			for k, want := range tc.want {
				r := s.Take(tc.lim, tc.cost, t0)
				if !r.Allowed || r.Delay != ms(want) {
					t.Fatalf("request %d: %+v, want delay %dms", k, r, want)
				}
				if got := ceilDiv(int64(k)*tc.cost*tc.lim.WindowMs(), tc.lim.Limit); got != want {
					t.Fatalf("table entry %d is %d, formula gives %d", k, want, got)
				}
			}
			if r := s.Take(tc.lim, tc.cost, t0); r.Allowed || r.Reason != ReasonLimited {
				t.Fatalf("request past the capacity: %+v", r)
			}
		})
	}
}
