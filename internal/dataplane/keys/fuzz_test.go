package keys

import (
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/policy"
)

// FuzzClientIP checks that whatever X-Forwarded-For says, the client is the peer when the peer
// is untrusted, and otherwise an address that appears in the header or is the peer.
func FuzzClientIP(f *testing.F) {
	for _, s := range []string{"1.2.3.4", "1.2.3.4, 10.0.0.1", "[::1]:80", "garbage", ",,,", "::ffff:1.2.3.4", "10.0.0.1,10.0.0.2", "1.2.3.4:99, ,x"} {
		f.Add(s, true)
		f.Add(s, false)
	}
	trusted, _ := ParseTrusted([]string{"10.0.0.0/8", "::1/128"})
	f.Fuzz(func(t *testing.T, xff string, peerTrusted bool) {
		peer := netip.MustParseAddr("192.0.2.1")
		if peerTrusted {
			peer = netip.MustParseAddr("10.9.9.9")
		}
		got := ClientIP(peer, []string{xff}, trusted)
		if !got.IsValid() {
			t.Fatalf("invalid address for %q", xff)
		}
		if !peerTrusted && got != peer {
			t.Fatalf("untrusted peer: got %s from %q", got, xff)
		}
		if got != peer {
			found := false
			for _, e := range strings.Split(xff, ",") {
				if a, ok := parseHop(e); ok && a == got {
					found = true
				}
			}
			if !found {
				t.Fatalf("%s is neither the peer nor in %q", got, xff)
			}
		}
	})
}

// FuzzKeyInjective checks that two different pairs of header values never share a key.
func FuzzKeyInjective(f *testing.F) {
	f.Add("a:b", "c", "a", "b:c")
	f.Add("1:", "x", "1", ":x")
	f.Add(strings.Repeat("x", 70), "", "x", "y")
	k := CompileKey("p", "r", []policy.KeyPart{{Source: policy.SourceHeader, Name: "A"}, {Source: policy.SourceHeader, Name: "B"}}, Trusted{})
	key := func(a, b string) string {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header["A"], r.Header["B"] = []string{a}, []string{b}
		req := NewRequest(r)
		return string(k.Append(nil, &req))
	}
	f.Fuzz(func(t *testing.T, a1, b1, a2, b2 string) {
		k1, k2 := key(a1, b1), key(a2, b2)
		missing1, missing2 := a1 == "" || b1 == "", a2 == "" || b2 == ""
		same := (a1 == a2 && b1 == b2) || (missing1 && missing2)
		if (k1 == k2) != same {
			t.Fatalf("(%q,%q) -> %q and (%q,%q) -> %q", a1, b1, k1, a2, b2, k2)
		}
		if len(k1) > 2*(MaxPartLen+8)+16 {
			t.Fatalf("key of %d bytes", len(k1))
		}
	})
}

// FuzzParseCost checks ParseCost against strconv: only plain decimal within 1..capacity.
func FuzzParseCost(f *testing.F) {
	for _, s := range []string{"1", "0", "-1", "+5", " 3 ", "100", "101", "1e2", "0x10", "99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		const capacity = 100
		got, ok := ParseCost(v, capacity)
		trimmed := strings.Trim(v, " \t")
		n, err := strconv.ParseInt(trimmed, 10, 64)
		plain := err == nil && trimmed != "" && trimmed[0] != '+' && trimmed[0] != '-'
		want := plain && n >= 1 && n <= capacity
		if ok != want || (ok && got != n) {
			t.Fatalf("ParseCost(%q) = %d, %v; strconv says %d, %v", v, got, ok, n, err)
		}
	})
}
