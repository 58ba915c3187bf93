package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/limiter/redisstore"
)

const simulateUsage = `usage: sluicectl simulate --algorithm ALG --limit N --window D [--burst N]
         [--mode Meter|Queue] [--max-delay D] [--cost N] [--store memory|redis [--redis-url URL]] [--summary]
         [--plot FILE.png [--plot-bucket D]] < arrivals
       sluicectl simulate compare --algorithms ALG,ALG,... --limit N --window D [--burst N]
         [--max-delay D] [--cost N] [--store memory|redis [--redis-url URL]] [--plot FILE.png [--plot-bucket D]]
         [--title TEXT] < arrivals

Replays arrivals, one per line in ms since the Unix epoch (non-decreasing; blank lines are
ignored), through one key of a limiter, and prints "<ms> allow", "<ms> allow delay=<ms>"
(LeakyBucket Queue) or "<ms> deny" for each, then "allowed=N denied=M". --plot also draws the
requests offered and admitted per --plot-bucket (default window/10) into a PNG.

compare replays the same arrivals through each algorithm (LeakyBucket/Queue names the leaky
bucket in Queue mode) and prints, for each, the requests allowed and denied and the most admitted
in any interval of one window; --plot draws one panel per algorithm.
`

// simulateKey is the one key the simulation uses.
const simulateKey = "simulate"

// runSimulate implements `sluicectl simulate` and returns the exit code: 0 on success, 1 when the
// input is bad or the store fails, 2 for a usage error.
func runSimulate(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "compare" {
		return runCompare(args[1:], stdin, stdout, stderr)
	}
	fs := flag.NewFlagSet("simulate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, simulateUsage, "\nflags:\n")
		fs.PrintDefaults()
	}
	algorithm := fs.String("algorithm", "", "FixedWindow, SlidingWindowLog, SlidingWindowCounter, TokenBucket or LeakyBucket")
	limit := fs.Int64("limit", 0, "units admitted per window (the rate, for the buckets)")
	window := fs.Duration("window", 0, "the window, a whole number of ms (e.g. 1s, 60s, 250ms)")
	burst := fs.Int64("burst", 0, "bucket capacity for TokenBucket and LeakyBucket (default the limit)")
	mode := fs.String("mode", "", "LeakyBucket mode: Meter (default) or Queue")
	maxDelay := fs.Duration("max-delay", 0, "longest wait of a LeakyBucket Queue request")
	cost := fs.Int64("cost", 1, "units each arrival takes")
	storeName := fs.String("store", "memory", "store to run the limiter on: memory or redis")
	redisURL := fs.String("redis-url", "", "Redis for --store redis, e.g. redis://127.0.0.1:6379/0")
	summary := fs.Bool("summary", false, "print only the allowed=N denied=M line")
	plotFile := fs.String("plot", "", "also draw requests offered and admitted over time into this PNG file")
	plotBucket := fs.Duration("plot-bucket", 0, "the plot's bucket of time, a whole number of ms (default window/10)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "sluicectl simulate: unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return 2
	}
	lim := limiter.Limit{
		Algorithm: limiter.Algorithm(*algorithm),
		Limit:     *limit,
		Window:    *window,
		Burst:     *burst,
		Mode:      limiter.LeakyMode(*mode),
		MaxDelay:  *maxDelay,
	}
	if err := lim.Validate(); err != nil {
		fmt.Fprintf(stderr, "sluicectl simulate: %v\n", err)
		return 2
	}
	if *cost < 1 {
		fmt.Fprintf(stderr, "sluicectl simulate: cost %d is below 1\n", *cost)
		return 2
	}
	bucket, err := plotBucketMs(*plotBucket, lim.Window)
	if err != nil {
		fmt.Fprintf(stderr, "sluicectl simulate: %v\n", err)
		return 2
	}
	store, closeStore, err := openStore(*storeName, *redisURL)
	if err != nil {
		fmt.Fprintf(stderr, "sluicectl simulate: %v\n", err)
		return 2
	}
	defer closeStore()

	out := bufio.NewWriter(stdout)
	defer out.Flush()
	queue := isQueue(lim)
	allowed, denied := 0, 0
	run := newRun(lim, *cost)
	err = replay(stdin, store, lim, *cost, func(at int64, r limiter.Result) {
		if r.Allowed {
			allowed++
		} else {
			denied++
		}
		if *plotFile != "" {
			run.record(at, r)
		}
		if *summary {
			return
		}
		switch {
		case !r.Allowed:
			fmt.Fprintf(out, "%d deny\n", at)
		case queue:
			fmt.Fprintf(out, "%d allow delay=%d\n", at, r.Delay.Milliseconds())
		default:
			fmt.Fprintf(out, "%d allow\n", at)
		}
	})
	if err != nil {
		return failInput(out, stderr, "%v", err)
	}
	fmt.Fprintf(out, "allowed=%d denied=%d\n", allowed, denied)
	if err := out.Flush(); err != nil {
		fmt.Fprintf(stderr, "sluicectl simulate: %v\n", err)
		return 1
	}
	if *plotFile != "" {
		if err := plotRuns(*plotFile, run.title(), []*simRun{run}, bucket); err != nil {
			fmt.Fprintf(stderr, "sluicectl simulate: %v\n", err)
			return 1
		}
	}
	return 0
}

