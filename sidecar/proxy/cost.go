package proxy

import (
	"bytes"
	"encoding/json"
	"io"
	"slices"

	"github.com/valyala/fasthttp"
)

// This file is responseCost: the cost a response reports, read from one of its headers or
// from a JSON field of its body, which streams through to the client as it arrives (a
// text/event-stream body event by event) while costScan watches it with bounded memory.

// Bounds of what costScan holds of a body: a JSON body beyond maxCostBody, or a server-sent
// event beyond maxCostEvent, is not searched (its cost counts as missing).
const (
	maxCostBody  = 4 << 20
	maxCostEvent = 1 << 20
)

// maxUsage is the largest cost a response may report: 2^53 - 1, the integers the Lua
// scripts' doubles hold exactly. A larger value is malformed, as a negative or fractional one.
const maxUsage = 1<<53 - 1

// parseUsage parses a reported cost: decimal digits only (a JSON number that is a
// non-negative integer, or a header value without sign), at most maxUsage.
func parseUsage(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 16 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, n <= maxUsage
}

// costScan finds the costs of a response for its request's responseCost charges: charge i's
// value is vals[i] when found[i]. It reads header sources from the response head (header) and
// JSON sources from the body as it passes (write, then end). Not safe for concurrent use.
type costScan struct {
	charges []lateCharge
	vals    []int64
	found   []bool
	// needBody is true when a charge's source is a JSON field.
	needBody bool
	// sse is true for a text/event-stream body, searched event by event; otherwise the body
	// is one JSON document.
	sse bool
	// buf is the JSON body so far, or the SSE line being read.
	buf []byte
	// data is the current event's data (SSE).
	data []byte
	// over is true when buf outgrew its bound: the body (JSON) or the line (SSE) is skipped.
	over bool
	// dataOver is true when the current event's data outgrew maxCostEvent.
	dataOver bool
	// eventHasData is true once the current event has a data line (its data may be empty).
	eventHasData bool
	ended        bool
}

func newCostScan(charges []lateCharge) *costScan {
	s := &costScan{charges: charges, vals: make([]int64, len(charges)), found: make([]bool, len(charges))}
	for _, c := range charges {
		if c.rule.ResponseCost.Header == "" {
			s.needBody = true
		}
	}
	return s
}

// head reads the header sources with get (a response header lookup, case-insensitive) and
// notes whether the body is an event stream.
func (s *costScan) head(get func(name string) ([]byte, bool)) {
	for i, c := range s.charges {
		if name := c.rule.ResponseCost.Header; name != "" {
			if v, ok := get(name); ok {
				s.vals[i], s.found[i] = parseUsage(bytes.TrimSpace(v))
			}
		}
	}
	if ct, ok := get("Content-Type"); ok {
		ct = bytes.TrimSpace(ct)
		s.sse = len(ct) >= len("text/event-stream") && bytes.EqualFold(ct[:len("text/event-stream")], []byte("text/event-stream"))
	}
}

// write watches p, the next bytes of the body.
func (s *costScan) write(p []byte) {
	if !s.needBody || s.ended {
		return
	}
	if !s.sse {
		if !s.over && len(s.buf)+len(p) > maxCostBody {
			s.over, s.buf = true, nil
		}
		if !s.over {
			s.buf = append(s.buf, p...)
		}
		return
	}
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		chunk := p
		if i >= 0 {
			chunk = p[:i]
		}
		if !s.over && len(s.buf)+len(chunk) > maxCostEvent {
			s.over, s.buf = true, s.buf[:0]
		}
		if !s.over {
			s.buf = append(s.buf, chunk...)
		}
		if i < 0 {
			return
		}
		if s.over {
			s.dataOver = true // a line that long spoils its event
		} else {
			s.line(bytes.TrimSuffix(s.buf, []byte{'\r'}))
		}
		s.buf, s.over = s.buf[:0], false
		p = p[i+1:]
	}
}

