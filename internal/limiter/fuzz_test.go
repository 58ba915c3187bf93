package limiter

import (
	"context"
	"testing"
	"time"
)

func clamp(v, lo, hi int64) int64 { return min(max(v, lo), hi) }

// FuzzTransitions runs a trace through one algorithm with parameters pushed to their bounds and
// checks that nothing panics or overflows: every Result within its bounds (checkBounds), bucket
// contents within [0, cap*W], and, while the clock does not go back, Remaining, RetryAfter and
// ResetAfter exact (checkExact). The seed corpus puts every parameter at its bounds, so `go test`
// runs those as unit tests.
//
// The trace is read 3 bytes a request: a time step (a table of 0, 1, W-1, W, huge, backwards,
// or a small number of ms) and a cost (1, cap, cap+1, huge, or small).
func FuzzTransitions(f *testing.F) {
	const maxW = int64(MaxWindow / 1e6)
	bursty := []byte{0, 1, 0, 1, 0, 2, 2, 0, 1, 3, 1, 1, 4, 3, 0, 5, 2, 9, 6, 0, 1, 0, 200, 7, 8, 4, 2}
	for alg := uint8(0); alg < 6; alg++ {
		for _, p := range [][4]int64{
			{MaxLimit, maxW, MaxLimit, maxW},
			{1, 1, 1, 0},
			{MaxLimit, 1, 1, 0},
			{1, maxW, MaxLimit, maxW},
			{MaxLogLimit, maxW, 0, 1},
			{7, 1000, 3, 250},
		} {
			f.Add(alg, p[0], p[1], p[2], p[3], MaxNowMs-2*maxW, bursty)
			f.Add(alg, p[0], p[1], p[2], p[3], int64(0), bursty)
		}
	}
	f.Fuzz(func(t *testing.T, alg uint8, limit, windowMs, burst, maxDelayMs, start int64, trace []byte) {
		lim := Variants(1, 0, 0, 0)[int(alg)%6]
		lim.Limit = clamp(limit, 1, MaxLimit)
		if lim.Algorithm == SlidingWindowLog {
			lim.Limit = clamp(limit, 1, MaxLogLimit)
			if len(trace) > 3*200 {
				trace = trace[:3*200] // the exactness checks replay up to L requests
			}
		}
		lim.Window = ms(clamp(windowMs, 1, int64(MaxWindow/1e6)))
		if lim.Algorithm == TokenBucket || lim.Algorithm == LeakyBucket {
			lim.Burst = clamp(burst, 0, MaxLimit)
		}
		if lim.Mode == Queue {
			lim.MaxDelay = ms(clamp(maxDelayMs, 0, int64(MaxWindow/1e6)))
		}
		if err := lim.Validate(); err != nil {
			t.Fatal(err)
		}
		W, capacity := lim.WindowMs(), lim.Capacity()
		s := newState(lim.Algorithm)
		now := clamp(start, 0, MaxNowMs)
		latest := now
		for len(trace) >= 3 {
			step, costCode, small := trace[0], trace[1], int64(trace[2])
			trace = trace[3:]
			switch step % 8 {
			case 0:
			case 1:
				now++
			case 2:
				now += W - 1
			case 3:
				now += W
			case 4:
				now += 1 << 40
			case 5:
				now -= small
			default:
				now += small
			}
			now = clamp(now, 0, MaxNowMs)
			c := 1 + small
			switch costCode % 5 {
			case 0:
				c = 1
			case 1:
				c = capacity
			case 2:
				c = capacity + 1
			case 3:
				c = 1 << 62
			}
			before := clone(s)
			r := s.Take(lim, c, now)
			if err := checkBounds(lim, r, c); err != nil {
				t.Fatalf("%+v, cost %d at %d: %+v: %v", lim, c, now, r, err)
			}
			switch st := s.(type) {
			case *TokenBucketState:
				if st.Tokens < 0 || st.Tokens > capacity*W {
					t.Fatalf("tokens %d outside 0..%d", st.Tokens, capacity*W)
				}
			case *LeakyBucketState:
				if st.Level < 0 || st.Level > capacity*W {
					t.Fatalf("level %d outside 0..%d", st.Level, capacity*W)
				}
			}
			if now >= latest {
				latest = now
				if r.Remaining <= 1000 { // checkExact replays Remaining requests
					if err := checkExact(lim, before, s, r, c, now); err != nil {
						t.Fatalf("%+v, cost %d at %d: %+v: %v", lim, c, now, r, err)
					}
				}
			}
		}
	})
}

// FuzzMemoryStoreKeys feeds the store arbitrary keys (one or two bytes each, so they collide
// and repeat) and costs: it never holds more keys than its bound, and never fails on a valid
// Limit with a positive cost.
func FuzzMemoryStoreKeys(f *testing.F) {
	f.Add([]byte("a\x00b\x01cd\x02"), uint8(3))
	f.Add([]byte{}, uint8(1))
	f.Add([]byte("\xff\xfe\x00\x00\x00\x01\x02\x03\x04\x05\x06\x07"), uint8(255))
	f.Fuzz(func(t *testing.T, trace []byte, maxKeys uint8) {
		bound := int(maxKeys)%64 + 1
		m := NewMemoryStore(MemoryStoreOptions{MaxKeys: bound})
		lim := Limit{Algorithm: TokenBucket, Limit: 3, Window: time.Second}
		for i := 0; i+2 <= len(trace); i += 2 {
			key := string(trace[i : i+1+int(trace[i+1]%2)])
			now := time.UnixMilli(t0 + int64(i))
			if _, err := m.Take(context.Background(), key, lim, int64(trace[i+1]%4)+1, now); err != nil {
				t.Fatal(err)
			}
			if m.Len() > bound {
				t.Fatalf("%d keys held, bound %d", m.Len(), bound)
			}
		}
	})
}
