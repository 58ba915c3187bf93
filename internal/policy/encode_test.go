package policy

import (
	"strings"
	"testing"
	"time"
)

func TestMarshalIsDeterministicAndRoundTrips(t *testing.T) {
	a, err := Marshal(validDoc())
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Marshal(validDoc())
	if string(a) != string(b) || Hash(a) != Hash(b) || !strings.HasSuffix(string(a), "}\n") {
		t.Fatalf("Marshal is not deterministic:\n%s\n%s", a, b)
	}
	d, err := Parse(a)
	if err != nil {
		t.Fatal(err)
	}
	if c, _ := Marshal(d); string(c) != string(a) {
		t.Fatalf("round trip changed the document:\n%s\n%s", a, c)
	}
	if got := d.Policies[0].Rules[0].LimiterLimit(); got.Window != time.Second || got.Capacity() != 10 {
		t.Fatalf("LimiterLimit = %+v", got)
	}
	if !d.Policies[0].Selects(map[string]string{"app": "web", "x": "y"}) || d.Policies[0].Selects(map[string]string{"app": "db"}) {
		t.Fatal("Selects disagrees with the selector")
	}
}
