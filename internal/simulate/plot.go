package simulate

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"slices"
	"strconv"
	"time"

	xfont "golang.org/x/image/font"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// The PNG's geometry, in pixels at plotDPI: 800 px is the width a README shows.
const (
	plotDPI          = 96
	plotWidthPx      = 800
	plotHeightPx     = 450 // a single simulation
	panelHeightPx    = 190 // each panel of a comparison
	figureTitlePx    = 36  // above the panels of a comparison
	maxPlotBuckets   = 100_000
	defaultBucketDiv = 10 // the default bucket is window/defaultBucketDiv
)

func init() {
	// Sans serif reads better than gonum's default serif at chart sizes.
	plot.DefaultFont = font.Font{Typeface: "Liberation", Variant: "Sans"}
}

// px converts pixels at plotDPI to a vg length.
func px(n float64) vg.Length { return vg.Length(n) * vg.Inch / plotDPI }

// plotHeight returns the PNG's height in pixels for n panels; it is plotWidthPx wide.
func plotHeight(n int) int {
	if n <= 1 {
		return plotHeightPx
	}
	return figureTitlePx + n*panelHeightPx
}

// BucketMs returns the plot's bucket of time in ms: flag when set (a whole number of ms,
// at least 1ms), else window/10 (at least 1ms).
func BucketMs(flag, window time.Duration) (int64, error) {
	if flag == 0 {
		return max(1, window.Milliseconds()/defaultBucketDiv), nil
	}
	if flag < time.Millisecond || flag%time.Millisecond != 0 {
		return 0, fmt.Errorf("plot-bucket %s is not a whole number of milliseconds of at least 1ms", flag)
	}
	return flag.Milliseconds(), nil
}

// trailing returns the step function "admitted in the last w ms", n(t) = #{a in times :
// t-w < a <= t}, as the instants it changes at and its value from each on, and its maximum.
func trailing(times []int64, w int64) (steps [][2]int64, maxN int) {
	ins := slices.Clone(times)
	slices.Sort(ins) // Queue start times are ordered already; be safe
	i, j, n := 0, 0, 0
	for i < len(ins) || j < len(ins) {
		// The next change: an admission at ins[i], or one leaving the window at ins[j]+w.
		var t int64
		if i < len(ins) && ins[i] < ins[j]+w {
			t = ins[i]
		} else {
			t = ins[j] + w
		}
		for j < len(ins) && ins[j]+w <= t {
			j, n = j+1, n-1
		}
		for i < len(ins) && ins[i] == t {
			i, n = i+1, n+1
		}
		steps = append(steps, [2]int64{t, int64(n)})
		maxN = max(maxN, n)
	}
	return steps, maxN
}

// counts returns how many of times fall in each of n buckets [origin+k*bucket, origin+(k+1)*bucket).
func counts(times []int64, origin, bucket int64, n int) []int {
	c := make([]int, n)
	for _, t := range times {
		if t < origin {
			continue
		}
		if k := (t - origin) / bucket; k < int64(n) {
			c[k]++
		}
	}
	return c
}

// Plot draws one panel per run into the PNG file: requests offered and admitted per bucket
// of time (ms), the admitted in the last window, the limit and the window boundaries, on a
// shared time axis in seconds since the first arrival. One run is titled with its own title;
// several get title above them and each a panel titled with its name and totals.
func Plot(file, title string, runs []*Run, bucket int64) error {
	if len(runs) == 0 {
		return fmt.Errorf("nothing to plot")
	}
	origin, end := int64(-1), int64(0)
	for _, r := range runs {
		if len(r.arrivals) > 0 && (origin < 0 || r.arrivals[0] < origin) {
			origin = r.arrivals[0]
		}
		for _, ts := range [][]int64{r.arrivals, r.admitted} {
			if len(ts) > 0 {
				end = max(end, slices.Max(ts))
			}
		}
	}
	if origin < 0 { // no arrivals: an empty window of time
		origin, end = 0, 0
	}
	// The axis runs a whole number of buckets from the first arrival to at least one window past
	// the last admission, so that the count in the last window is seen to fall back.
	axisEnd := end + 1
	for _, r := range runs {
		if n := len(r.admitted); n > 0 {
			axisEnd = max(axisEnd, slices.Max(r.admitted)+r.lim.WindowMs())
		}
	}
	nb := (axisEnd - origin + bucket - 1) / bucket
	if nb > maxPlotBuckets {
		return fmt.Errorf("plot: %d ms to draw make %d buckets of %d ms, more than %d; raise --plot-bucket",
			axisEnd-origin, nb, bucket, maxPlotBuckets)
	}
	axisEnd = origin + nb*bucket

	plots := make([][]*plot.Plot, len(runs))
	for i, r := range runs {
		p := panel(r, i, origin, axisEnd, bucket, int(nb))
		if len(runs) == 1 {
			p.Title.Text = title
		} else {
			p.Title.Text = fmt.Sprintf("%s: admitted %d of %d, at most %d in any %s",
				r.Name(), r.allowed, len(r.arrivals), r.MaxInWindow(), r.lim.Window)
			if IsQueue(r.lim) {
				p.Title.Text += " (counted when they proceed)"
			}
			if i > 0 {
				p.Legend = plot.NewLegend() // the first panel's legend serves them all
			}
			if i < len(runs)-1 {
				p.X.Label.Text = ""
			}
		}
		plots[i] = []*plot.Plot{p}
	}
	// One y scale for every panel, so that heights compare.
	ymax := 0.0
	for _, row := range plots {
		ymax = max(ymax, row[0].Y.Max)
	}
	headroom := 1.05
	if len(runs) == 1 {
		headroom = 1.4 // room for the legend above the data
	}
	for _, row := range plots {
		row[0].Y.Max = max(ymax, 1) * headroom
	}

	if len(runs) == 1 {
		title = "" // the panel's own title says it
	}
	panels := make([]*plot.Plot, len(plots))
	for i, row := range plots {
		panels[i] = row[0]
	}
	return writeFigure(file, float64(plotHeight(len(runs))), title, panels)
}

