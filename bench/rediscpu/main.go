// Command rediscpu measures what redisstore.Store costs Redis: Redis CPU time (INFO cpu,
// used_cpu_sys + used_cpu_user, summed over a cluster's masters) per decision, and decisions
// per script call (INFO commandstats, evalsha + eval) and per round trip (INFO stats
// total_reads_processed: the reads of client input, one per pipeline or command that arrives on
// its own), for one hot key or many distinct keys at each number of concurrent callers. One
// line per case, tab-separated:
//
//	rediscpu <topology> <keys> <callers> <decisions> <cpu µs per decision> <decisions per script call> <errors> <decisions per read>
//
// With -takes (e.g. 1,14,32) it isolates the script's cost instead: each script call is one
// TakeRequest of that many takes, all on one hot key or on as many distinct keys (out of
// 10,000), sent by 4 callers one after another (no coalescing), so every call carries exactly
// that many decisions; Redis's time inside EVALSHA (INFO commandstats usec) per call and per
// decision isolates the script from the per-command overhead of the pipelines:
//
//	script <topology> <keys> <takes per call> <decisions> <cpu µs per decision> <script µs per call> <errors>
//
// With -piped N it measures the TokenBucket take alone as the issue did with redis-benchmark
// -P 32 -c 50 (whose arguments cannot carry the request script's binary numbers): N EVALSHA
// calls from 50 connections in pipelines of 32, of the naive hash token bucket (one key of
// 10,000 per call) and of the request script (-request-lua, its source) deciding one Take of
// a never-denying TokenBucket, one key of 10,000 per call, each call's ARGV built here as
// request.go's scriptCall builds it; then each one's Redis commands alone, without a decision
// (naive-commands, request-commands); three rounds of them in turn, and for each script the
// median of its rounds' calls per second and the median of their Redis CPU per call:
//
//	piped <script> <calls per second> <cpu µs per call>
//
// bench/rediscpu.sh runs it next to redis-benchmark references; the same source builds
// against an earlier commit's store for a side-by-side run.
package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"log"
	"math"
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
	url := flag.String("redis-url", "", "redis:// or redis+cluster:// URL")
	callers := flag.String("callers", "1,8,50", "concurrent callers, comma-separated")
	keys := flag.String("keys", "1,10000", "distinct keys, comma-separated (1: one hot key)")
	duration := flag.Duration("duration", 2*time.Second, "per case")
	topo := flag.String("name", "single", "topology name for the output")
	takes := flag.String("takes", "", "script mode: takes per script call, comma-separated")
	piped := flag.Int("piped", 0, "piped mode: script calls per script")
	requestLua := flag.String("request-lua", "", "piped mode: the request script's source files, comma-separated, in order")
	printNaive := flag.Bool("naive-script", false, "print the naive reference script (bench/rediscpu.sh's) and exit")
	flag.Parse()
	if *printNaive {
		fmt.Print(naiveTB)
		return
	}
	client, err := redisstore.NewClientFromURL(*url)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	lim := limiter.Limit{Algorithm: limiter.TokenBucket, Limit: 100_000_000, Window: time.Second}
	if *piped > 0 {
		pipedMode(ctx, client, *requestLua, *piped)
		return
	}
	if *takes != "" {
		scriptMode(ctx, client, lim, *topo, *keys, *takes, *duration)
		return
	}
	for _, ks := range strings.Split(*keys, ",") {
		nk, _ := strconv.Atoi(ks)
		for _, cs := range strings.Split(*callers, ",") {
			c, _ := strconv.Atoi(cs)
			s := redisstore.New(client, redisstore.Options{Prefix: fmt.Sprintf("cpu%d-%d-%d", time.Now().UnixNano()%1e6, nk, c), Timeout: time.Second})
			// Warm: scripts loaded, connections dialed.
			for i := range nk {
				_, _ = s.Take(ctx, "k"+strconv.Itoa(i), lim, 1, time.Time{})
			}
			cpu0, calls0, reads0, _ := stats(ctx, client)
			var n, fails atomic.Int64
			stop := time.Now().Add(*duration)
			var wg sync.WaitGroup
			for g := range c {
				wg.Go(func() {
					for i := g; time.Now().Before(stop); i += c {
						if _, err := s.Take(ctx, "k"+strconv.Itoa(i%nk), lim, 1, time.Time{}); err != nil {
							fails.Add(1)
						} else {
							n.Add(1)
						}
					}
				})
			}
			wg.Wait()
			cpu1, calls1, reads1, _ := stats(ctx, client)
			_ = s.Close()
			d := n.Load()
			fmt.Printf("rediscpu\t%s\t%d\t%d\t%d\t%.2f\t%.2f\t%d\t%.2f\n", *topo, nk, c, d, (cpu1-cpu0)*1e6/float64(d),
				float64(d)/float64(calls1-calls0), fails.Load(), float64(d)/float64(reads1-reads0))
		}
	}
}

