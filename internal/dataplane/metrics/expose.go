package metrics

import (
	"bufio"
	"io"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// The data plane writes Prometheus's text exposition format (version 0.0.4) itself, with the
// few metric kinds it uses. A client library would cost each sidecar about 2.7 MiB of resident
// memory for the same series: its registry, protobuf descriptors and collectors are mapped and
// initialised at start whether or not anything scrapes.

// Counter is a monotonic counter. Safe for concurrent use; the zero value counts from 0.
type Counter struct {
	whole atomic.Uint64 // what integral Adds and Inc added
	frac  atomic.Uint64 // bits of the float64 sum of the other Adds
}

// Inc adds 1.
func (c *Counter) Inc() { c.whole.Add(1) }

// Add adds v, which must not be negative (a negative v is ignored: a counter never goes back).
func (c *Counter) Add(v float64) {
	if v < 0 || math.IsNaN(v) {
		return
	}
	if v < 1<<63 && v == math.Trunc(v) {
		c.whole.Add(uint64(v))
		return
	}
	addFloat(&c.frac, v)
}

// Value returns the count.
func (c *Counter) Value() float64 {
	return float64(c.whole.Load()) + math.Float64frombits(c.frac.Load())
}

// Gauge is a value that goes up and down. Safe for concurrent use; the zero value is 0.
type Gauge struct{ bits atomic.Uint64 }

// Set sets the gauge to v.
func (g *Gauge) Set(v float64) { g.bits.Store(math.Float64bits(v)) }

// Inc adds 1.
func (g *Gauge) Inc() { addFloat(&g.bits, 1) }

// Dec subtracts 1.
func (g *Gauge) Dec() { addFloat(&g.bits, -1) }

// Add adds v.
func (g *Gauge) Add(v float64) { addFloat(&g.bits, v) }

// Value returns the gauge's value.
func (g *Gauge) Value() float64 { return math.Float64frombits(g.bits.Load()) }

func addFloat(bits *atomic.Uint64, v float64) {
	for {
		old := bits.Load()
		if bits.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+v)) {
			return
		}
	}
}

// Histogram counts observations in buckets of upper bounds. Safe for concurrent use.
type Histogram struct {
	bounds []float64       // ascending upper bounds, without +Inf
	counts []atomic.Uint64 // observations per bucket, not cumulative; the last is +Inf's
	sum    atomic.Uint64   // bits of the float64 sum
}

func newHistogram(bounds []float64) *Histogram {
	return &Histogram{bounds: bounds, counts: make([]atomic.Uint64, len(bounds)+1)}
}

// Observe counts v.
func (h *Histogram) Observe(v float64) {
	i := 0
	for i < len(h.bounds) && v > h.bounds[i] {
		i++
	}
	h.counts[i].Add(1)
	addFloat(&h.sum, v)
}

// Count returns how many values were observed.
func (h *Histogram) Count() uint64 {
	var n uint64
	for i := range h.counts {
		n += h.counts[i].Load()
	}
	return n
}

// Sum returns the sum of the observed values.
func (h *Histogram) Sum() float64 { return math.Float64frombits(h.sum.Load()) }

// family is one metric name: its help, type and how to write its samples.
type family struct {
	name, help, kind string
	write            func(w *expoWriter)
}

// vec holds a family's series by label values, created on first use and kept. The
// exposition writes the labels sorted by name, as Prometheus's clients do; each series keeps
// its values in that order.
type vec[T any] struct {
	mu     sync.RWMutex
	series map[string]*series[T] // by the values as given, joined
	sorted []string              // the label names, sorted
	order  []int                 // order[i] is the position of sorted[i] among the names as given
}

// series is one member of a vec: its label values, in the order of vec.sorted, and its value.
type series[T any] struct {
	vals []string
	v    T
}

func (v *vec[T]) init(labels []string) {
	v.sorted, v.order = slices.Clone(labels), make([]int, len(labels))
	slices.Sort(v.sorted)
	for i, name := range v.sorted {
		v.order[i] = slices.Index(labels, name)
	}
}

func (v *vec[T]) with(vals []string) *T {
	if len(vals) != len(v.order) {
		panic("metrics: " + strconv.Itoa(len(vals)) + " label values for " + strconv.Itoa(len(v.order)) + " labels")
	}
	k := strings.Join(vals, "\xff")
	v.mu.RLock()
	s, ok := v.series[k]
	v.mu.RUnlock()
	if ok {
		return &s.v
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if s, ok = v.series[k]; ok {
		return &s.v
	}
	if v.series == nil {
		v.series = map[string]*series[T]{}
	}
	s = &series[T]{vals: make([]string, len(vals))}
	for i, j := range v.order {
		s.vals[i] = vals[j]
	}
	v.series[k] = s
	return &s.v
}

// each calls f with every series in the order of its label values.
func (v *vec[T]) each(f func(vals []string, value *T)) {
	v.mu.RLock()
	all := slices.Collect(maps.Values(v.series))
	v.mu.RUnlock()
	slices.SortFunc(all, func(a, b *series[T]) int { return slices.Compare(a.vals, b.vals) })
	for _, s := range all {
		f(s.vals, &s.v)
	}
}

// CounterVec is a family of counters by label values.
type CounterVec struct{ v vec[Counter] }

// WithLabelValues returns the counter of vals (in the order of the family's labels).
func (c *CounterVec) WithLabelValues(vals ...string) *Counter {
	return c.v.with(vals)
}

// GaugeVec is a family of gauges by label values.
type GaugeVec struct{ v vec[Gauge] }

// WithLabelValues returns the gauge of vals (in the order of the family's labels).
func (g *GaugeVec) WithLabelValues(vals ...string) *Gauge {
	return g.v.with(vals)
}

// Registry holds families and writes them in the text format, sorted by name as Prometheus's
// client does.
type Registry struct {
	mu       sync.Mutex
	families []*family
}

func (r *Registry) add(f *family) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, g := range r.families {
		if g.name == f.name {
			panic("metrics: " + f.name + " registered twice")
		}
	}
	r.families = append(r.families, f)
}

