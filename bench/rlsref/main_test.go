package main

import (
	"testing"
	"time"

	rlsv3common "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/testutil/redisserver"
)

// The reference decides: each descriptor's count in its window, charged by the hits, over the
// limit past it, every descriptor charged (the peer's driver is not all-or-nothing), and a new
// window starts a new count.
func TestReferenceDecides(t *testing.T) {
	srv := redisserver.StartTest(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = client.Close() })
	now := time.Unix(1_800_000_000, 0) // a whole minute
	s := &service{client: client, limit: 3, unit: units["minute"], now: func() time.Time { return now }}
	ask := func(hits uint32, values ...string) *rlsv3.RateLimitResponse {
		t.Helper()
		req := &rlsv3.RateLimitRequest{Domain: "d", HitsAddend: hits}
		for _, v := range values {
			req.Descriptors = append(req.Descriptors, &rlsv3common.RateLimitDescriptor{
				Entries: []*rlsv3common.RateLimitDescriptor_Entry{{Key: "k", Value: v}}})
		}
		resp, err := s.ShouldRateLimit(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	type want struct {
		code      rlsv3.RateLimitResponse_Code
		remaining uint32
	}
	check := func(resp *rlsv3.RateLimitResponse, ws ...want) {
		t.Helper()
		for i, w := range ws {
			st := resp.GetStatuses()[i]
			if st.GetCode() != w.code || st.GetLimitRemaining() != w.remaining || st.GetCurrentLimit().GetRequestsPerUnit() != 3 ||
				st.GetCurrentLimit().GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE || st.GetDurationUntilReset().AsDuration() != 10*time.Second {
				t.Errorf("status %d: %v, want %v remaining %d, 3 per MINUTE, reset in 10s", i, st, w.code, w.remaining)
			}
		}
	}
	ok, over := rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
	now = now.Add(50 * time.Second)
	check(ask(0, "a"), want{ok, 2}) // a request's hits_addend of 0 is one hit
	check(ask(2, "a"), want{ok, 0})
	check(ask(1, "a", "b"), want{over, 0}, want{ok, 2})
	check(ask(1, "b", "a"), want{ok, 1}, want{over, 0}) // charged although a is over
	now = now.Add(10 * time.Second)                     // the next minute
	resp := ask(1, "a")
	if st := resp.GetStatuses()[0]; st.GetCode() != ok || st.GetLimitRemaining() != 2 || st.GetDurationUntilReset().AsDuration() != time.Minute {
		t.Errorf("in the next window: %v, want OK remaining 2, reset in 1m", st)
	}
	if ttl, err := client.TTL(t.Context(), "d_k_a_1800000060").Result(); err != nil || ttl <= 0 || ttl > time.Minute {
		t.Errorf("TTL of the window's key: %v (%v), want the window's length", ttl, err)
	}
}
