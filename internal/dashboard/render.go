package dashboard

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"strconv"
	"time"

	xfont "golang.org/x/image/font"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Point is one sample of a series.
type Point struct {
	T time.Time
	V float64
}

// Series is one line of a panel: its legend (Legend applied to its labels) and samples in
// time order. NaN samples (a ratio of no traffic) leave a gap.
type Series struct {
	Name   string
	Points []Point
}

// The PNG's geometry in pixels at renderDPI: two panels a row, as the Grafana layout has them.
const (
	renderDPI     = 96
	renderWidthPx = 1400
	panelHeightPx = 300
	titlePx       = 40
)

func px(n float64) vg.Length { return vg.Length(n) * vg.Inch / renderDPI }

// Render writes a PNG of the panels, two to a row as in Grafana, with data[i] the series of
// panels[i] (every query's), under title.
func Render(w io.Writer, title string, panels []Panel, data [][]Series) error {
	if len(data) != len(panels) {
		return fmt.Errorf("%d panels but data for %d", len(panels), len(data))
	}
	rows := (len(panels) + 1) / 2
	plots := make([][]*plot.Plot, rows)
	for r := range plots {
		plots[r] = make([]*plot.Plot, 2)
	}
	for i, p := range panels {
		pl, err := panelPlot(p, data[i])
		if err != nil {
			return fmt.Errorf("panel %q: %w", p.Title, err)
		}
		plots[i/2][i%2] = pl
	}
	img := vgimg.NewWith(vgimg.UseWH(px(renderWidthPx), px(float64(titlePx+rows*panelHeightPx))), vgimg.UseDPI(renderDPI))
	dc := draw.New(img)
	dc.SetColor(color.White)
	dc.Fill(dc.Path())
	sty := text.Style{Color: color.Black, Font: font.From(font.Font{Typeface: "Liberation", Variant: "Sans", Weight: xfont.WeightBold}, 16),
		XAlign: draw.XCenter, YAlign: draw.YTop, Handler: plot.DefaultTextHandler}
	dc.FillText(sty, vg.Point{X: dc.Center().X, Y: dc.Max.Y - px(10)}, title)
	dc.Max.Y -= px(titlePx)
	tiles := draw.Tiles{Rows: rows, Cols: 2, PadTop: px(4), PadBottom: px(4), PadLeft: px(6), PadRight: px(14), PadX: px(24), PadY: px(10)}
	canvases := plot.Align(plots, tiles, dc)
	for r := range plots {
		for c, pl := range plots[r] {
			if pl != nil {
				pl.Draw(canvases[r][c])
			}
		}
	}
	_, err := vgimg.PngCanvas{Canvas: img}.WriteTo(w)
	return err
}

// sans is Liberation Sans at size points: it reads better than gonum's default serif at
// chart sizes.
func sans(size vg.Length) font.Font {
	return font.From(font.Font{Typeface: "Liberation", Variant: "Sans"}, size)
}

func panelPlot(p Panel, series []Series) (*plot.Plot, error) {
	pl := plot.New()
	pl.Title.Text = p.Title
	pl.Title.TextStyle.Font = font.From(font.Font{Typeface: "Liberation", Variant: "Sans", Weight: xfont.WeightBold}, 13)
	pl.X.Tick.Marker = plot.TimeTicks{Format: "15:04:05"}
	pl.X.Tick.Label.Font = sans(9)
	pl.Y.Tick.Label.Font = sans(9)
	pl.Y.Tick.Marker = unitTicks(p.Unit)
	pl.Y.Label.Text = unitLabel(p.Unit)
	pl.Y.Label.TextStyle.Font = sans(10)
	pl.Y.Min = 0
	pl.Legend.Top = true
	pl.Legend.Left = true
	pl.Legend.TextStyle.Font = sans(9)
	pl.Legend.ThumbnailWidth = px(18)
	pl.Add(plotter.NewGrid())
	ymax := 0.0
	for i, s := range series {
		xys := make(plotter.XYs, 0, len(s.Points))
		for _, pt := range s.Points {
			v := pt.V
			if math.IsNaN(v) || math.IsInf(v, 0) {
				continue
			}
			xys = append(xys, plotter.XY{X: float64(pt.T.Unix()), Y: v})
			ymax = max(ymax, v)
		}
		if len(xys) == 0 {
			continue
		}
		line, err := plotter.NewLine(xys)
		if err != nil {
			return nil, err
		}
		line.Color = plotutil.Color(i)
		line.Width = vg.Points(1.5)
		if i >= 7 {
			line.Dashes = plotutil.Dashes(1)
		}
		pl.Add(line)
		pl.Legend.Add(s.Name, line)
	}
	// Head room for the legend above the lines.
	pl.Y.Max = max(ymax*1.25+float64(len(series))*ymax*0.12, 1e-9)
	if ymax == 0 {
		pl.Y.Max = 1
	}
	return pl, nil
}

func unitLabel(unit string) string {
	switch unit {
	case UnitPerSecond:
		return "per second"
	case UnitShare:
		return "share"
	case UnitSeconds:
		return "ms"
	}
	return ""
}

// unitTicks labels the y axis in the panel's unit: seconds as milliseconds, shares as percents.
func unitTicks(unit string) plot.Ticker {
	return tickFormat{format: func(v float64) string {
		switch unit {
		case UnitShare:
			return strconv.FormatFloat(v*100, 'g', 3, 64) + "%"
		case UnitSeconds:
			return strconv.FormatFloat(v*1000, 'g', 3, 64)
		}
		return strconv.FormatFloat(v, 'g', 4, 64)
	}}
}

type tickFormat struct{ format func(float64) string }

func (t tickFormat) Ticks(min, max float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(min, max)
	for i := range ticks {
		if ticks[i].Label != "" {
			ticks[i].Label = t.format(ticks[i].Value)
		}
	}
	return ticks
}