// scriptMode prints a script line per number of keys and of takes per call (see the package
// comment).
func scriptMode(ctx context.Context, client redis.UniversalClient, lim limiter.Limit, topo, keys, takes string, duration time.Duration) {
	const callers = 4
	for _, ks := range strings.Split(keys, ",") {
		nk, _ := strconv.Atoi(ks)
		for _, ts := range strings.Split(takes, ",") {
			g, _ := strconv.Atoi(ts)
			s := redisstore.New(client, redisstore.Options{Prefix: fmt.Sprintf("scr%d-%d-%d", time.Now().UnixNano()%1e6, nk, g), Timeout: time.Second})
			request := func(first int) error {
				tk := make([]limiter.Take, g)
				for j := range tk {
					k := "hot"
					if nk > 1 {
						k = "k" + strconv.Itoa((first+j)%nk)
					}
					tk[j] = limiter.Take{Key: k, Limit: lim, N: 1}
				}
				res := make([]limiter.Result, g)
				_, err := s.TakeRequest(ctx, tk, time.Time{}, res)
				return err
			}
			for i := 0; i < nk; i += g { // warm: every key written once
				_ = request(i)
			}
			cpu0, calls0, _, usec0 := stats(ctx, client)
			var n, fails atomic.Int64
			stop := time.Now().Add(duration)
			var wg sync.WaitGroup
			for c := range callers {
				wg.Go(func() {
					for i := c * g; time.Now().Before(stop); i += callers * g {
						if err := request(i); err != nil {
							fails.Add(1)
						} else {
							n.Add(int64(g))
						}
					}
				})
			}
			wg.Wait()
			cpu1, calls1, _, usec1 := stats(ctx, client)
			_ = s.Close()
			d := n.Load()
			fmt.Printf("script\t%s\t%d\t%d\t%d\t%.2f\t%.2f\t%d\n", topo, nk, g, d, (cpu1-cpu0)*1e6/float64(d),
				float64(usec1-usec0)/float64(calls1-calls0), fails.Load())
		}
	}
}

// naiveTB is the reference: a float token bucket on a hash, now passed in; ARGV rate
// per ms, capacity, now. bench/rediscpu.sh takes it from -naive-script.
const naiveTB = `local rate, cap, now = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local v = redis.call("HMGET", KEYS[1], "t", "ts")
local t, ts = tonumber(v[1]) or cap, tonumber(v[2]) or now
t = math.min(cap, t + (now - ts) * rate)
local ok = 0
if t >= 1 then t = t - 1; ok = 1 end
redis.call("HSET", KEYS[1], "t", t, "ts", now)
redis.call("PEXPIRE", KEYS[1], 60000)
return ok`

// The Redis commands of each take alone, without a decision: what a call of the naive script
// and of the request script's lone TokenBucket take spend in Redis commands (the call, then
// HMGET, HSET and PEXPIRE; or TIME, GET and a SET with a TTL of a 12-byte state, packBucket's
// size). The request script's is the floor of an exact decision on Redis's clock whose key
// expires: no Lua of the decision can make its call cheaper than this.
const (
	naiveCommands   = `redis.call("HMGET", KEYS[1], "t", "ts") redis.call("HSET", KEYS[1], "t", 99, "ts", 1000) redis.call("PEXPIRE", KEYS[1], 60000) return 1`
	requestCommands = `redis.call("TIME") redis.call("GET", KEYS[1]) redis.call("SET", KEYS[1], "0123456789ab", "PX", 1000) return {1}`
)

