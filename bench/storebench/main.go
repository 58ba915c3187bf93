// Command storebench measures the Redis store from outside, as the sidecar uses it: decisions per
// second of redisstore.Store.Take at a given number of concurrent callers (each with its own
// limiter key, server time, production options), the same for EVALSHA of 'return 1' through the
// same client (the ceiling of the client side), and the memory one limiter costs in Redis.
//
// It prints tab-separated lines for bench/store.sh to collect:
//
//	take     <algorithm> <callers> <decisions/s> <fraction admitted>
//	evalsha  return1     <callers> <calls/s>
//	memory   <algorithm> <keys>    <MEMORY USAGE of one key, bytes> <INFO used_memory growth per key, bytes>
//
// Point it only at a disposable redis-server: it writes keys under a fresh prefix and leaves
// them to expire.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/limiter/redisstore"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "storebench:", err)
		os.Exit(1)
	}
}

func run() error {
	url := flag.String("redis-url", "", "Redis to measure (disposable)")
	callersFlag := flag.String("callers", "1,8,50", "comma-separated numbers of concurrent callers")
	dur := flag.Duration("duration", 2*time.Second, "measured time per algorithm and caller count")
	warmup := flag.Duration("warmup", 200*time.Millisecond, "unmeasured time before each measurement")
	memKeys := flag.Int("memory-keys", 10000, "limiters created per algorithm to measure memory; 0 skips")
	flag.Parse()
	if *url == "" {
		return errors.New("--redis-url is required")
	}
	var callers []int
	for _, f := range strings.Split(*callersFlag, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fmt.Errorf("--callers: %q is not a positive number", f)
		}
		callers = append(callers, n)
	}
	// Enough connections that callers never wait for one (go-redis's default is 10 per CPU).
	u := *url
	if !strings.Contains(u, "pool_size=") {
		sep := "?"
		if strings.Contains(u, "?") {
			sep = "&"
		}
		u += sep + "pool_size=" + strconv.Itoa(2*slices.Max(callers))
	}
	client, err := redisstore.NewClientFromURL(u)
	if err != nil {
		return err
	}
	defer func() { _ = client.Close() }()
	ctx := context.Background()
	if err := client.Ping(ctx).Err(); err != nil {
		return err
	}
	runID := strconv.FormatInt(time.Now().UnixNano(), 36)

	// The limits of redisstore's BenchmarkTake: 1000 per second per key, so a single caller is
	// mostly denied and many callers mostly admitted; both paths are measured.
	for _, lim := range limiter.Variants(1000, time.Second, 0, time.Second) {
		for _, c := range callers {
			opts := redisstore.Options{Prefix: fmt.Sprintf("bench-%s-%s-%d", runID, tag(lim), c), Timeout: time.Second}
			s := redisstore.New(client, opts)
			rate, admitted, err := measure(c, *warmup, *dur, func(caller int) (bool, error) {
				r, err := s.Take(ctx, "client-"+strconv.Itoa(caller), lim, 1, time.Time{})
				return r.Allowed, err
			})
			if err != nil {
				return fmt.Errorf("%s, %d callers: %w", lim.Name(), c, err)
			}
			fmt.Printf("take\t%s\t%d\t%.0f\t%.3f\n", lim.Name(), c, rate, admitted)
		}
	}

	sha, err := client.ScriptLoad(ctx, "return 1").Result()
	if err != nil {
		return err
	}
	for _, c := range callers {
		rate, _, err := measure(c, *warmup, *dur, func(int) (bool, error) { return true, client.EvalSha(ctx, sha, nil).Err() })
		if err != nil {
			return fmt.Errorf("EVALSHA return 1, %d callers: %w", c, err)
		}
		fmt.Printf("evalsha\treturn1\t%d\t%.0f\n", c, rate)
	}

	if *memKeys > 0 {
		// As in redisstore's TestMemoryPerKey: one-minute windows and explicit time, whose keys
		// live at least ExplicitTimeMinTTL. With server time a bucket's key expires when it has
		// refilled (600 ms here), before all keys are written.
		for _, lim := range limiter.Variants(100, time.Minute, 0, time.Minute) {
			s := redisstore.New(client, redisstore.Options{Prefix: fmt.Sprintf("mem-%s-%s", runID, tag(lim)), Timeout: time.Second, ExplicitTime: true})
			before, err := usedMemory(ctx, client)
			if err != nil {
				return err
			}
			for i := range *memKeys {
				if _, err := s.Take(ctx, "client-"+strconv.Itoa(i), lim, 1, time.Now()); err != nil {
					return err
				}
			}
			after, err := usedMemory(ctx, client)
			if err != nil {
				return err
			}
			one, err := client.MemoryUsage(ctx, s.Keys("client-0", lim)[0], 0).Result()
			if err != nil {
				return fmt.Errorf("MEMORY USAGE: %w", err)
			}
			fmt.Printf("memory\t%s\t%d\t%d\t%.0f\n", lim.Name(), *memKeys, one, float64(after-before)/float64(*memKeys))
		}
	}
	return nil
}

// measure runs call from c goroutines (each passing its own index) for warmup, then for dur, and
// returns the calls per second during dur and the fraction of them that reported true. The first
// error stops it.
func measure(c int, warmup, dur time.Duration, call func(caller int) (bool, error)) (float64, float64, error) {
	var (
		count, ok atomic.Int64
		counting  atomic.Bool
		stop      atomic.Bool
		wg        sync.WaitGroup
		errOnce   sync.Once
		firstErr  error
	)
	for i := range c {
		wg.Go(func() {
			for !stop.Load() {
				passed, err := call(i)
				if err != nil {
					errOnce.Do(func() { firstErr = err })
					stop.Store(true)
					return
				}
				if counting.Load() {
					count.Add(1)
					if passed {
						ok.Add(1)
					}
				}
			}
		})
	}
	time.Sleep(warmup)
	counting.Store(true)
	start := time.Now()
	time.Sleep(dur)
	counting.Store(false)
	elapsed := time.Since(start)
	n, passed := count.Load(), ok.Load()
	stop.Store(true)
	wg.Wait()
	if firstErr != nil {
		return 0, 0, firstErr
	}
	if n == 0 {
		return 0, 0, errors.New("no call completed in the measured time")
	}
	return float64(n) / elapsed.Seconds(), float64(passed) / float64(n), nil
}

func usedMemory(ctx context.Context, client redis.UniversalClient) (int64, error) {
	info, err := client.Info(ctx, "memory").Result()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, errors.New("INFO memory has no used_memory")
}

func tag(l limiter.Limit) string { return strings.ReplaceAll(l.Name(), "/", "-") }
