package redisstore

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testutil/redisserver"
)

// benchURL returns the Redis to benchmark against: $SLUICE_BENCH_REDIS_URL if set (a disposable
// server, to compare with redis-benchmark on the same one; the benchmark writes keys under a
// fresh prefix), else a redis-server started for the benchmark.
func benchURL(b *testing.B) string {
	if u := os.Getenv("SLUICE_BENCH_REDIS_URL"); u != "" {
		return u
	}
	return redisserver.StartTest(b).URL()
}

// benchList returns the comma-separated $env, or def.
func benchList(env, def string) []string {
	if v := os.Getenv(env); v != "" {
		return strings.Split(v, ",")
	}
	return strings.Split(def, ",")
}

// benchCallers are the numbers of concurrent callers, $SLUICE_BENCH_CALLERS (e.g. "1,8,50"),
// default 50.
func benchCallers(b *testing.B) []int {
	var ns []int
	for _, v := range benchList("SLUICE_BENCH_CALLERS", "50") {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("SLUICE_BENCH_CALLERS: %q is not a positive number", v)
		}
		ns = append(ns, n)
	}
	return ns
}

// benchModes maps the store variants to their number of pipelines in flight (0: one round
// trip per Take). $SLUICE_BENCH_MODES picks some, default "unbatched,batched".
var benchModes = map[string]int{"unbatched": 0, "batched": senders, "senders1": 1, "senders2": 2, "senders4": 4}

// runCallers runs take from exactly callers goroutines, each with its own limiter key, until
// b.N calls are made, and reports decisions per second.
func runCallers(b *testing.B, callers int, take func(ctx context.Context, key string) error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ReportAllocs()
	b.ResetTimer()
	for i := range callers {
		key := "client-" + strconv.Itoa(i)
		wg.Go(func() {
			ctx := context.Background()
			for next.Add(1) <= int64(b.N) {
				if err := take(ctx, key); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
}

// BenchmarkTake measures decisions per second against one local redis-server, per number of
// concurrent callers, store variant and algorithm, with server time as in production. Limits
// are set so that most requests pass and some are denied. bench/redis.sh runs it next to
// redis-benchmark on the same server.
func BenchmarkTake(b *testing.B) {
	url := benchURL(b)
	for _, callers := range benchCallers(b) {
		for _, mode := range benchList("SLUICE_BENCH_MODES", "unbatched,batched") {
			n, ok := benchModes[mode]
			if !ok {
				b.Fatalf("SLUICE_BENCH_MODES: unknown mode %q", mode)
			}
			for _, lim := range limiter.Variants(1000, time.Second, 0, time.Second) {
				b.Run("callers="+strconv.Itoa(callers)+"/"+mode+"/"+lim.Name(), func(b *testing.B) {
					s := newWithSenders(newClient(b, url), Options{Prefix: freshPrefix("bench"), Timeout: testTimeout}, n)
					b.Cleanup(func() { _ = s.Close() })
					runCallers(b, callers, func(ctx context.Context, key string) error {
						_, err := s.Take(ctx, key, lim, 1, time.Time{})
						return err
					})
				})
			}
		}
	}
}

// BenchmarkEvalReturn1 is the ceiling of go-redis without batching: EVALSHA of 'return 1'
// through the same client and callers, what an unbatched BenchmarkTake would reach if the
// scripts cost nothing. Compare with `redis-benchmark -c <callers> EVALSHA <sha1 of 'return 1'>
// 0` on the same server.
func BenchmarkEvalReturn1(b *testing.B) {
	url := benchURL(b)
	for _, callers := range benchCallers(b) {
		b.Run("callers="+strconv.Itoa(callers), func(b *testing.B) {
			client := newClient(b, url)
			sha, err := client.ScriptLoad(context.Background(), "return 1").Result()
			if err != nil {
				b.Fatal(err)
			}
			runCallers(b, callers, func(ctx context.Context, _ string) error {
				return client.EvalSha(ctx, sha, nil).Err()
			})
		})
	}
}
