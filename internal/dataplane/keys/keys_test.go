package keys

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/policy"
)

func mustTrusted(t testing.TB, cidrs ...string) Trusted {
	t.Helper()
	tr, err := ParseTrusted(cidrs)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func TestClientIP(t *testing.T) {
	trusted := mustTrusted(t, "10.0.0.0/8", "2001:db8:ffff::/48")
	tests := map[string]struct {
		peer string
		xff  []string
		want string
	}{
		"untrusted peer ignores the header": {"1.2.3.4", []string{"9.9.9.9"}, "1.2.3.4"},
		"trusted peer, no header":           {"10.0.0.1", nil, "10.0.0.1"},
		"trusted peer, one hop":             {"10.0.0.1", []string{"9.9.9.9"}, "9.9.9.9"},
		"right-most untrusted wins":         {"10.0.0.1", []string{"6.6.6.6, 9.9.9.9"}, "9.9.9.9"},
		"trusted hops are skipped":          {"10.0.0.1", []string{"6.6.6.6, 9.9.9.9, 10.1.1.1"}, "9.9.9.9"},
		"several header lines":              {"10.0.0.1", []string{"6.6.6.6", "9.9.9.9, 10.2.2.2"}, "9.9.9.9"},
		"all trusted: left-most":            {"10.0.0.1", []string{"10.3.3.3, 10.2.2.2"}, "10.3.3.3"},
		"garbage stops the walk":            {"10.0.0.1", []string{"9.9.9.9, nonsense, 10.2.2.2"}, "10.2.2.2"},
		"garbage right away: the peer":      {"10.0.0.1", []string{"nonsense"}, "10.0.0.1"},
		"empty elements are skipped":        {"10.0.0.1", []string{"9.9.9.9,, ,"}, "9.9.9.9"},
		"port and brackets":                 {"10.0.0.1", []string{"[2001:db8::1]:443"}, "2001:db8::1"},
		"IPv4-mapped IPv6 is IPv4":          {"10.0.0.1", []string{"::ffff:9.9.9.9"}, "9.9.9.9"},
		"mapped peer is trusted as IPv4":    {"::ffff:10.0.0.1", []string{"9.9.9.9"}, "9.9.9.9"},
		"IPv6 trusted network":              {"2001:db8:ffff::1", []string{"2001:db8::7"}, "2001:db8::7"},
		"bracketed without port":            {"10.0.0.1", []string{"[2001:db8::2]"}, "2001:db8::2"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			peer := netip.MustParseAddr(tc.peer).Unmap()
			if got := ClientIP(peer, tc.xff, trusted); got.String() != tc.want {
				t.Errorf("ClientIP = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestKeysAreUnambiguous(t *testing.T) {
	parts := []policy.KeyPart{{Source: policy.SourceHeader, Name: "A"}, {Source: policy.SourceHeader, Name: "B"}}
	k := CompileKey("p", "r", parts, Trusted{})
	key := func(a, b string) string {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header["A"], r.Header["B"] = []string{a}, []string{b}
		req := NewRequest(r)
		return string(k.Append(nil, &req))
	}
	pairs := [][2][2]string{
		{{"a:b", "c"}, {"a", "b:c"}},
		{{"1:", "x"}, {"1", ":x"}},
		{{strings.Repeat("x", 65), "y"}, {strings.Repeat("x", 64), "xy"}},
	}
	for _, p := range pairs {
		if x, y := key(p[0][0], p[0][1]), key(p[1][0], p[1][1]); x == y {
			t.Errorf("%q and %q give the same key %q", p[0], p[1], x)
		}
	}
	if long := key(strings.Repeat("z", 10000), "y"); len(long) > 100 {
		t.Errorf("a long value gave a %d-byte key", len(long))
	}
	if k2 := CompileKey("p", "r2", parts, Trusted{}); k2.Missing() == k.Missing() {
		t.Error("two rules share a missing key")
	}
	if got := key("", "b"); got != k.Missing() {
		t.Errorf("empty part: %q, want the missing key %q", got, k.Missing())
	}
}

func TestKeyParts(t *testing.T) {
	parts := []policy.KeyPart{{Source: policy.SourceClientIP}, {Source: policy.SourceMethod},
		{Source: policy.SourcePath}, {Source: policy.SourceQuery, Name: "u"}}
	k := CompileKey("pol", "rule", parts, mustTrusted(t, "192.0.2.0/24"))
	r := httptest.NewRequest("POST", "/a/b?x=1&u=bob%20s&u=eve", nil)
	r.RemoteAddr = "192.0.2.1:5555"
	r.Header.Set("X-Forwarded-For", "198.51.100.7")
	req := NewRequest(r)
	want := "3:pol4:rule12:198.51.100.74:POST4:/a/b5:bob s"
	if got := string(k.Append(nil, &req)); got != want {
		t.Errorf("key %q, want %q", got, want)
	}
}

func TestQueryValue(t *testing.T) {
	tests := []struct {
		raw, name, want string
		ok              bool
	}{
		{"a=1&b=2", "b", "2", true},
		{"a=1&a=2", "a", "1", true},
		{"a%20b=x+y", "a b", "x y", true},
		{"a", "a", "", true},
		{"b=1", "a", "", false},
		{"a=%zz", "a", "", false},
		{"&&a=1", "a", "1", true},
	}
	for _, tc := range tests {
		got, ok := QueryValue(tc.raw, tc.name)
		if got != tc.want || ok != tc.ok {
			t.Errorf("QueryValue(%q, %q) = %q, %v; want %q, %v", tc.raw, tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

func TestParseCost(t *testing.T) {
	tests := []struct {
		v    string
		want int64
		ok   bool
	}{
		{"1", 1, true}, {" 7 ", 7, true}, {"10", 10, true}, {"007", 7, true},
		{"11", 0, false}, {"0", 0, false}, {"-1", 0, false}, {"+1", 0, false}, {"1.0", 0, false},
		{"1e1", 0, false}, {"", 0, false}, {"1,2", 0, false}, {"99999999999999999999999", 0, false},
	}
	for _, tc := range tests {
		got, ok := ParseCost(tc.v, 10)
		if got != tc.want || ok != tc.ok {
			t.Errorf("ParseCost(%q, 10) = %d, %v; want %d, %v", tc.v, got, ok, tc.want, tc.ok)
		}
	}
}

func TestMatch(t *testing.T) {
	m := CompileMatch(&policy.Match{PathPrefix: "/api/", Methods: []string{"GET", "POST"},
		Headers: []policy.HeaderMatch{{Name: "X-Tier", Value: "free"}}})
	req := func(method, path, tier string) *http.Request {
		r := httptest.NewRequest(method, path, nil)
		if tier != "" {
			r.Header.Set("x-tier", tier)
		}
		return r
	}
	tests := []struct {
		r    *http.Request
		want bool
	}{
		{req("GET", "/api/x", "free"), true},
		{req("POST", "/api/", "free"), true},
		{req("PUT", "/api/x", "free"), false},
		{req("GET", "/other", "free"), false},
		{req("GET", "/api/x", "paid"), false},
		{req("GET", "/api/x", ""), false},
	}
	for i, tc := range tests {
		if got := m.Matches(tc.r); got != tc.want {
			t.Errorf("case %d %s %s: %v, want %v", i, tc.r.Method, tc.r.URL.Path, got, tc.want)
		}
	}
	var all Match
	if !all.Matches(req("DELETE", "/", "")) {
		t.Error("the zero Match must match everything")
	}
}

// TestMatchRoutes: a rule attached to an HTTPRoute also needs one of the route's matches, with
// Gateway API's element-wise path prefix.
func TestMatchRoutes(t *testing.T) {
	m := CompileMatch(&policy.Match{Methods: []string{"GET", "POST"}, Routes: []policy.RouteMatch{
		{PathPrefix: "/api/"},
		{PathExact: "/login", Method: "POST", Headers: []policy.HeaderMatch{{Name: "X-Tier", Value: "free"}}},
	}})
	req := func(method, path, tier string) *http.Request {
		r := httptest.NewRequest(method, path, nil)
		if tier != "" {
			r.Header.Set("x-tier", tier)
		}
		return r
	}
	tests := []struct {
		r    *http.Request
		want bool
	}{
		{req("GET", "/api", ""), true},
		{req("GET", "/api/x", ""), true},
		{req("GET", "/apix", ""), false},
		{req("PUT", "/api/x", ""), false}, // the rule's own methods still apply
		{req("POST", "/login", "free"), true},
		{req("GET", "/login", "free"), false},
		{req("POST", "/login", "paid"), false},
		{req("POST", "/login", ""), false},
		{req("POST", "/login/x", "free"), false},
		{req("GET", "/static", ""), false},
	}
	for i, tc := range tests {
		if got := m.Matches(tc.r); got != tc.want {
			t.Errorf("case %d %s %s: %v, want %v", i, tc.r.Method, tc.r.URL.Path, got, tc.want)
		}
	}
}

func BenchmarkKeyAppend(b *testing.B) {
	k := CompileKey("api", "per-client", []policy.KeyPart{{Source: policy.SourceClientIP}, {Source: policy.SourceHeader, Name: "X-Api-Key"}}, mustTrusted(b, "10.0.0.0/8"))
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "10.0.0.1:1234"
	r.Header.Set("X-Forwarded-For", "203.0.113.9, 10.0.0.2")
	r.Header.Set("X-Api-Key", "abcdef")
	var buf [256]byte
	b.ReportAllocs()
	for b.Loop() {
		req := NewRequest(r)
		_ = k.Append(buf[:0], &req)
	}
}

// TestFromValuesIsTheRequestsKey: the key sluicectl quota builds from values is the key the
// sidecar builds from a request carrying them, for every source, a trusted proxy's peer and a
// missing header.
func TestFromValuesIsTheRequestsKey(t *testing.T) {
	trusted, err := ParseTrusted([]string{"10.0.0.0/8"})
	if err != nil {
		t.Fatal(err)
	}
	parts := []policy.KeyPart{{Source: policy.SourceHeader, Name: "X-Api-Key"}, {Source: policy.SourceClientIP},
		{Source: policy.SourceQuery, Name: "tenant id"}, {Source: policy.SourcePath}, {Source: policy.SourceMethod}}
	k := CompileKey("p", "r", parts, trusted)
	req := Request{Method: "POST", Path: "/a b", RawQuery: "x=1&tenant+id=t%2F1", Header: HTTPHeader{"X-Api-Key": {"k,1"}}}
	req.SetPeer(netip.MustParseAddr("198.18.0.7"))
	want := string(k.Append(nil, &req))
	got, err := k.FromValues([]string{"k,1", "198.18.0.7", "t/1", "/a b", "POST"})
	if err != nil || got != want {
		t.Fatalf("FromValues = %q, %v; the request's key is %q", got, err, want)
	}
	if got, _ := k.FromValues([]string{"", "198.18.0.7", "t", "/", "GET"}); got != k.Missing() {
		t.Fatalf("an empty header value: %q, want the missing key %q", got, k.Missing())
	}
	if _, err := k.FromValues([]string{"a"}); err == nil {
		t.Fatal("FromValues took one value for five parts")
	}
}
