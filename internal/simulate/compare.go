package simulate

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/internal/limiter"
)

// DefaultCompare is the algorithms `simulate compare` runs when --algorithms is not given.
const DefaultCompare = "FixedWindow,SlidingWindowLog,SlidingWindowCounter,TokenBucket,LeakyBucket"

// Limits returns one limit per name of the comma-separated list, each base with the name's
// algorithm and, for "LeakyBucket/Meter" or "LeakyBucket/Queue", its mode, and validates each.
func Limits(list string, base limiter.Limit) ([]limiter.Limit, error) {
	var lims []limiter.Limit
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		alg, mode, _ := strings.Cut(name, "/")
		if mode != "" && (alg != string(limiter.LeakyBucket) || (mode != string(limiter.Meter) && mode != string(limiter.Queue))) {
			return nil, fmt.Errorf("%q: only LeakyBucket takes a mode, Meter or Queue", name)
		}
		lim := base
		lim.Algorithm = limiter.Algorithm(alg)
		lim.Mode = limiter.LeakyMode(mode)
		if err := lim.Validate(); err != nil {
			return nil, err
		}
		lims = append(lims, lim)
	}
	return lims, nil
}

// ReplayRun replays the arrivals of in through store under lim at cost (see Replay) and
// returns the run.
func ReplayRun(in io.Reader, store limiter.Store, lim limiter.Limit, cost int64) (*Run, error) {
	run := NewRun(lim, cost)
	if err := Replay(in, store, lim, cost, run.Record); err != nil {
		return nil, err
	}
	return run, nil
}

// WriteTable writes the comparison of runs of the same trace, all with the same window: for
// each, the requests it allowed and denied and the most it admitted in any interval of one
// window.
func WriteTable(w io.Writer, runs []*Run, window time.Duration) error {
	var out strings.Builder
	maxName := len("algorithm")
	for _, r := range runs {
		maxName = max(maxName, len(r.Name()))
	}
	inWindow := "max in any " + window.String()
	fmt.Fprintf(&out, "%-*s  %7s  %7s  %s\n", maxName, "algorithm", "allowed", "denied", inWindow)
	for _, r := range runs {
		fmt.Fprintf(&out, "%-*s  %7d  %7d  %*d\n", maxName, r.Name(), r.allowed, r.denied, len(inWindow), r.MaxInWindow())
	}
	_, err := io.WriteString(w, out.String())
	return err
}

// CompareTitle is the default title of a comparison's figure: the arrivals and the parameters
// the runs share. runs must not be empty.
func CompareTitle(runs []*Run) string {
	return fmt.Sprintf("%d arrivals; %s", len(runs[0].arrivals), runs[0].paramsFor(runs))
}

// paramsFor describes the parameters that runs share, e.g. "limit 10 per 1s, burst 10": the
// burst and the max delay only when some run uses them.
func (r *Run) paramsFor(runs []*Run) string {
	lim := r.lim
	s := fmt.Sprintf("limit %d per %s", lim.Limit, lim.Window)
	bucket, queue := false, false
	for _, o := range runs {
		bucket = bucket || o.lim.Algorithm == limiter.TokenBucket || o.lim.Algorithm == limiter.LeakyBucket
		queue = queue || IsQueue(o.lim)
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
