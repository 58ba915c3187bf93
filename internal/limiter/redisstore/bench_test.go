package redisstore

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testutil/redisserver"
)

// benchCallers is the number of concurrent callers in the benchmarks.
const benchCallers = 50

// benchURL returns the Redis to benchmark against: $SLUICE_BENCH_REDIS_URL if set (a disposable
// server, to compare with redis-benchmark on the same one; the benchmark writes keys under a
// fresh prefix), else a redis-server started for the benchmark.
func benchURL(b *testing.B) string {
	if u := os.Getenv("SLUICE_BENCH_REDIS_URL"); u != "" {
		return u
	}
	return redisserver.Start(b).URL()
}

// runParallel runs take from benchCallers goroutines, each with its own limiter key, and
// reports decisions per second.
func runParallel(b *testing.B, take func(ctx context.Context, key string) error) {
	var caller atomic.Int64
	b.SetParallelism((benchCallers + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		key := "client-" + strconv.FormatInt(caller.Add(1), 10)
		ctx := context.Background()
		for pb.Next() {
			if err := take(ctx, key); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
}

// BenchmarkTake measures decisions per second with 50 concurrent callers against one local
// redis-server, per algorithm, with server time as in production. Limits are set so that most
// requests pass and some are denied.
func BenchmarkTake(b *testing.B) {
	for _, lim := range limits(1000, time.Second, 0, time.Second) {
		b.Run(limitName(lim), func(b *testing.B) {
			s := New(newClient(b, benchURL(b)), Options{Prefix: freshPrefix("bench"), ServerTime: true, Timeout: testTimeout})
			runParallel(b, func(ctx context.Context, key string) error {
				_, err := s.Take(ctx, key, lim, 1, time.Time{})
				return err
			})
		})
	}
}

// BenchmarkEvalReturn1 is the ceiling of the client side: EVALSHA of 'return 1' through the
// same go-redis client and callers, what BenchmarkTake would reach if the scripts cost nothing.
// Compare both with `redis-benchmark -c 50 EVALSHA <sha1 of 'return 1'> 0` on the same server.
func BenchmarkEvalReturn1(b *testing.B) {
	client := newClient(b, benchURL(b))
	sha, err := client.ScriptLoad(context.Background(), "return 1").Result()
	if err != nil {
		b.Fatal(err)
	}
	runParallel(b, func(ctx context.Context, _ string) error {
		return client.EvalSha(ctx, sha, nil).Err()
	})
}
