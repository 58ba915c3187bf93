// Package simulate replays a trace of arrivals through the limiter, on the same store code as
// the sidecar, and reports and draws what each algorithm admits: `sluicectl simulate` and
// `sluicectl simulate compare` are its flags, and `make plots` draws docs/algorithms.png with it.
package simulate

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/limiter/redisstore"
)

// key is the one key a simulation uses.
const key = "simulate"

// Simulate replays the arrivals of in through store under lim at cost (see Replay) and writes
// each decision to out as "<ms> allow", "<ms> allow delay=<ms>" (LeakyBucket Queue) or
// "<ms> deny", then "allowed=N denied=M"; with summary only that last line. It returns the run
// for a plot. On a bad line or a store error it writes the decisions before it, leaves out the
// totals and returns the error.
func Simulate(in io.Reader, out io.Writer, store limiter.Store, lim limiter.Limit, cost int64, summary bool) (*Run, error) {
	w := bufio.NewWriter(out)
	queue := IsQueue(lim)
	run := NewRun(lim, cost)
	err := Replay(in, store, lim, cost, func(at int64, r limiter.Result) {
		run.Record(at, r)
		switch {
		case summary:
		case !r.Allowed:
			fmt.Fprintf(w, "%d deny\n", at)
		case queue:
			fmt.Fprintf(w, "%d allow delay=%d\n", at, r.Delay.Milliseconds())
		default:
			fmt.Fprintf(w, "%d allow\n", at)
		}
	})
	if err != nil {
		_ = w.Flush()
		return nil, err
	}
	fmt.Fprintf(w, "allowed=%d denied=%d\n", run.allowed, run.denied)
	if err := w.Flush(); err != nil {
		return nil, err
	}
	return run, nil
}

// IsQueue reports whether lim is a leaky bucket in Queue mode, whose admitted requests wait.
func IsQueue(lim limiter.Limit) bool {
	return lim.Algorithm == limiter.LeakyBucket && lim.Mode == limiter.Queue
}

// Replay reads arrivals from in, one per line in ms since the Unix epoch (non-decreasing; blank
// lines ignored), decides each with store under lim at cost, and calls each with the arrival and
// the decision, in order. It stops at the first bad line or store error and returns it, naming
// the line. Simulate and Compare both run on it.
func Replay(in io.Reader, store limiter.Store, lim limiter.Limit, cost int64, each func(at int64, r limiter.Result)) error {
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
		r, err := store.Take(ctx, key, lim, cost, time.UnixMilli(at))
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

// OpenStore returns the named store and a function that releases it. The simulation runs on
// the same store code as the sidecar: "memory" is the sidecar's local fallback, "redis" its
// Redis store, here with the input's instants as the clock (not Redis's TIME) and keys under a
// prefix of their own, so that a replay is exact and repeatable.
func OpenStore(name, redisURL string) (limiter.Store, func(), error) {
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
			Prefix:       fmt.Sprintf("sluicectl-simulate-%d", time.Now().UnixNano()),
			Timeout:      5 * time.Second,
			ExplicitTime: true,
		})
		return store, func() { _ = store.Close(); _ = client.Close() }, nil
	default:
		return nil, nil, fmt.Errorf("unknown store %q (want memory or redis)", name)
	}
}

// Run is one replay of a trace through one limit: its totals, and as much as a plot needs.
type Run struct {
	lim      limiter.Limit
	cost     int64
	arrivals []int64 // ms since the epoch, non-decreasing
	// admitted holds, for each admitted request, the instant it proceeds: its arrival plus its
	// Delay (LeakyBucket Queue), so a queue shows the rate it lets requests through at.
	admitted        []int64
	allowed, denied int
}

// NewRun returns an empty run of lim at cost.
func NewRun(lim limiter.Limit, cost int64) *Run { return &Run{lim: lim, cost: cost} }

// Record adds one decision, of the arrival at ms since the epoch.
func (r *Run) Record(at int64, res limiter.Result) {
	r.arrivals = append(r.arrivals, at)
	if res.Allowed {
		r.allowed++
		r.admitted = append(r.admitted, at+res.Delay.Milliseconds())
	} else {
		r.denied++
	}
}

// Name is the algorithm, with its mode for a leaky bucket given one: "LeakyBucket/Queue".
func (r *Run) Name() string {
	return r.lim.Name()
}

// Params describes the limit's parameters, e.g. "limit 10 per 1s, burst 10".
func (r *Run) Params() string { return r.paramsFor([]*Run{r}) }

// Title is the title of a single simulation's plot.
func (r *Run) Title() string { return r.Name() + ": " + r.Params() }

// MaxInWindow returns the most admitted requests in any interval of one window, (t-W, t]:
// the bound a SlidingWindowLog holds to exactly.
func (r *Run) MaxInWindow() int {
	_, m := trailing(r.admitted, r.lim.WindowMs())
	return m
}