// writeFigure draws panels one above the other under a bold title (none when empty) into a
// PNG file of heightPx pixels.
func writeFigure(file string, heightPx float64, title string, panels []*plot.Plot) error {
	img := vgimg.NewWith(vgimg.UseWH(px(plotWidthPx), px(heightPx)), vgimg.UseDPI(plotDPI))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: len(panels), Cols: 1, PadTop: px(4), PadBottom: px(4), PadLeft: px(4), PadRight: px(12), PadY: px(6)}
	if title != "" {
		tiles.PadTop = px(figureTitlePx)
		sty := text.Style{
			Color: color.Black, Font: font.From(plot.DefaultFont, 14),
			XAlign: draw.XCenter, YAlign: draw.YTop, Handler: plot.DefaultTextHandler,
		}
		sty.Font.Weight = xfont.WeightBold
		dc.FillText(sty, vg.Point{X: dc.Center().X, Y: dc.Max.Y - px(8)}, title)
	}
	rows := make([][]*plot.Plot, len(panels))
	for i, p := range panels {
		rows[i] = []*plot.Plot{p}
	}
	canvases := plot.Align(rows, tiles, dc)
	for i, p := range panels {
		p.Draw(canvases[i][0])
	}

	f, err := os.Create(file)
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("plot: writing %s: %w", file, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	return nil
}

// palette colours the admitted series of successive panels.
var palette = []color.RGBA{
	{0x1f, 0x77, 0xb4, 0xff}, // blue
	{0xd6, 0x27, 0x28, 0xff}, // red
	{0x2c, 0xa0, 0x2c, 0xff}, // green
	{0x94, 0x67, 0xbd, 0xff}, // purple
	{0xff, 0x7f, 0x0e, 0xff}, // orange
	{0x8c, 0x56, 0x4b, 0xff}, // brown
	{0x17, 0xbe, 0xcf, 0xff}, // cyan
}

// newPanel is an empty panel from 0 to xmax seconds, in the figures' style.
func newPanel(xmax float64) *plot.Plot {
	p := plot.New()
	p.X.Min, p.X.Max, p.Y.Min = 0, xmax, 0
	p.X.Tick.Marker = secondTicks{}
	p.Legend.Top = true
	p.Legend.TextStyle.Font.Size = 10
	p.Legend.ThumbnailWidth = px(22)
	p.Title.TextStyle.Font.Size = 12
	p.Title.Padding = px(4)
	return p
}

