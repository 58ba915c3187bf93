package metrics

import (
	"bytes"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/protobuf/proto"
)

// TestExpositionAsClientLibrary drives the same random operations on this package's series and
// on Prometheus's client library, then parses both expositions with Prometheus's own parser:
// the families (name, help, type), series (labels) and values must be the same. Label values
// hold the characters the format escapes.
func TestExpositionAsClientLibrary(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	ours := &Registry{}
	ref := prometheus.NewRegistry()

	bounds := []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1}
	cv := ours.counterVec("x_requests_total", "Requests by policy and \"rule\"\\ with a\nnewline.", []string{"policy", "rule"})
	rcv := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_requests_total", Help: "Requests by policy and \"rule\"\\ with a\nnewline."}, []string{"policy", "rule"})
	// Label names out of order: the exposition sorts them.
	gv := ours.gaugeVec("x_slots", "Slots.", []string{"rule", "policy", "decision"})
	rgv := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "x_slots", Help: "Slots."}, []string{"rule", "policy", "decision"})
	c := ours.counter("x_reloads_total", "Reloads.")
	rc := prometheus.NewCounter(prometheus.CounterOpts{Name: "x_reloads_total", Help: "Reloads."})
	g := ours.gauge("x_generation", "Generation.")
	rg := prometheus.NewGauge(prometheus.GaugeOpts{Name: "x_generation", Help: "Generation."})
	h := ours.histogram("x_seconds", "Seconds.", bounds)
	rh := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "x_seconds", Help: "Seconds.", Buckets: bounds})
	var fv float64
	ours.counterFunc("x_func_total", "Read at the scrape.", func() float64 { return fv })
	ref.MustRegister(rcv, rgv, rc, rg, rh, prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "x_func_total", Help: "Read at the scrape."}, func() float64 { return fv }))

	values := []string{"a", "b", `q"uote`, `back\slash`, "new\nline", "ünï", ""}
	pick := func() string { return values[rng.IntN(len(values))] }
	for range 5000 {
		switch rng.IntN(7) {
		case 0:
			p, r := pick(), pick()
			cv.WithLabelValues(p, r).Inc()
			rcv.WithLabelValues(p, r).Inc()
		case 1:
			p, r, v := pick(), pick(), float64(rng.IntN(10))
			if rng.IntN(2) == 0 {
				v += 0.25 // a fraction exact in binary: both sums stay exact
			}
			cv.WithLabelValues(p, r).Add(v)
			rcv.WithLabelValues(p, r).Add(v)
		case 2:
			r, p, d, v := pick(), pick(), pick(), float64(rng.IntN(100)-50)
			gv.WithLabelValues(r, p, d).Set(v)
			rgv.WithLabelValues(r, p, d).Set(v)
		case 3:
			r, p, d := pick(), pick(), pick()
			if rng.IntN(2) == 0 {
				gv.WithLabelValues(r, p, d).Inc()
				rgv.WithLabelValues(r, p, d).Inc()
			} else {
				gv.WithLabelValues(r, p, d).Dec()
				rgv.WithLabelValues(r, p, d).Dec()
			}
		case 4:
			c.Inc()
			rc.Inc()
			v := float64(rng.IntN(1000))
			g.Set(v)
			rg.Set(v)
		case 5:
			// Bounds themselves, between them and past the last.
			v := bounds[rng.IntN(len(bounds))]
			if rng.IntN(2) == 0 {
				v = float64(rng.IntN(2000)) / 1024
			}
			h.Observe(v)
			rh.Observe(v)
		case 6:
			fv++
		}
	}

	var buf bytes.Buffer
	if err := ours.write(&buf); err != nil {
		t.Fatal(err)
	}
	got := parse(t, buf.String())
	gathered, err := ref.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var refText bytes.Buffer
	enc := expfmt.NewEncoder(&refText, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range gathered {
		if err := enc.Encode(mf); err != nil {
			t.Fatal(err)
		}
	}
	want := parse(t, refText.String())
	if len(got) != len(want) {
		t.Fatalf("%d families, want %d", len(got), len(want))
	}
	for name, w := range want {
		if !proto.Equal(got[name], w) {
			t.Errorf("family %s:\n got %v\nwant %v", name, got[name], w)
		}
	}
	// The same text, byte for byte: the client's order of families and series, and its
	// number formatting.
	if buf.String() != refText.String() {
		t.Errorf("exposition differs from the client library's:\n%s\n---\n%s", buf.String(), refText.String())
	}
}

func parse(t *testing.T, text string) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("%v in:\n%s", err, text)
	}
	return fams
}

// TestCountersConcurrent adds from many goroutines at once: no addition is lost.
func TestCountersConcurrent(t *testing.T) {
	var (
		c  Counter
		g  Gauge
		h  = newHistogram([]float64{1, 2})
		wg sync.WaitGroup
	)
	for range 8 {
		wg.Go(func() {
			for range 10000 {
				c.Inc()
				c.Add(0.5)
				g.Inc()
				h.Observe(1.5)
			}
		})
	}
	wg.Wait()
	if c.Value() != 120000 || g.Value() != 80000 || h.Count() != 80000 || h.Sum() != 120000 {
		t.Fatalf("counter %g, gauge %g, histogram %d summing %g", c.Value(), g.Value(), h.Count(), h.Sum())
	}
	c.Add(-1)
	c.Add(math.NaN())
	if c.Value() != 120000 {
		t.Fatalf("a negative or NaN add changed the counter: %g", c.Value())
	}
}

// TestMetricsServed scrapes the admin handler of New: every family parses, the process's
// series have values, and the content type is the text format's.
func TestMetricsServed(t *testing.T) {
	m := New()
	m.ForRule("p", "r").Allowed.Inc()
	m.RegisterLeases(func() LeaseStats { return LeaseStats{Decisions: 3} })
	srv := httptest.NewServer(m.AdminHandler(func() error { return nil }, false))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if ct := resp.Header.Get("Content-Type"); ct != contentType {
		t.Errorf("Content-Type %q", ct)
	}
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		t.Fatal(err)
	}
	fams := parse(t, buf.String())
	value := func(name string) float64 {
		mf := fams[name]
		if mf == nil || len(mf.GetMetric()) != 1 {
			t.Fatalf("%s: %v", name, mf)
		}
		m := mf.GetMetric()[0]
		if m.Counter != nil {
			return m.GetCounter().GetValue()
		}
		return m.GetGauge().GetValue()
	}
	if v := value("sluice_lease_decisions_total"); v != 3 {
		t.Errorf("sluice_lease_decisions_total %g", v)
	}
	for _, name := range []string{"process_cpu_seconds_total", "process_resident_memory_bytes", "process_virtual_memory_bytes",
		"process_open_fds", "process_max_fds", "process_start_time_seconds", "go_goroutines", "go_threads", "go_gc_gogc_percent"} {
		if v := value(name); !(v > 0) {
			t.Errorf("%s = %g", name, v)
		}
	}
	if n := len(fams["sluice_requests_total"].GetMetric()); n != 4 {
		t.Errorf("sluice_requests_total has %d series, want the rule's 4 decisions", n)
	}
	if _, ok := fams["sluice_decision_duration_seconds"]; !ok {
		t.Error("no sluice_decision_duration_seconds")
	}
}