// line handles one SSE line: a blank line dispatches the event, data lines add to its data
// (joined with newlines), other fields and comments are ignored.
func (s *costScan) line(l []byte) {
	if len(l) == 0 {
		s.dispatch()
		return
	}
	v, ok := bytes.CutPrefix(l, []byte("data:"))
	if !ok {
		if !bytes.Equal(l, []byte("data")) { // a field without a colon has an empty value
			return
		}
		v = nil
	}
	v = bytes.TrimPrefix(v, []byte{' '})
	if s.dataOver || len(s.data)+len(v)+1 > maxCostEvent {
		s.dataOver, s.data = true, s.data[:0]
		return
	}
	if s.eventHasData {
		s.data = append(s.data, '\n')
	}
	s.data = append(s.data, v...)
	s.eventHasData = true
}

// dispatch searches the current event's data and starts the next event. A later event that
// carries a field replaces an earlier one's value.
func (s *costScan) dispatch() {
	if !s.dataOver && s.eventHasData {
		s.search(s.data)
	}
	s.data, s.dataOver, s.eventHasData = s.data[:0], false, false
}

// search sets the value of each JSON-sourced charge whose field doc holds.
func (s *costScan) search(doc []byte) {
	for i, c := range s.charges {
		path := c.rule.ResponseCost.Path
		if path == nil {
			continue
		}
		// Most events (a token each) do not name the field: skip them unparsed, unless an
		// escape could spell the name.
		if !bytes.Contains(doc, []byte(path[len(path)-1])) && bytes.IndexByte(doc, '\\') < 0 {
			continue
		}
		if v, ok := jsonField(doc, path); ok {
			s.vals[i], s.found[i] = v, true
		}
	}
}

// end is the end of the body: complete when the upstream sent all of it. An event stream's
// last event counts even without its closing blank line; a JSON body cut short is not
// searched.
func (s *costScan) end(complete bool) {
	if !s.needBody || s.ended {
		return
	}
	s.ended = true
	switch {
	case s.sse:
		if complete && len(s.buf) > 0 && !s.over {
			s.line(bytes.TrimSuffix(s.buf, []byte{'\r'}))
		}
		s.dispatch()
	case complete && !s.over:
		s.search(s.buf)
	}
	s.buf, s.data = nil, nil
}

// jsonField returns the non-negative integer at path in the JSON document doc.
func jsonField(doc []byte, path []string) (int64, bool) {
	raw := json.RawMessage(doc)
	for _, k := range path {
		var m map[string]json.RawMessage
		if json.Unmarshal(raw, &m) != nil {
			return 0, false
		}
		var ok bool
		if raw, ok = m[k]; !ok {
			return 0, false
		}
	}
	return parseUsage(bytes.TrimSpace(raw))
}

// settleCost makes the charges' costs known from s (nil: the response reported nothing):
// each charge whose response reported more than was charged at admission is charged the
// difference, on the store that decided it; a response that reported less costs what was
// charged (minimumCost is a floor), and one that reported nothing valid costs the same and
// counts in sluice_response_cost_missing_total.
func (h *Handler) settleCost(charges []lateCharge, s *costScan) {
	for i := range charges {
		c := &charges[i]
		if s == nil || !s.found[i] {
			c.rule.Metrics.ResponseCostMissing.Inc()
			continue
		}
		if extra := s.vals[i] - c.n; extra > 0 {
			h.charge(c, extra)
		}
	}
}

// needsBody reports whether a charge's source is a JSON field of the body.
func needsBody(charges []lateCharge) bool {
	for _, c := range charges {
		if c.rule.ResponseCost.Header == "" {
			return true
		}
	}
	return false
}

// settleWhole settles d's cost charges from a whole response: its head hd and body.
func (h *Handler) settleWhole(d *decision, hd *fasthttp.ResponseHeader, body []byte) {
	s := newCostScan(d.cost)
	d.cost = nil
	s.head(fastHeaderGet(hd))
	s.write(body)
	s.end(true)
	h.settleCost(s.charges, s)
}

