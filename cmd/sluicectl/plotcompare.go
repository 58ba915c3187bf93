package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/sluice-dev/sluice/internal/limiter"
)

// defaultCompare is the algorithms `simulate compare` runs when --algorithms is not given.
const defaultCompare = "FixedWindow,SlidingWindowLog,SlidingWindowCounter,TokenBucket,LeakyBucket"

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
	algorithms := fs.String("algorithms", defaultCompare, "comma-separated algorithms; LeakyBucket/Queue is the leaky bucket in Queue mode")
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
	var lims []limiter.Limit
	for _, name := range strings.Split(*algorithms, ",") {
		name = strings.TrimSpace(name)
		alg, mode, _ := strings.Cut(name, "/")
		if mode != "" && (alg != string(limiter.LeakyBucket) || (mode != string(limiter.Meter) && mode != string(limiter.Queue))) {
			return usageErr("%q: only LeakyBucket takes a mode, Meter or Queue", name)
		}
		lim := limiter.Limit{
			Algorithm: limiter.Algorithm(alg),
			Limit:     *limit,
			Window:    *window,
			Burst:     *burst,
			Mode:      limiter.LeakyMode(mode),
			MaxDelay:  *maxDelay,
		}
		if err := lim.Validate(); err != nil {
			return usageErr("%v", err)
		}
		lims = append(lims, lim)
	}
	if *cost < 1 {
		return usageErr("cost %d is below 1", *cost)
	}
	bucket, err := plotBucketMs(*plotBucket, *window)
	if err != nil {
		return usageErr("%v", err)
	}
	trace, err := io.ReadAll(stdin)
	if err != nil {
		fmt.Fprintf(stderr, "sluicectl simulate compare: reading arrivals: %v\n", err)
		return 1
	}

	runs := make([]*simRun, 0, len(lims))
	for _, lim := range lims {
		store, closeStore, err := openStore(*storeName, *redisURL) // a fresh store per algorithm
		if err != nil {
			return usageErr("%v", err)
		}
		run := newRun(lim, *cost)
		err = replay(bytes.NewReader(trace), store, lim, *cost, run.record)
		closeStore()
		if err != nil {
			fmt.Fprintf(stderr, "sluicectl simulate compare: %s: %v\n", run.name(), err)
			return 1
		}
		runs = append(runs, run)
	}

	var out strings.Builder
	maxName := len("algorithm")
	for _, r := range runs {
		maxName = max(maxName, len(r.name()))
	}
	inWindow := "max in any " + window.String()
	fmt.Fprintf(&out, "%-*s  %7s  %7s  %s\n", maxName, "algorithm", "allowed", "denied", inWindow)
	for _, r := range runs {
		fmt.Fprintf(&out, "%-*s  %7d  %7d  %*d\n", maxName, r.name(), r.allowed, r.denied, len(inWindow), r.maxInWindow())
	}
	if _, err := io.WriteString(stdout, out.String()); err != nil {
		fmt.Fprintf(stderr, "sluicectl simulate compare: %v\n", err)
		return 1
	}
	if *plotFile != "" {
		t := *title
		if t == "" {
			t = fmt.Sprintf("%d arrivals; %s", len(runs[0].arrivals), runs[0].paramsFor(runs))
		}
		if err := plotRuns(*plotFile, t, runs, bucket); err != nil {
			fmt.Fprintf(stderr, "sluicectl simulate compare: %v\n", err)
			return 1
		}
	}
	return 0
}

// paramsFor describes the parameters that runs share, e.g. "limit 10 per 1s, burst 10": the
// burst and the max delay only when some run uses them.
func (r *simRun) paramsFor(runs []*simRun) string {
	lim := r.lim
	s := fmt.Sprintf("limit %d per %s", lim.Limit, lim.Window)
	bucket, queue := false, false
	for _, o := range runs {
		bucket = bucket || o.lim.Algorithm == limiter.TokenBucket || o.lim.Algorithm == limiter.LeakyBucket
		queue = queue || isQueue(o.lim)
	}
	if bucket {
		s += fmt.Sprintf(", burst %d", limiter.Limit{Algorithm: limiter.TokenBucket, Limit: lim.Limit, Burst: lim.Burst}.Capacity())
	}
	if queue {
		s += fmt.Sprintf(", max delay %s", lim.MaxDelay)
	}
	if r.cost != 1 {
		s += fmt.Sprintf(", cost %d", r.cost)
	}
	return s
}
