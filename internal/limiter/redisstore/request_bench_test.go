package redisstore

import (
	"context"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/limiter"
)

// BenchmarkTakeRequest compares a one-rule request sent with Take, the same with TakeRequest,
// and a two-rule request (a per-caller TokenBucket and a FixedWindow shared by all callers,
// both allowing most requests) with TakeRequest: one script call each, on the batched store,
// with server time, per number of concurrent callers ($SLUICE_BENCH_CALLERS). It also reports
// the scripts' time inside Redis per call (INFO commandstats after CONFIG RESETSTAT), which a
// loaded client machine disturbs less than the wall-clock figures.
func BenchmarkTakeRequest(b *testing.B) {
	url := benchURL(b)
	perCaller := limiter.Limit{Algorithm: limiter.TokenBucket, Limit: 1_000_000, Window: time.Second}
	shared := limiter.Limit{Algorithm: limiter.FixedWindow, Limit: 100_000_000, Window: time.Second}
	for _, callers := range benchCallers(b) {
		for _, kind := range []string{"Take", "TakeRequest-1", "TakeRequest-2"} {
			b.Run("callers="+strconv.Itoa(callers)+"/"+kind, func(b *testing.B) {
				client := newClient(b, url)
				s := New(client, Options{Prefix: freshPrefix("benchreq"), Timeout: testTimeout})
				b.Cleanup(func() { _ = s.Close() })
				if err := client.ConfigResetStat(context.Background()).Err(); err != nil {
					b.Fatal(err)
				}
				runCallers(b, callers, func(ctx context.Context, key string) error {
					if kind == "Take" {
						_, err := s.Take(ctx, key, perCaller, 1, time.Time{})
						return err
					}
					var res [2]limiter.Result
					takes := []limiter.Take{{Key: key, Limit: perCaller, N: 1}, {Key: "all", Limit: shared, N: 1}}
					if kind == "TakeRequest-1" {
						takes = takes[:1]
					}
					_, err := s.TakeRequest(ctx, takes, time.Time{}, res[:])
					return err
				})
				b.ReportMetric(scriptMicros(b, client), "redis-µs/call")
			})
		}
	}
}

var evalshaStat = regexp.MustCompile(`cmdstat_evalsha:calls=\d+,usec=\d+,usec_per_call=([0-9.]+)`)

// scriptMicros is the mean time Redis spent in an EVALSHA since the last CONFIG RESETSTAT.
func scriptMicros(b *testing.B, client interface {
	Info(context.Context, ...string) *redis.StringCmd
}) float64 {
	info, err := client.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	m := evalshaStat.FindStringSubmatch(info)
	if m == nil {
		b.Fatalf("no EVALSHA in INFO commandstats:\n%s", info)
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}
