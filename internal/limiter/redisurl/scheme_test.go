package redisurl

import (
	"strings"
	"testing"
)

// TestParseScheme: every listed scheme parses back to itself, and the message for an unknown
// one names them all, as help texts and the webhook's validation quote it.
func TestParseScheme(t *testing.T) {
	schemes := URLSchemes()
	if got := strings.Join(schemes, " "); got != "redis rediss redis+cluster rediss+cluster redis+sentinel rediss+sentinel" {
		t.Fatalf("URLSchemes() = %s", got)
	}
	for _, s := range schemes {
		got, err := ParseScheme(s)
		if err != nil || got.String() != s || got.TLS != strings.HasPrefix(s, "rediss") {
			t.Errorf("ParseScheme(%q) = %+v (%q), %v", s, got, got.String(), err)
		}
	}
	for scheme, want := range map[string]string{
		"http":          `redis URL scheme "http" is not redis, rediss, redis+cluster, rediss+cluster, redis+sentinel or rediss+sentinel`,
		"redis+ring":    `redis URL scheme "redis+ring": unknown topology "ring", want cluster or sentinel`,
		"":              `redis URL scheme "" is not redis`,
		"cluster+redis": `redis URL scheme "cluster+redis" is not`,
	} {
		if _, err := ParseScheme(scheme); err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("ParseScheme(%q) error %v, want %q", scheme, err, want)
		}
	}
}