func (r *Registry) counter(name, help string) *Counter {
	c := new(Counter)
	r.add(&family{name: name, help: help, kind: "counter", write: func(w *expoWriter) { w.sample(name, nil, nil, c.Value()) }})
	return c
}

func (r *Registry) gauge(name, help string) *Gauge {
	g := new(Gauge)
	r.add(&family{name: name, help: help, kind: "gauge", write: func(w *expoWriter) { w.sample(name, nil, nil, g.Value()) }})
	return g
}

// counterFunc registers a counter whose value value returns at each scrape.
func (r *Registry) counterFunc(name, help string, value func() float64) {
	r.add(&family{name: name, help: help, kind: "counter", write: func(w *expoWriter) { w.sample(name, nil, nil, value()) }})
}

// gaugeFunc registers a gauge whose value value returns at each scrape.
func (r *Registry) gaugeFunc(name, help string, value func() float64) {
	r.add(&family{name: name, help: help, kind: "gauge", write: func(w *expoWriter) { w.sample(name, nil, nil, value()) }})
}

func (r *Registry) counterVec(name, help string, labels []string) *CounterVec {
	c := &CounterVec{}
	addVec(r, name, help, "counter", labels, &c.v)
	return c
}

func (r *Registry) gaugeVec(name, help string, labels []string) *GaugeVec {
	g := &GaugeVec{}
	addVec(r, name, help, "gauge", labels, &g.v)
	return g
}

// addVec registers v, with the label names labels, as the family name of the type kind.
func addVec[T any, P interface {
	*T
	Value() float64
}](r *Registry, name, help, kind string, labels []string, v *vec[T]) {
	v.init(labels)
	r.add(&family{name: name, help: help, kind: kind, write: func(w *expoWriter) {
		v.each(func(vals []string, s *T) { w.sample(name, v.sorted, vals, P(s).Value()) })
	}})
}

func (r *Registry) histogram(name, help string, bounds []float64) *Histogram {
	h := newHistogram(bounds)
	r.add(&family{name: name, help: help, kind: "histogram", write: func(w *expoWriter) {
		var cum uint64
		for i := range h.counts {
			cum += h.counts[i].Load()
			le := "+Inf"
			if i < len(h.bounds) {
				le = formatFloat(h.bounds[i])
			}
			w.sample(name+"_bucket", []string{"le"}, []string{le}, float64(cum))
		}
		w.sample(name+"_sum", nil, nil, h.Sum())
		w.sample(name+"_count", nil, nil, float64(cum))
	}})
	return h
}

// write writes every family in the text exposition format.
func (r *Registry) write(out io.Writer) error {
	r.mu.Lock()
	fams := slices.Clone(r.families)
	r.mu.Unlock()
	slices.SortFunc(fams, func(a, b *family) int { return strings.Compare(a.name, b.name) })
	w := &expoWriter{w: bufio.NewWriter(out)}
	for _, f := range fams {
		w.str("# HELP ")
		w.str(f.name)
		w.byte(' ')
		w.escaped(f.help, false)
		w.str("\n# TYPE ")
		w.str(f.name)
		w.byte(' ')
		w.str(f.kind)
		w.byte('\n')
		f.write(w)
	}
	return w.w.Flush() // bufio keeps the first write error
}

// contentType is the text exposition format's media type.
const contentType = "text/plain; version=0.0.4; charset=utf-8"

// handler serves the registry on GET and HEAD.
func (r *Registry) handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodGet && req.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", contentType)
		if req.Method == http.MethodHead {
			return
		}
		_ = r.write(w)
	})
}

// expoWriter writes the text format's pieces; the bufio.Writer keeps the first error.
type expoWriter struct {
	w   *bufio.Writer
	buf []byte
}

func (w *expoWriter) str(s string) { _, _ = w.w.WriteString(s) }

func (w *expoWriter) byte(b byte) { _ = w.w.WriteByte(b) }

// escaped writes s with the format's escapes: backslash and newline, and in a label value
// also the double quote.
func (w *expoWriter) escaped(s string, quote bool) {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\':
			w.str(`\\`)
		case c == '\n':
			w.str(`\n`)
		case c == '"' && quote:
			w.str(`\"`)
		default:
			w.byte(c)
		}
	}
}

func (w *expoWriter) sample(name string, labels, vals []string, v float64) {
	w.str(name)
	if len(labels) > 0 {
		w.byte('{')
		for i, l := range labels {
			if i > 0 {
				w.byte(',')
			}
			w.str(l)
			w.str(`="`)
			w.escaped(vals[i], true)
			w.byte('"')
		}
		w.byte('}')
	}
	w.byte(' ')
	w.buf = appendFloat(w.buf[:0], v)
	_, _ = w.w.Write(w.buf)
	w.byte('\n')
}

func formatFloat(v float64) string { return string(appendFloat(nil, v)) }

// appendFloat formats v as Prometheus's clients do: the shortest exact decimal, and +Inf,
// -Inf and NaN by name.
func appendFloat(b []byte, v float64) []byte {
	switch {
	case math.IsInf(v, 1):
		return append(b, "+Inf"...)
	case math.IsInf(v, -1):
		return append(b, "-Inf"...)
	case math.IsNaN(v):
		return append(b, "NaN"...)
	}
	return strconv.AppendFloat(b, v, 'g', -1, 64)
}