// isQueue reports whether lim is a leaky bucket in Queue mode, whose admitted requests wait.
func isQueue(lim limiter.Limit) bool {
	return lim.Algorithm == limiter.LeakyBucket && lim.Mode == limiter.Queue
}

// replay reads arrivals from in, one per line in ms since the Unix epoch (non-decreasing; blank
// lines ignored), decides each with store under lim at cost, and calls each with the arrival and
// the decision, in order. It stops at the first bad line or store error and returns it, naming
// the line. simulate and simulate compare both run on it.
func replay(in io.Reader, store limiter.Store, lim limiter.Limit, cost int64, each func(at int64, r limiter.Result)) error {
	ctx := context.Background()
	prev := int64(-1)
	sc := bufio.NewScanner(in)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		at, err := strconv.ParseInt(text, 10, 64)
		switch {
		case err != nil:
			return fmt.Errorf("line %d: %q is not a whole number of ms since the Unix epoch", line, text)
		case at < 0 || at > limiter.MaxNowMs:
			return fmt.Errorf("line %d: %d is outside 0..%d ms since the Unix epoch", line, at, limiter.MaxNowMs)
		case at < prev:
			return fmt.Errorf("line %d: %d is before the arrival before it (%d); arrivals must not decrease", line, at, prev)
		}
		prev = at
		r, err := store.Take(ctx, simulateKey, lim, cost, time.UnixMilli(at))
		if err != nil {
			return fmt.Errorf("line %d: %w", line, err)
		}
		each(at, r)
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("reading arrivals: %w", err)
	}
	return nil
}

// failInput flushes the decisions printed so far, reports a bad input and returns exit code 1.
func failInput(out *bufio.Writer, stderr io.Writer, format string, args ...any) int {
	out.Flush()
	fmt.Fprintf(stderr, "sluicectl simulate: "+format+"\n", args...)
	return 1
}

// openStore returns the named store and a function that releases it. The simulation runs on
// the same store code as the sidecar: "memory" is the sidecar's local fallback, "redis" its
// Redis store, here with the input's instants as the clock (not Redis's TIME) and keys under a
// prefix of their own, so that a replay is exact and repeatable.
func openStore(name, redisURL string) (limiter.Store, func(), error) {
	switch name {
	case "memory":
		if redisURL != "" {
			return nil, nil, errors.New("--redis-url goes with --store redis")
		}
		return limiter.NewMemoryStore(limiter.MemoryStoreOptions{}), func() {}, nil
	case "redis":
		if redisURL == "" {
			return nil, nil, errors.New("--store redis needs --redis-url")
		}
		client, err := redisstore.NewClientFromURL(redisURL)
		if err != nil {
			return nil, nil, err
		}
		store := redisstore.New(client, redisstore.Options{
			Prefix:  fmt.Sprintf("sluicectl-simulate-%d", time.Now().UnixNano()),
			Timeout: 5 * time.Second, ExplicitTime: true,
		})
		return store, func() { _ = store.Close(); _ = client.Close() }, nil
	default:
		return nil, nil, fmt.Errorf("unknown store %q (want memory or redis)", name)
	}
}