// pipedMode prints a piped line for the naive script and for the request script's Take (see
// the package comment), the naive one first.
func pipedMode(ctx context.Context, client redis.UniversalClient, requestLua string, n int) {
	var src []byte
	for _, f := range strings.Split(requestLua, ",") {
		b, err := os.ReadFile(f)
		if err != nil {
			log.Fatal(err)
		}
		src = append(src, b...)
	}
	// The request script's numbers for one Take (lua/request.lua): minTTL 0 (server time),
	// kinds 1 (enforced takes), one limit (tb, L 1e8, W 1000 ms, cap 1e8, M 0), and the take:
	// flag 32 (a Take), key 1, limit 1, cost 1 = 32 + 128*512*512.
	var nums []byte
	for _, v := range []int64{0, 1, 1, 4, 100_000_000, 1000, 100_000_000, 0, 32 + 128*512*512} {
		nums = binary.LittleEndian.AppendUint64(nums, math.Float64bits(float64(v)))
	}
	scripts := []struct {
		name, prefix string
		sc           *redis.Script
		args         []any
	}{
		{"naive-hash-tb", "naive:", redis.NewScript(naiveTB), []any{0.001, 100, 1000}},
		{"request-tb-take", "tb:", redis.NewScript(string(src)), []any{"", nums}},
		{"naive-commands", "naivecmd:", redis.NewScript(naiveCommands), nil},
		{"request-commands", "requestcmd:", redis.NewScript(requestCommands), nil},
	}
	for _, sc := range scripts {
		if err := sc.sc.Run(ctx, client, []string{sc.prefix + "probe"}, sc.args...).Err(); err != nil {
			log.Fatalf("%s rejects the benchmark's arguments: %v", sc.name, err)
		}
	}
	// Three rounds, the scripts in turn within each, and each script's medians: this machine's
	// speed drifts within a minute.
	const rounds, conns, depth = 3, 50, 32
	rate, cpu := make([][]float64, len(scripts)), make([][]float64, len(scripts))
	for range rounds {
		for i, sc := range scripts {
			cpu0, _, _, _ := stats(ctx, client)
			start := time.Now()
			var next atomic.Int64
			var wg sync.WaitGroup
			for range conns {
				wg.Go(func() {
					for j := next.Add(depth); j <= int64(n); j = next.Add(depth) {
						pipe := client.Pipeline()
						for k := range int64(depth) {
							key := sc.prefix + strconv.FormatInt((j+k)*7919%10_000, 10) // spread over 10,000 keys
							pipe.EvalSha(ctx, sc.sc.Hash(), []string{key}, sc.args...)
						}
						if _, err := pipe.Exec(ctx); err != nil {
							log.Fatalf("%s: %v", sc.name, err)
						}
					}
				})
			}
			wg.Wait()
			d := time.Since(start)
			cpu1, _, _, _ := stats(ctx, client)
			calls := float64(n / depth * depth)
			rate[i] = append(rate[i], calls/d.Seconds())
			cpu[i] = append(cpu[i], (cpu1-cpu0)*1e6/calls)
		}
	}
	for i, sc := range scripts {
		slices.Sort(rate[i])
		slices.Sort(cpu[i])
		fmt.Printf("piped\t%s\t%.0f\t%.2f\n", sc.name, rate[i][rounds/2], cpu[i][rounds/2])
	}
}

// stats sums Redis CPU seconds, script calls, reads of client input and µs spent in scripts
// over the masters.
func stats(ctx context.Context, client redis.UniversalClient) (cpu float64, calls, reads, usec int64) {
	var mu sync.Mutex
	one := func(ctx context.Context, c *redis.Client) error {
		info, err := c.Info(ctx, "cpu", "commandstats", "stats").Result()
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		for _, line := range strings.Split(info, "\r\n") {
			k, v, _ := strings.Cut(line, ":")
			switch k {
			case "used_cpu_sys", "used_cpu_user":
				f, _ := strconv.ParseFloat(v, 64)
				cpu += f
			case "total_reads_processed":
				n, _ := strconv.ParseInt(v, 10, 64)
				reads += n
			case "cmdstat_evalsha", "cmdstat_eval":
				// calls=N,usec=...
				f := strings.Split(v, ",")
				n, _ := strconv.ParseInt(strings.TrimPrefix(f[0], "calls="), 10, 64)
				u, _ := strconv.ParseInt(strings.TrimPrefix(f[1], "usec="), 10, 64)
				calls += n
				usec += u
			}
		}
		return nil
	}
	var err error
	if cc, ok := client.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, one)
	} else {
		err = one(ctx, client.(*redis.Client))
	}
	if err != nil {
		log.Fatal(err)
	}
	return cpu, calls, reads, usec
}
