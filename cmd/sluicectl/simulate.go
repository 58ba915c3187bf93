package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/limiter/lease"
	"github.com/sluice-dev/sluice/internal/simulate"
)

const simulateUsage = `usage: sluicectl simulate --algorithm ALG --limit N (--window D | --calendar PERIOD@ZONE) [--burst N]
         [--mode Meter|Queue] [--max-delay D] [--cost N] [--store memory|redis [--redis-url URL]] [--summary]
         [--plot FILE.png [--plot-bucket D]] < arrivals
       sluicectl simulate --algorithm ALG --limit N --window D [--burst N] [--cost N]
         --pods N --lease-max-age D [--lease-max-units K] [--store memory|redis [--redis-url URL]]
         [--plot FILE.png [--plot-bucket D]] < arrivals
       sluicectl simulate compare --algorithms ALG,ALG,... --limit N --window D [--burst N]
         [--max-delay D] [--cost N] [--store memory|redis [--redis-url URL]] [--plot FILE.png [--plot-bucket D]]
         [--title TEXT] < arrivals
       sluicectl simulate --algorithm Concurrency --limit N [--store memory|redis [--redis-url URL]]
         [--summary] < requests
       sluicectl simulate rules --rule NAME=ALG,LIMIT,WINDOW[,shadow][,countWhen=CODES][,responseCost=MIN] [--rule ...]
         [--store memory|redis [--redis-url URL]] < requests

Replays arrivals, one per line in ms since the Unix epoch (non-decreasing; blank lines are
ignored), through one key of a limiter, and prints "<ms> allow", "<ms> allow delay=<ms>"
(LeakyBucket Queue) or "<ms> deny" for each, then "allowed=N denied=M". --plot also draws the
requests offered and admitted per --plot-bucket (default window/10) into a PNG. --calendar
Month@Europe/Berlin (Day, Week or Month) replaces --window for FixedWindow: windows begin at
local midnight of the zone.

With --lease-max-age the rule is leased (the rule's lease: {maxAge, maxUnits}): the arrivals
are spread over --pods simulated sidecars, round robin, or by a second column naming the pod
("<ms> <pod>"), each leasing units off the one shared store; the same arrivals also go through
the exact rule on a store of their own. It prints both runs' totals and store calls, the worst
excess of the leased run over the exact one in any interval, the bound and the interval that
comes closest to it, and the most units held unused at once. --plot draws both runs on one
time axis: the units each admitted per --plot-bucket, and each one's units in the last window
(in the aligned window for FixedWindow and SlidingWindowCounter) under the exact rule's bound
and the leased rule's.

With --algorithm Concurrency each line is "<ms> <duration ms>", a request's arrival and how
long its response takes (at most 24h): a request holds one of --limit slots from its arrival
until it ends, and a slot frees before an arrival at the instant its request ends. It prints
"<ms> allow until=<ms>" or "<ms> deny" for each, then "allowed=N denied=M most-in-flight=K".

compare replays the same arrivals through each algorithm (LeakyBucket/Queue names the leaky
bucket in Queue mode) and prints, for each, the requests allowed and denied and the most admitted
in any interval of one window; --plot draws one panel per algorithm.

rules decides requests against several rules as the sidecar does, all of a request's rules as
one unit: each line is "<ms> RULE=KEY [RULE=KEY...]", the rules the request matches with its key
under each (a rule's WINDOW may be PERIOD@ZONE), and status=NNN the response's status, which
a countWhen=401|500-599 rule charges after the decision only when it is listed, and cost=N the
cost the response reported, which a responseCost=MIN rule (charged MIN at admission) is charged
beyond MIN after the decision (nothing more without cost=); it prints "<ms> allow charged=RULES"
or "<ms> deny by=RULES charged=-" (a denied request charges no rule), then "allowed=N denied=M".
`

