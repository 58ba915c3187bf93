package simulate

import (
	"bufio"
	"container/heap"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/internal/limiter"
)

// SlotStore is a store that decides Concurrency takes and releases their slots: the sidecar's
// local store and its Redis store both are.
type SlotStore interface {
	limiter.RequestStore
	limiter.SlotStore
}

// ConcurrencyWindow is the Window a replay gives a Concurrency limit: how long a holding lasts
// in Redis unrenewed, so the longest duration a trace may give a request (a replay does not
// renew holdings, and the in-memory store never expires them: both stores agree within it).
const ConcurrencyWindow = limiter.MaxWindow

// Concurrency replays requests with their durations through store under lim (a Concurrency
// limit of ConcurrencyWindow), one per line of in: "<ms> <duration ms>", the arrival in ms
// since the Unix epoch (non-decreasing) and how long its response takes. Before an arrival it
// releases the slots of the admitted requests that have ended by then (a request that ends at
// the instant another arrives has ended first), as the sidecar does once a response is
// finished. It writes "<ms> allow until=<ms>" or "<ms> deny" for each (all but the last line
// left out with summary), then "allowed=N denied=M most-in-flight=K". It stops at the first bad
// line or store error and returns it, naming the line.
func Concurrency(in io.Reader, out io.Writer, store SlotStore, lim limiter.Limit, summary bool) error {
	ctx := context.Background()
	w := bufio.NewWriter(out)
	defer func() { _ = w.Flush() }()
	var (
		running         ends
		holder          int64
		prev            = int64(-1)
		allowed, denied int64
		mostInFlight    int
		res             = make([]limiter.Result, 1)
		sc              = bufio.NewScanner(in)
		maxDur          = ConcurrencyWindow.Milliseconds()
	)
	for line := 1; sc.Scan(); line++ {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if len(f) != 2 {
			return fmt.Errorf("line %d: %q is not \"<ms> <duration ms>\"", line, sc.Text())
		}
		at, err1 := strconv.ParseInt(f[0], 10, 64)
		dur, err2 := strconv.ParseInt(f[1], 10, 64)
		switch {
		case err1 != nil || at < 0 || at > limiter.MaxNowMs-maxDur:
			return fmt.Errorf("line %d: %q is not a whole number of ms since the Unix epoch in 0..%d", line, f[0], limiter.MaxNowMs-maxDur)
		case err2 != nil || dur < 0 || dur > maxDur:
			return fmt.Errorf("line %d: duration %q is not a whole number of ms in 0..%d", line, f[1], maxDur)
		case at < prev:
			return fmt.Errorf("line %d: %d is before the arrival before it (%d); arrivals must not decrease", line, at, prev)
		}
		prev = at
		for running.Len() > 0 && running[0].end <= at {
			e := heap.Pop(&running).(end)
			if err := store.Release(ctx, key, lim, e.holder); err != nil {
				return fmt.Errorf("line %d: releasing the request that ended at %d: %w", line, e.end, err)
			}
		}
		holder++
		takes := []limiter.Take{{Key: key, Limit: lim, N: 1, Holder: holder}}
		ok, err := store.TakeRequest(ctx, takes, time.UnixMilli(at), res)
		if err != nil {
			return fmt.Errorf("line %d: %w", line, err)
		}
		if !ok {
			denied++
			if !summary {
				fmt.Fprintf(w, "%d deny\n", at)
			}
			continue
		}
		allowed++
		heap.Push(&running, end{end: at + dur, holder: holder})
		mostInFlight = max(mostInFlight, running.Len())
		if !summary {
			fmt.Fprintf(w, "%d allow until=%d\n", at, at+dur)
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	for _, e := range running { // the store is left as it was found
		if err := store.Release(ctx, key, lim, e.holder); err != nil {
			return err
		}
	}
	fmt.Fprintf(w, "allowed=%d denied=%d most-in-flight=%d\n", allowed, denied, mostInFlight)
	return w.Flush()
}

// end is an admitted request's end and its holding.
type end struct{ end, holder int64 }

// ends is a min-heap of ends by instant (then by holding, so that a replay is repeatable).
type ends []end

func (h ends) Len() int { return len(h) }
func (h ends) Less(i, j int) bool {
	return h[i].end < h[j].end || h[i].end == h[j].end && h[i].holder < h[j].holder
}
func (h ends) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *ends) Push(x any)   { *h = append(*h, x.(end)) }
func (h *ends) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}
