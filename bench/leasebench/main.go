// Command leasebench measures leased limits (issue 14) against real Redis: two sidecars' worth
// of lease engines (one Redis client and store each) share one hot key, closed-loop callers
// on each, first with the exact rule (every decision a script call), then leased, then
// deciding locally (a MemoryStore, the local-share path) as the throughput reference. It
// reports, per mode, decisions, decisions/s, store calls per decision, Redis CPU per decision
// (INFO cpu deltas) and, for a rule near its limit, the worst interval next to the bound.
// One line per case, tab-separated:
//
//	leasebench <case> <mode> <decisions> <decisions/s> <store calls/decision> <redis cpu µs/decision> <admitted> <worst admitted> <bound>
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/limiter/lease"
	"github.com/sluice-dev/sluice/internal/limiter/redisstore"
)

func main() {
	url := flag.String("redis-url", "", "redis:// URL")
	pods := flag.Int("pods", 2, "simulated sidecars, each with its own client and store")
	callers := flag.Int("callers", 8, "closed-loop callers per sidecar")
	duration := flag.Duration("duration", 2*time.Second, "per mode")
	maxAge := flag.Duration("max-age", 100*time.Millisecond, "the lease's maxAge")
	flag.Parse()
	cases := []struct {
		name string
		lim  limiter.Limit
	}{
		{"far", limiter.Limit{Algorithm: limiter.TokenBucket, Limit: limiter.MaxLimit, Window: time.Second}},
		{"near", limiter.Limit{Algorithm: limiter.TokenBucket, Limit: 5000, Window: time.Second, Burst: 500}},
	}
	for _, c := range cases {
		for _, mode := range []string{"exact", "leased", "local"} {
			run(*url, c.name, mode, c.lim, *pods, *callers, *duration, lease.Params{MaxAge: *maxAge})
		}
	}
}

func run(url, name, mode string, lim limiter.Limit, pods, callers int, d time.Duration, p lease.Params) {
	ctx := context.Background()
	prefix := fmt.Sprintf("leasebench-%d", time.Now().UnixNano())
	admin, err := redisstore.NewClientFromURL(url)
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = admin.Close() }()
	type pod struct {
		store  *redisstore.Store
		engine *lease.Engine
		client redis.UniversalClient
	}
	ps := make([]pod, pods)
	local := limiter.NewMemoryStore(limiter.MemoryStoreOptions{})
	for i := range ps {
		cl, err := redisstore.NewClientFromURL(url)
		if err != nil {
			log.Fatal(err)
		}
		s := redisstore.New(cl, redisstore.Options{Prefix: prefix, Timeout: time.Second})
		ps[i] = pod{store: s, engine: lease.New(s, lease.Options{}), client: cl}
		_, _ = s.Take(ctx, "warm", lim, 1, time.Time{}) // scripts loaded, connections dialed
	}
	cpu0 := redisCPU(ctx, admin)
	var n, calls, fails atomic.Int64
	admits := make([][]lease.Admit, pods*callers)
	stop := time.Now().Add(d)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range pods * callers {
		pd := ps[i%pods]
		wg.Go(func() {
			for time.Now().Before(stop) {
				now := time.Now()
				var r limiter.Result
				var err error
				switch mode {
				case "exact":
					r, err = pd.store.Take(ctx, "hot", lim, 1, now)
					calls.Add(1)
				case "leased":
					r, err = pd.engine.Take(ctx, "hot", lim, p, 1, now)
				default:
					r, err = local.Take(ctx, "hot", lim, 1, now)
				}
				if err != nil {
					fails.Add(1)
					continue
				}
				n.Add(1)
				if r.Allowed && lim.Limit < limiter.MaxLimit {
					admits[i] = append(admits[i], lease.Admit{At: now.UnixMilli(), Units: 1})
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	for _, pd := range ps {
		pd.engine.ReturnAll(ctx)
		calls.Add(pd.engine.Stats().StoreCalls)
	}
	cpu1 := redisCPU(ctx, admin)
	for _, pd := range ps {
		_ = pd.store.Close()
		_ = pd.client.Close()
	}
	var all []lease.Admit
	for _, a := range admits {
		all = append(all, a...)
	}
	slices.SortFunc(all, func(a, b lease.Admit) int { return int(a.At - b.At) })
	worst := "-\t-"
	admitted := "-"
	if len(all) > 0 {
		// Leases are spent on the sidecars' clocks, issued on Redis's: on one machine they
		// are one clock. The exact and local runs are held to the same bound (A = 0 would be
		// theirs).
		w := lease.WorstInterval(lim, p.MaxAge.Milliseconds(), all)
		worst = fmt.Sprintf("%d [%d ms]\t%d", w.Admitted, w.To-w.From, w.Bound)
		admitted = strconv.Itoa(len(all))
	}
	dec := n.Load()
	if mode == "local" {
		calls.Store(0)
	}
	fmt.Printf("leasebench\t%s\t%s\t%d\t%.0f\t%.4f\t%.3f\t%s\t%s\n", name, mode, dec, float64(dec)/elapsed.Seconds(),
		float64(calls.Load())/float64(max(dec, 1)), (cpu1-cpu0)*1e6/float64(max(dec, 1)), admitted, worst)
	if fails.Load() > 0 {
		log.Printf("%s %s: %d errors", name, mode, fails.Load())
	}
}

// redisCPU is Redis's CPU seconds (used_cpu_sys + used_cpu_user).
func redisCPU(ctx context.Context, c redis.UniversalClient) float64 {
	info, err := c.Info(ctx, "cpu").Result()
	if err != nil {
		log.Fatal(err)
	}
	var cpu float64
	for _, line := range strings.Split(info, "\r\n") {
		k, v, _ := strings.Cut(line, ":")
		if k == "used_cpu_sys" || k == "used_cpu_user" {
			f, _ := strconv.ParseFloat(v, 64)
			cpu += f
		}
	}
	return cpu
}