// panel draws run r (the i-th) on [origin, axisEnd) ms with nb buckets of bucket ms.
func panel(r *Run, i int, origin, axisEnd, bucket int64, nb int) *plot.Plot {
	sec := func(t int64) float64 { return float64(t-origin) / 1000 }
	W := r.lim.WindowMs()
	bucketName := (time.Duration(bucket) * time.Millisecond).String()

	p := newPanel(sec(axisEnd))
	p.X.Label.Text = "time since the first arrival (s)"
	p.Y.Label.Text = "requests"

	// Window boundaries, aligned to the Unix epoch as the window algorithms align them.
	var bounds plotter.XYs
	for b := (origin/W + 1) * W; b < axisEnd; b += W {
		bounds = append(bounds, plotter.XY{X: sec(b)})
	}
	if len(bounds) <= 200 { // a boundary per pixel or two is noise
		grey := color.Gray{Y: 0xa0}
		sty := draw.LineStyle{Color: grey, Width: px(1), Dashes: []vg.Length{px(2), px(3)}}
		p.Add(&vlines{xs: bounds, style: sty})
		p.Legend.Add("window boundary", &plotter.Line{LineStyle: sty})
	}

	step := func(c []int) plotter.XYs {
		xy := make(plotter.XYs, 0, len(c)+1)
		for k, n := range c {
			xy = append(xy, plotter.XY{X: sec(origin + int64(k)*bucket), Y: float64(n)})
		}
		return append(xy, plotter.XY{X: sec(axisEnd), Y: float64(c[len(c)-1])})
	}
	offered, _ := plotter.NewLine(step(counts(r.arrivals, origin, bucket, nb)))
	offered.StepStyle = plotter.PostStep
	offered.Color = color.Gray{Y: 0x90}
	offered.Width = px(1)
	offered.FillColor = color.Gray{Y: 0xe0}
	p.Add(offered)
	p.Legend.Add("offered per "+bucketName, offered)

	c := palette[i%len(palette)]
	admitted, _ := plotter.NewLine(step(counts(r.admitted, origin, bucket, nb)))
	admitted.StepStyle = plotter.PostStep
	admitted.Color = c
	admitted.Width = px(1.5)
	admitted.FillColor = color.NRGBA{c.R, c.G, c.B, 0x70}
	p.Add(admitted)
	admittedName := "admitted per " + bucketName
	if IsQueue(r.lim) {
		admittedName += " (when it proceeds)"
	}
	p.Legend.Add(admittedName, admitted)

	steps, _ := trailing(r.admitted, W)
	last := make(plotter.XYs, 1, len(steps)+2) // from 0 at the first arrival
	for _, s := range steps {
		last = append(last, plotter.XY{X: sec(s[0]), Y: float64(s[1])})
	}
	last = append(last, plotter.XY{X: sec(axisEnd), Y: last[len(last)-1].Y})
	trail, _ := plotter.NewLine(last)
	trail.StepStyle = plotter.PostStep
	trail.Color = color.Black
	trail.Width = px(1.5)
	p.Add(trail)
	p.Legend.Add("admitted in the last "+r.lim.Window.String(), trail)

	limitLine, _ := plotter.NewLine(plotter.XYs{{X: 0, Y: float64(r.lim.Limit)}, {X: sec(axisEnd), Y: float64(r.lim.Limit)}})
	limitLine.Color = color.RGBA{0xd6, 0x27, 0x28, 0xff}
	limitLine.Width = px(1.5)
	limitLine.Dashes = []vg.Length{px(6), px(4)}
	p.Add(limitLine)
	p.Legend.Add("limit: "+strconv.FormatInt(r.lim.Limit, 10)+" per "+r.lim.Window.String(), limitLine)
	return p
}

// vlines draws a vertical line across the plot at each X.
type vlines struct {
	xs    plotter.XYs
	style draw.LineStyle
}

// Plot implements plot.Plotter.
func (v *vlines) Plot(c draw.Canvas, p *plot.Plot) {
	trX, _ := p.Transforms(&c)
	for _, xy := range v.xs {
		x := trX(xy.X)
		c.StrokeLine2(v.style, x, c.Min.Y, x, c.Max.Y)
	}
}

// secondTicks labels the time axis at a round step giving at most about a dozen labels, with
// four unlabelled ticks between labels.
type secondTicks struct{}

// Ticks implements plot.Ticker.
func (secondTicks) Ticks(lo, hi float64) []plot.Tick {
	if !(hi > lo) {
		return []plot.Tick{{Value: lo, Label: strconv.FormatFloat(lo, 'f', -1, 64)}}
	}
	step := 0.001
	for mult := 0; (hi-lo)/step > 12; mult++ {
		step *= []float64{2, 2.5, 2}[mult%3] // 1, 2, 5, 10, 20, 50, ...
	}
	minor := step / 5
	var ticks []plot.Tick
	for k := math.Ceil(lo / minor); k*minor <= hi+minor/1e6; k++ {
		v := k * minor
		t := plot.Tick{Value: v}
		if j := math.Round(v / step); math.Abs(v/step-j) < 1e-6 {
			t.Label = strconv.FormatFloat(j*step, 'f', -1, 64)
		}
		ticks = append(ticks, t)
	}
	return ticks
}
