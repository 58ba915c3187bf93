package keys

import (
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/policy"
)

// TestEncodePartIsPartOfTheRequestsKey: for every source, a value of any length and bytes (long
// ones hashed, addresses in every spelling), the part a request's key holds (PartOf) is what
// EncodePart writes for that value, so a tenant table's entries find their requests.
func TestEncodePartIsPartOfTheRequestsKey(t *testing.T) {
	trusted, err := ParseTrusted([]string{"10.0.0.0/8"})
	if err != nil {
		t.Fatal(err)
	}
	parts := []policy.KeyPart{{Source: policy.SourceHeader, Name: "X-Tenant"}, {Source: policy.SourceClientIP},
		{Source: policy.SourceQuery, Name: "org"}, {Source: policy.SourcePath}, {Source: policy.SourceMethod}}
	k := CompileKey("policy:1", "rule#2", parts, trusted)
	rng := rand.New(rand.NewPCG(36, 2))
	value := func() string {
		n := rng.IntN(3 * MaxPartLen)
		var b strings.Builder
		for range n {
			b.WriteByte(byte(1 + rng.IntN(255)))
		}
		return strings.ToValidUTF8(b.String(), "x")
	}
	addrs := []string{"198.18.0.7", "::ffff:198.18.0.7", "2001:db8::1", "2001:0db8:0000::0001", "fe80::1"}
	for range 2000 {
		values := []string{value(), addrs[rng.IntN(len(addrs))], value(), "/" + value(), "GET"}
		if values[0] == "" || values[2] == "" {
			continue // a missing part: the Missing key, which has no parts
		}
		key, err := k.FromValues(values)
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range values {
			got, ok := k.PartOf(key, i)
			want := k.EncodePart(i, v)
			if !ok || got != want {
				t.Fatalf("part %d of %v: PartOf = %q, %v; EncodePart = %q", i, values, got, ok, want)
			}
		}
		if _, ok := k.PartOf(key, len(values)); ok {
			t.Fatal("PartOf found a part past the last")
		}
	}
	if _, ok := k.PartOf(k.Missing(), 0); ok {
		t.Error("PartOf found a part in the Missing key")
	}
	if got, want := k.EncodePart(1, "::ffff:198.18.0.7"), k.EncodePart(1, netip.MustParseAddr("198.18.0.7").String()); got != want {
		t.Errorf("an IPv4-mapped address encodes as %q, IPv4 as %q", got, want)
	}
	d := CompileKey("p", "r", []policy.KeyPart{{Source: policy.SourceDescriptor, Name: "tenant"}}, Trusted{})
	key := string(d.AppendDescriptor(nil, func(string) string { return "acme" }))
	if got, ok := d.PartOf(key, 0); !ok || got != d.EncodePart(0, "acme") {
		t.Errorf("descriptor part %q, %v; want %q", got, ok, d.EncodePart(0, "acme"))
	}
}
