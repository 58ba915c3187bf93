package proxy

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/dataplane/config"
)

// scanCost runs body through a costScan of one charge from path (a text/event-stream body
// when sse), written in pieces of at most chunk bytes (0: at once), and returns what it found.
func scanCost(body string, path string, sse bool, complete bool, chunk int, rng *rand.Rand) (int64, bool) {
	rule := &config.Rule{ResponseCost: &config.ResponseCost{Path: strings.Split(path, ".")}}
	s := newCostScan([]lateCharge{{rule: rule}})
	ct := "application/json"
	if sse {
		ct = "Text/Event-Stream; charset=utf-8"
	}
	s.head(func(name string) ([]byte, bool) {
		if name == "Content-Type" {
			return []byte(ct), true
		}
		return nil, false
	})
	b := []byte(body)
	for len(b) > 0 {
		n := len(b)
		if chunk > 0 {
			n = min(n, 1+rng.IntN(chunk))
		}
		s.write(b[:n])
		b = b[n:]
	}
	s.end(complete)
	return s.vals[0], s.found[0]
}

// TestCostScan: the value found does not depend on how the body is cut into reads; an event
// stream's last event carrying the field wins (CRLF or LF lines, data over several lines,
// comments and other fields ignored); what is not a non-negative integer is not found.
func TestCostScan(t *testing.T) {
	big := strings.Repeat("x", maxCostEvent)
	tests := map[string]struct {
		body     string
		sse      bool
		complete bool
		want     int64
		found    bool
	}{
		"json":                   {`{"usage":{"total_tokens":42}}`, false, true, 42, true},
		"json cut short":         {`{"usage":{"total_tokens":42}}`, false, false, 0, false},
		"json with space":        {"{\"usage\" : {\"total_tokens\" :\n 7 } }", false, true, 7, true},
		"json escaped key":       {`{"usage":{"total_\u0074okens":9}}`, false, true, 9, true},
		"json string":            {`{"usage":{"total_tokens":"42"}}`, false, true, 0, false},
		"json fraction":          {`{"usage":{"total_tokens":4.5}}`, false, true, 0, false},
		"json negative":          {`{"usage":{"total_tokens":-4}}`, false, true, 0, false},
		"json above 2^53-1":      {`{"usage":{"total_tokens":9007199254740992}}`, false, true, 0, false},
		"json at 2^53-1":         {`{"usage":{"total_tokens":9007199254740991}}`, false, true, 9007199254740991, true},
		"json null":              {`{"usage":null}`, false, true, 0, false},
		"json too large":         {`{"pad":"` + strings.Repeat("x", maxCostBody) + `","usage":{"total_tokens":1}}`, false, true, 0, false},
		"sse last event wins":    {"data: {\"usage\":{\"total_tokens\":3}}\n\ndata: {\"usage\":{\"total_tokens\":25}}\n\ndata: [DONE]\n\n", true, true, 25, true},
		"sse null does not undo": {"data: {\"usage\":{\"total_tokens\":3}}\n\ndata: {\"usage\":null}\n\n", true, true, 3, true},
		"sse crlf and fields":    {": hi\r\nid: 1\r\nevent: x\r\ndata:{\"usage\":\r\ndata: {\"total_tokens\":8}}\r\n\r\n", true, true, 8, true},
		"sse without final line": {"data: {\"usage\":{\"total_tokens\":5}}", true, true, 5, true},
		"sse event cut short":    {"data: {\"usage\":{\"total_tokens\":5}}", true, false, 0, false},
		"sse seen before a cut":  {"data: {\"usage\":{\"total_tokens\":6}}\n\ndata: {\"choi", true, false, 6, true},
		"sse event too large":    {"data: {\"pad\":\"" + big + "\",\"usage\":{\"total_tokens\":5}}\n\n", true, true, 0, false},
		"sse after a large one":  {"data: " + big + "\n\ndata: {\"usage\":{\"total_tokens\":11}}\n\n", true, true, 11, true},
		"sse not the field":      {"data: {\"usage\":{\"prompt_tokens\":5}}\n\n", true, true, 0, false},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for name, tc := range tests {
		for _, chunk := range []int{0, 1, 7, 4096} {
			if chunk == 1 && len(tc.body) > 1<<16 {
				continue
			}
			got, found := scanCost(tc.body, "usage.total_tokens", tc.sse, tc.complete, chunk, rng)
			if got != tc.want || found != tc.found {
				t.Errorf("%s, reads of up to %d bytes: %d %v, want %d %v", name, chunk, got, found, tc.want, tc.found)
			}
		}
	}
}

func TestParseUsage(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "7": 7, "007": 7, "9007199254740991": 9007199254740991} {
		if got, ok := parseUsage([]byte(in)); !ok || got != want {
			t.Errorf("parseUsage(%q) = %d %v, want %d", in, got, ok, want)
		}
	}
	for _, in := range []string{"", "-1", "+1", "1.0", "1e3", "0x10", "9007199254740992", "99999999999999999999", "1 2", "１"} {
		if got, ok := parseUsage([]byte(in)); ok {
			t.Errorf("parseUsage(%q) = %d, want not a usage", in, got)
		}
	}
}

// FuzzCostScan: on any body, event stream or not, the scan neither panics nor depends on how
// the body is cut into reads, and what it finds is a usage parseUsage accepts.
func FuzzCostScan(f *testing.F) {
	f.Add([]byte(`{"usage":{"total_tokens":42}}`), false, uint8(3))
	f.Add([]byte("data: {\"usage\":{\"total_tokens\":3}}\r\n\r\ndata: [DONE]\n\n"), true, uint8(1))
	f.Add([]byte("data:{\"usage\":\ndata: {\"total_tokens\":8}}\n\n: c\nid: 1\n"), true, uint8(5))
	f.Fuzz(func(t *testing.T, body []byte, sse bool, chunk uint8) {
		rng := rand.New(rand.NewPCG(uint64(chunk), 7))
		whole, foundWhole := scanCost(string(body), "usage.total_tokens", sse, true, 0, rng)
		cut, foundCut := scanCost(string(body), "usage.total_tokens", sse, true, int(chunk)+1, rng)
		if whole != cut || foundWhole != foundCut {
			t.Fatalf("whole %d %v, in reads of up to %d bytes %d %v", whole, foundWhole, int(chunk)+1, cut, foundCut)
		}
		if foundWhole && (whole < 0 || whole > maxUsage) {
			t.Fatalf("found %d", whole)
		}
	})
}