// runSimulate implements `sluicectl simulate` and returns the exit code: 0 on success, 1 when the
// input is bad or the store fails, 2 for a usage error.
func runSimulate(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "compare" {
		return runCompare(args[1:], stdin, stdout, stderr)
	}
	if len(args) > 0 && args[0] == "rules" {
		return runRules(args[1:], stdin, stdout, stderr)
	}
	fs := flag.NewFlagSet("simulate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, simulateUsage, "\nflags:\n")
		fs.PrintDefaults()
	}
	algorithm := fs.String("algorithm", "", "FixedWindow, SlidingWindowLog, SlidingWindowCounter, TokenBucket, LeakyBucket or Concurrency")
	limit := fs.Int64("limit", 0, "units admitted per window (the rate, for the buckets); Concurrency: requests in flight")
	window := fs.Duration("window", 0, "the window, a whole number of ms (e.g. 1s, 60s, 250ms)")
	burst := fs.Int64("burst", 0, "bucket capacity for TokenBucket and LeakyBucket (default the limit)")
	mode := fs.String("mode", "", "LeakyBucket mode: Meter (default) or Queue")
	maxDelay := fs.Duration("max-delay", 0, "longest wait of a LeakyBucket Queue request")
	cost := fs.Int64("cost", 1, "units each arrival takes")
	calendar := fs.String("calendar", "", "a calendar window instead of --window, PERIOD@ZONE: Day, Week or Month in an IANA zone (FixedWindow)")
	storeName := fs.String("store", "memory", "store to run the limiter on: memory or redis")
	redisURL := fs.String("redis-url", "", "Redis for --store redis, e.g. redis://127.0.0.1:6379/0")
	summary := fs.Bool("summary", false, "print only the allowed=N denied=M line")
	plotFile := fs.String("plot", "", "also draw requests offered and admitted over time into this PNG file")
	plotBucket := fs.Duration("plot-bucket", 0, "the plot's bucket of time, a whole number of ms (default window/10)")
	pods := fs.Int("pods", 1, "simulated sidecars sharing the store, with --lease-max-age")
	leaseMaxAge := fs.Duration("lease-max-age", 0, "lease the rule: how long leased units stay usable, 1ms..10s in whole ms")
	leaseMaxUnits := fs.Int64("lease-max-units", 0, "cap on one lease (default the rate times --lease-max-age)")
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
	if limiter.Algorithm(*algorithm) == limiter.Concurrency {
		var set []string
		fs.Visit(func(f *flag.Flag) { set = append(set, f.Name) })
		return runConcurrency(stdin, stdout, stderr, set, *limit, *storeName, *redisURL, *summary)
	}
	lim := limiter.Limit{
		Algorithm: limiter.Algorithm(*algorithm),
		Limit:     *limit,
		Window:    *window,
		Burst:     *burst,
		Mode:      limiter.LeakyMode(*mode),
		MaxDelay:  *maxDelay,
	}
	if *calendar != "" {
		if *window != 0 {
			fmt.Fprintln(stderr, "sluicectl simulate: set one of --window and --calendar")
			return 2
		}
		if err := simulate.Calendar(&lim, *calendar); err != nil {
			fmt.Fprintf(stderr, "sluicectl simulate: %v\n", err)
			return 2
		}
	}
	if err := lim.Validate(); err != nil {
		fmt.Fprintf(stderr, "sluicectl simulate: %v\n", err)
		return 2
	}
	if *cost < 1 {
		fmt.Fprintf(stderr, "sluicectl simulate: cost %d is below 1\n", *cost)
		return 2
	}
	bucket, err := simulate.BucketMs(*plotBucket, lim.Window)
	if err != nil {
		fmt.Fprintf(stderr, "sluicectl simulate: %v\n", err)
		return 2
	}
	leased := *leaseMaxAge != 0 || *leaseMaxUnits != 0 || *pods != 1
	if leased {
		if *summary {
			fmt.Fprintln(stderr, "sluicectl simulate: --summary does not go with a leased rule")
			return 2
		}
		return runLeased(stdin, stdout, stderr, lim, *cost, *pods, *leaseMaxAge, *leaseMaxUnits, *storeName, *redisURL, *plotFile, bucket)
	}
	store, closeStore, err := simulate.OpenStore(*storeName, *redisURL)
	if err != nil {
		fmt.Fprintf(stderr, "sluicectl simulate: %v\n", err)
		return 2
	}
	defer closeStore()

	run, err := simulate.Simulate(stdin, stdout, store, lim, *cost, *summary)
	if err != nil {
		fmt.Fprintf(stderr, "sluicectl simulate: %v\n", err)
		return 1
	}
	if *plotFile != "" {
		if err := simulate.Plot(*plotFile, run.Title(), []*simulate.Run{run}, bucket); err != nil {
			fmt.Fprintf(stderr, "sluicectl simulate: %v\n", err)
			return 1
		}
	}
	return 0
}

