package dashboard_test

import (
	"bytes"
	"image/png"
	"math"
	"os"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/dashboard"
)

func TestRender(t *testing.T) {
	panels := dashboard.Panels()
	t0 := time.Date(2026, 2, 5, 12, 0, 0, 0, time.UTC)
	data := make([][]dashboard.Series, len(panels))
	for i := range panels {
		for j := range 2 {
			s := dashboard.Series{Name: "series"}
			for k := range 60 {
				v := float64((k*(j+1)+i)%17) / 4
				if k == 30 {
					v = math.NaN() // a gap, not a failure
				}
				s.Points = append(s.Points, dashboard.Point{T: t0.Add(time.Duration(k) * time.Second), V: v})
			}
			data[i] = append(data[i], s)
		}
	}
	var buf bytes.Buffer
	if err := dashboard.Render(&buf, "Sluice", panels, data); err != nil {
		t.Fatal(err)
	}
	out := bytes.Clone(buf.Bytes())
	img, err := png.Decode(bytes.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != 1400 || b.Dy() < 1000 {
		t.Errorf("image is %v", b)
	}
	if f := os.Getenv("DASHBOARD_RENDER_TEST_OUT"); f != "" {
		_ = os.WriteFile(f, out, 0o644)
	}
	if err := dashboard.Render(&buf, "Sluice", panels, data[:1]); err == nil {
		t.Error("Render accepted data for fewer panels than it draws")
	}
}
