package simulate

import (
	"fmt"
	"image/color"
	"slices"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/sluice-dev/sluice/internal/limiter"
)

// leasePanelPx is the height of each of PlotLease's two panels.
const leasePanelPx = 250

// LeasePlotHeight is the height in pixels of PlotLease's PNG; it is 800 px wide.
const LeasePlotHeight = figureTitlePx + 2*leasePanelPx

var (
	exactColour  = palette[0] // blue
	leasedColour = palette[1] // red
)

// PlotLease draws rep's two replays of one trace, the exact rule's and the leased rule's, into
// the PNG file, in two panels on one time axis (seconds since the first arrival): above, the
// units offered and admitted by each per bucket (ms); below, what each admitted in the last
// window (for FixedWindow and SlidingWindowCounter: in the current aligned window), with the
// exact rule's bound there and the leased rule's (lease.BoundFormula with T one window).
func PlotLease(file string, rep *LeaseReport, bucket int64) error {
	lim, A := rep.Lim, rep.Fleet.Lease.MaxAge.Milliseconds()
	W := lim.WindowMs()
	origin, end := int64(0), int64(0) // no arrivals: an empty window of time
	if n := len(rep.arrivals); n > 0 {
		origin, end = rep.arrivals[0], rep.arrivals[n-1]
	}
	nb := (end + W - origin + bucket) / bucket // a window past the last arrival, so counts fall back
	if nb > maxPlotBuckets {
		return fmt.Errorf("plot: %d ms to draw make %d buckets of %d ms, more than %d; raise --plot-bucket",
			end+W-origin, nb, bucket, maxPlotBuckets)
	}
	axisEnd := origin + nb*bucket
	sec := func(t int64) float64 { return float64(t-origin) / 1000 }
	exact, leased := rep.exactTimes, rep.leasedTimes
	bucketName := (time.Duration(bucket) * time.Millisecond).String()
	unit := "requests"
	if rep.cost != 1 {
		unit = fmt.Sprintf("units (cost %d a request)", rep.cost)
	}

	top := newPanel(sec(axisEnd))
	top.Title.Text = fmt.Sprintf("admitted per %s: exact %d, leased %d of %d offered",
		bucketName, rep.Exact.Allowed*rep.cost, rep.Leased.Allowed*rep.cost, int64(len(rep.arrivals))*rep.cost)
	top.X.Label.Text = ""
	top.Y.Label.Text = unit + " per " + bucketName
	stepLine := func(c []int) plotter.XYs {
		xy := make(plotter.XYs, 0, len(c)+1)
		for k, n := range c {
			xy = append(xy, plotter.XY{X: sec(origin + int64(k)*bucket), Y: float64(int64(n) * rep.cost)})
		}
		return append(xy, plotter.XY{X: sec(axisEnd), Y: float64(int64(c[len(c)-1]) * rep.cost)})
	}
	offered, _ := plotter.NewLine(stepLine(counts(rep.arrivals, origin, bucket, int(nb))))
	offered.StepStyle = plotter.PostStep
	offered.Color, offered.Width, offered.FillColor = color.Gray{Y: 0x90}, px(1), color.Gray{Y: 0xe0}
	top.Add(offered)
	top.Legend.Add("offered", offered)
	for _, s := range []struct {
		name  string
		times []int64
		c     color.RGBA
	}{{"exact", exact, exactColour}, {"leased", leased, leasedColour}} {
		l, _ := plotter.NewLine(stepLine(counts(s.times, origin, bucket, int(nb))))
		l.StepStyle = plotter.PostStep
		l.Color, l.Width = s.c, px(1.5)
		top.Add(l)
		top.Legend.Add(s.name+" admitted", l)
	}

	bottom := newPanel(sec(axisEnd))
	bottom.X.Label.Text = "time since the first arrival (s)"
	windowed := lim.Algorithm == limiter.FixedWindow || lim.Algorithm == limiter.SlidingWindowCounter
	exactBound, leasedBound := lim.Capacity()+lim.Limit, (lim.Capacity()*W+lim.Limit*(W+A))/W
	what := "in the last " + lim.Window.String()
	if windowed {
		exactBound, leasedBound = lim.Limit, lim.Limit
		what = "in the aligned " + lim.Window.String() + " window"
	}
	bottom.Y.Label.Text = unit + " " + what
	for _, s := range []struct {
		name  string
		times []int64
		c     color.RGBA
	}{{"exact", exact, exactColour}, {"leased", leased, leasedColour}} {
		var steps [][2]int64
		if windowed {
			steps = inWindow(s.times, W)
		} else {
			steps, _ = trailing(s.times, W)
		}
		xy := make(plotter.XYs, 1, len(steps)+2)
		for _, st := range steps {
			xy = append(xy, plotter.XY{X: sec(st[0]), Y: float64(st[1] * rep.cost)})
		}
		xy = append(xy, plotter.XY{X: sec(axisEnd), Y: xy[len(xy)-1].Y})
		l, _ := plotter.NewLine(xy)
		l.StepStyle = plotter.PostStep
		l.Color, l.Width = s.c, px(1.5)
		bottom.Add(l)
		bottom.Legend.Add(s.name+" admitted "+what, l)
	}
	mostExact, mostLeased := rep.MostInWindow()
	bottom.Title.Text = fmt.Sprintf("admitted %s: exact at most %d, leased at most %d (bound %d)",
		what, mostExact, mostLeased, leasedBound)
	hline := func(y int64, c color.RGBA, name string, dashes []vg.Length) {
		l, _ := plotter.NewLine(plotter.XYs{{X: 0, Y: float64(y)}, {X: sec(axisEnd), Y: float64(y)}})
		l.Color, l.Width, l.Dashes = c, px(1.5), dashes
		bottom.Add(l)
		bottom.Legend.Add(name, l)
	}
	if windowed {
		hline(exactBound, color.RGBA{A: 0xff}, fmt.Sprintf("bound, exact and leased: limit %d", lim.Limit), []vg.Length{px(6), px(4)})
	} else {
		hline(exactBound, exactColour, fmt.Sprintf("exact rule's bound: burst + limit = %d", exactBound), []vg.Length{px(6), px(4)})
		hline(leasedBound, leasedColour, fmt.Sprintf("leased bound: burst + rate × (%s + maxAge %s) = %d",
			lim.Window, rep.Fleet.Lease.MaxAge, leasedBound), []vg.Length{px(6), px(4)})
	}

	for _, p := range []*plot.Plot{top, bottom} {
		p.Y.Max *= 1.45 // room for the legend above the data
	}
	bottom.Y.Max = max(bottom.Y.Max, float64(leasedBound)*1.45)

	rule := fmt.Sprintf("%s %d per %s", lim.Name(), lim.Limit, lim.Window)
	if !windowed {
		rule += fmt.Sprintf(", burst %d", lim.Capacity())
	}
	title := fmt.Sprintf("%s, %d pods, lease maxAge %s: exact and leased", rule, rep.Fleet.Pods, rep.Fleet.Lease.MaxAge)
	return writeFigure(file, LeasePlotHeight, title, []*plot.Plot{top, bottom})
}

