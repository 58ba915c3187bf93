package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/simulate"
)

// runCompare implements `sluicectl simulate compare`: it replays the same arrivals through
// each of several algorithms with the same parameters, on the same store code as simulate,
// prints a table of the requests each allowed and denied and the most it admitted in any
// interval of one window, and with --plot draws one panel per algorithm. Exit codes as simulate.
func runCompare(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("simulate compare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, simulateUsage, "\nflags of compare:\n")
		fs.PrintDefaults()
	}
	algorithms := fs.String("algorithms", simulate.DefaultCompare, "comma-separated algorithms; LeakyBucket/Queue is the leaky bucket in Queue mode")
	limit := fs.Int64("limit", 0, "units admitted per window (the rate, for the buckets)")
	window := fs.Duration("window", 0, "the window, a whole number of ms (e.g. 1s, 60s, 250ms)")
	burst := fs.Int64("burst", 0, "bucket capacity for TokenBucket and LeakyBucket (default the limit)")
	maxDelay := fs.Duration("max-delay", 0, "longest wait of a LeakyBucket/Queue request")
	cost := fs.Int64("cost", 1, "units each arrival takes")
	storeName := fs.String("store", "memory", "store to run the limiters on: memory or redis")
	redisURL := fs.String("redis-url", "", "Redis for --store redis")
	plotFile := fs.String("plot", "", "draw requests offered and admitted over time, a panel per algorithm, into this PNG file")
	plotBucket := fs.Duration("plot-bucket", 0, "the plot's bucket of time, a whole number of ms (default window/10)")
	title := fs.String("title", "", "the figure's title (default: the parameters)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	usageErr := func(format string, args ...any) int {
		fmt.Fprintf(stderr, "sluicectl simulate compare: "+format+"\n", args...)
		return 2
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return usageErr("unexpected argument %q", fs.Arg(0))
	}
	lims, err := simulate.Limits(*algorithms, limiter.Limit{Limit: *limit, Window: *window, Burst: *burst, MaxDelay: *maxDelay})
	if err != nil {
		return usageErr("%v", err)
	}
	if *cost < 1 {
		return usageErr("cost %d is below 1", *cost)
	}
	bucket, err := simulate.BucketMs(*plotBucket, *window)
	if err != nil {
		return usageErr("%v", err)
	}
	trace, err := io.ReadAll(stdin)
	if err != nil {
		fmt.Fprintf(stderr, "sluicectl simulate compare: reading arrivals: %v\n", err)
		return 1
	}

	runs := make([]*simulate.Run, 0, len(lims))
	for _, lim := range lims {
		store, closeStore, err := simulate.OpenStore(*storeName, *redisURL) // a fresh store per algorithm
		if err != nil {
			return usageErr("%v", err)
		}
		run, err := simulate.ReplayRun(bytes.NewReader(trace), store, lim, *cost)
		closeStore()
		if err != nil {
			fmt.Fprintf(stderr, "sluicectl simulate compare: %s: %v\n", lim.Name(), err)
			return 1
		}
		runs = append(runs, run)
	}
	if err := simulate.WriteTable(stdout, runs, *window); err != nil {
		fmt.Fprintf(stderr, "sluicectl simulate compare: %v\n", err)
		return 1
	}
	if *plotFile != "" {
		t := *title
		if t == "" {
			t = simulate.CompareTitle(runs)
		}
		if err := simulate.Plot(*plotFile, t, runs, bucket); err != nil {
			fmt.Fprintf(stderr, "sluicectl simulate compare: %v\n", err)
			return 1
		}
	}
	return 0
}