// fastHeaderGet is a case-insensitive lookup in a fasthttp response header, whose names are
// kept as the upstream sent them.
func fastHeaderGet(h *fasthttp.ResponseHeader) func(string) ([]byte, bool) {
	return func(name string) ([]byte, bool) {
		if v := h.Peek(name); v != nil {
			return v, true
		}
		for k, v := range h.All() {
			if equalFold(k, name) {
				return v, true
			}
		}
		return nil, false
	}
}

// costBody is an upstream response's body stream on its way to the client, watched by scan:
// each Read passes the upstream's bytes on as they come. The body's end (EOF, or its
// Content-Length reached) settles the costs before the last bytes go out, so the charge is
// made by the time the client has the whole response; a body closed early settles with what
// was seen. Close closes the upstream's stream and releases its response.
type costBody struct {
	h    *Handler
	scan *costScan
	// up is the upstream's response, resp the client's: the trailers up's body ends with are
	// resp's too. Both nil when the caller closes the upstream itself.
	up, resp *fasthttp.Response
	r        io.Reader
	left     int64 // bytes of a Content-Length body still to come; -1 when unknown
	settled  bool
}

func (b *costBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if n > 0 {
		b.scan.write(p[:n])
		if b.left >= 0 {
			b.left -= int64(n)
		}
	}
	if err == io.EOF && b.up != nil {
		copyTrailers(&b.resp.Header, &b.up.Header)
	}
	if err == io.EOF || b.left == 0 {
		b.settle(true)
	}
	return n, err
}

// copyTrailers gives dst the trailer section src's body ended with (a chunked body's, read
// with its last chunk), announced or not, as the server writes it after the body.
func copyTrailers(dst, src *fasthttp.ResponseHeader) {
	for k := range src.Trailers() {
		if !slices.ContainsFunc(slices.Collect(dst.Trailers()), func(t []byte) bool { return bytes.EqualFold(t, k) }) {
			_ = dst.AddTrailerBytes(k)
		}
	}
	sec := src.TrailerHeader()
	for len(sec) > 0 {
		line, rest, _ := bytes.Cut(sec, []byte("\r\n"))
		sec = rest
		if k, v, ok := bytes.Cut(line, []byte(": ")); ok {
			dst.AddBytesKV(k, v)
		}
	}
}

func (b *costBody) settle(complete bool) {
	if b.settled {
		return
	}
	b.settled = true
	b.scan.end(complete)
	b.h.settleCost(b.scan.charges, b.scan)
}

func (b *costBody) Close() error {
	b.settle(false)
	if b.up == nil {
		return nil
	}
	err := b.up.CloseBodyStream()
	fasthttp.ReleaseResponse(b.up)
	return err
}

// watchFast makes up, the upstream's response to a request with responseCost charges,
// resp's: the head copied, the body streamed through a costBody (or, when up has no stream,
// searched at once). It takes d's cost charges.
func (h *Handler) watchFast(resp, up *fasthttp.Response, d *decision) {
	up.Header.CopyTo(&resp.Header)
	stream := up.BodyStream()
	if stream == nil {
		h.settleWhole(d, &up.Header, up.Body())
		resp.SetBody(up.Body())
		fasthttp.ReleaseResponse(up)
		return
	}
	s := newCostScan(d.cost)
	d.cost = nil
	s.head(fastHeaderGet(&up.Header))
	n := up.Header.ContentLength()
	b := &costBody{h: h, scan: s, up: up, resp: resp, r: stream, left: int64(n)}
	if n < 0 {
		n, b.left = -1, -1
	}
	resp.SetBodyStream(b, n)
}

// scanHead reads the responseCost header sources of an h2c response whose head is being
// written.
func (w *statusWriter) scanHead() {
	if w.cost != nil {
		hd := w.Header()
		w.cost.head(func(name string) ([]byte, bool) {
			if v := hd.Values(name); len(v) > 0 {
				return []byte(v[0]), true
			}
			return nil, false
		})
	}
}