// runLeased is `sluicectl simulate` of a leased rule over several pods (see simulateUsage).
func runLeased(stdin io.Reader, stdout, stderr io.Writer, lim limiter.Limit, cost int64, pods int,
	maxAge time.Duration, maxUnits int64, storeName, redisURL, plotFile string, bucket int64) int {
	usageErr := func(format string, args ...any) int {
		fmt.Fprintf(stderr, "sluicectl simulate: "+format+"\n", args...)
		return 2
	}
	if err := lim.Leasable(); err != nil {
		return usageErr("%v", err)
	}
	if pods < 1 || pods > 10_000 {
		return usageErr("--pods %d is outside 1..10000", pods)
	}
	if maxAge < limiter.MinLeaseAge || maxAge > limiter.MaxLeaseAge || maxAge%time.Millisecond != 0 {
		return usageErr("--lease-max-age %s is not a whole number of ms from %s to %s", maxAge, limiter.MinLeaseAge, limiter.MaxLeaseAge)
	}
	if maxUnits < 0 || maxUnits > lim.Capacity() {
		return usageErr("--lease-max-units %d is outside 1..%d (the capacity)", maxUnits, lim.Capacity())
	}
	_, closeStore, err := simulate.OpenStore(storeName, redisURL)
	if err != nil {
		return usageErr("%v", err)
	}
	closeStore()
	arrivals, err := simulate.ReadFleetTrace(stdin, pods)
	if err != nil {
		fmt.Fprintf(stderr, "sluicectl simulate: %v\n", err)
		return 1
	}
	open := func() (lease.Store, func(), error) {
		st, closeStore, err := simulate.OpenStore(storeName, redisURL)
		if err != nil {
			return nil, nil, err
		}
		ls, ok := st.(lease.Store)
		if !ok {
			closeStore()
			return nil, nil, fmt.Errorf("store %s cannot lease", storeName)
		}
		return ls, closeStore, nil
	}
	rep, err := simulate.ReplayFleet(arrivals, open, lim, cost, simulate.Fleet{Pods: pods, Lease: lease.Params{MaxAge: maxAge, MaxUnits: maxUnits}})
	if err == nil {
		err = rep.Write(stdout)
	}
	if err == nil && plotFile != "" {
		err = simulate.PlotLease(plotFile, rep, bucket)
	}
	if err != nil {
		fmt.Fprintf(stderr, "sluicectl simulate: %v\n", err)
		return 1
	}
	return 0
}

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
	limit := fs.Int64("limit", 0, "units admitted per window (the rate, for the buckets); Concurrency: requests in flight")
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

// ruleFlags collects repeated --rule flags.
type ruleFlags []simulate.Rule

func (r *ruleFlags) String() string { return fmt.Sprint(len(*r), " rules") }

func (r *ruleFlags) Set(s string) error {
	rule, err := simulate.ParseRule(s)
	if err != nil {
		return err
	}
	*r = append(*r, rule)
	return nil
}

// runRules implements `sluicectl simulate rules`: a trace of requests, each matching some of
// several rules, decided as the sidecar decides them. Exit codes as simulate.
func runRules(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("simulate rules", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, simulateUsage, "\nflags of rules:\n")
		fs.PrintDefaults()
	}
	var rules ruleFlags
	fs.Var(&rules, "rule", "a rule, NAME=ALGORITHM,LIMIT,WINDOW[,shadow] (e.g. per-ip=FixedWindow,5,1h); repeat for each rule")
	storeName := fs.String("store", "memory", "store to run the limiter on: memory or redis")
	redisURL := fs.String("redis-url", "", "Redis for --store redis")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	usageErr := func(format string, args ...any) int {
		fmt.Fprintf(stderr, "sluicectl simulate rules: "+format+"\n", args...)
		return 2
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return usageErr("unexpected argument %q", fs.Arg(0))
	}
	if len(rules) == 0 {
		return usageErr("at least one --rule is needed")
	}
	store, closeStore, err := simulate.OpenStore(*storeName, *redisURL)
	if err != nil {
		return usageErr("%v", err)
	}
	defer closeStore()
	rs, ok := store.(limiter.RequestStore)
	if !ok {
		return usageErr("store %s cannot decide requests", *storeName)
	}
	if err := simulate.ReplayRules(stdin, stdout, rs, rules); err != nil {
		fmt.Fprintf(stderr, "sluicectl simulate rules: %v\n", err)
		return 1
	}
	return 0
}

// concurrencyFlags are the flags of `sluicectl simulate --algorithm Concurrency`.
var concurrencyFlags = map[string]bool{"algorithm": true, "limit": true, "store": true, "redis-url": true, "summary": true}

// runConcurrency is `sluicectl simulate` of a Concurrency rule: requests with their durations
// (see simulateUsage); set names the flags given.
func runConcurrency(stdin io.Reader, stdout, stderr io.Writer, set []string, limit int64, storeName, redisURL string, summary bool) int {
	for _, name := range set {
		if !concurrencyFlags[name] {
			fmt.Fprintf(stderr, "sluicectl simulate: --%s does not apply to Concurrency: each request holds one slot until it ends\n", name)
			return 2
		}
	}
	lim := limiter.Limit{Algorithm: limiter.Concurrency, Limit: limit, Window: simulate.ConcurrencyWindow}
	if err := lim.Validate(); err != nil {
		fmt.Fprintf(stderr, "sluicectl simulate: %v\n", err)
		return 2
	}
	store, closeStore, err := simulate.OpenStore(storeName, redisURL)
	if err != nil {
		fmt.Fprintf(stderr, "sluicectl simulate: %v\n", err)
		return 2
	}
	defer closeStore()
	slots, ok := store.(simulate.SlotStore)
	if !ok {
		fmt.Fprintf(stderr, "sluicectl simulate: store %s holds no slots\n", storeName)
		return 2
	}
	if err := simulate.Concurrency(stdin, stdout, slots, lim, summary); err != nil {
		fmt.Fprintf(stderr, "sluicectl simulate: %v\n", err)
		return 1
	}
	return 0
}