// inWindow is the step function "admitted so far in the current aligned window of w ms" of
// times (sorted), as the instants it changes at and its value from each on.
func inWindow(times []int64, w int64) [][2]int64 {
	var steps [][2]int64
	n, win := int64(0), int64(-1)
	for i, t := range times {
		if t/w != win {
			if i > 0 {
				steps = append(steps, [2]int64{(win + 1) * w, 0})
			}
			n, win = 0, t/w
		}
		n++
		if len(steps) > 0 && steps[len(steps)-1][0] == t {
			steps[len(steps)-1][1] = n
		} else {
			steps = append(steps, [2]int64{t, n})
		}
	}
	return slices.Clip(steps)
}

// MostInWindow is the most units the exact run and the leased run admitted in any interval of
// one window (for FixedWindow and SlidingWindowCounter: in any aligned window), as PlotLease
// draws them.
func (r *LeaseReport) MostInWindow() (exact, leased int64) {
	W := r.Lim.WindowMs()
	most := func(times []int64) int64 {
		var steps [][2]int64
		if r.Lim.Algorithm == limiter.FixedWindow || r.Lim.Algorithm == limiter.SlidingWindowCounter {
			steps = inWindow(times, W)
		} else {
			steps, _ = trailing(times, W)
		}
		var m int64
		for _, s := range steps {
			m = max(m, s[1])
		}
		return m * r.cost
	}
	return most(r.exactTimes), most(r.leasedTimes)
}
