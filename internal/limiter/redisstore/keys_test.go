package redisstore

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testutil/redisserver"
)

// keyPattern is the layout of every key (see the package comment).
var keyPattern = regexp.MustCompile(`^([^{}]+):\{[0-9A-Za-z_-]{16}\}:2$`)

// maxKeyLen is the longest key, for the longest prefix.
const maxKeyLen = maxPrefixLen + len(":{}:2") + 16

// hostile are client-chosen keys that would inject into or collide with other keys if they
// reached Redis unhashed.
var hostile = []string{
	"", "a", "a:b", "a:", ":a", "a}", "{a", "{a}", "}{", "a}:fw1:1000", "sluice:{x}:fw1:1000",
	"a\nb", "a\r\n*1\r\n$8\r\nFLUSHALL\r\n", "\x00", "ключ", strings.Repeat("k", 1<<20),
	strings.Repeat("{", 1000) + strings.Repeat("}", 1000),
}

func checkKeys(t testing.TB, s *Store, key string, lim limiter.Limit) []string {
	t.Helper()
	ks := s.Keys(key, lim)
	for _, k := range ks {
		if !keyPattern.MatchString(k) || !strings.HasPrefix(k, s.prefix+":{") {
			t.Fatalf("Keys(%.40q) = %q, not in the documented layout", key, k)
		}
		if len(k) > maxKeyLen {
			t.Fatalf("Keys(%.40q) = %q, %d bytes, longer than %d", key, k, len(k), maxKeyLen)
		}
	}
	return ks
}

// TestKeysResistInjection: hostile keys map to distinct keys of bounded length in the layout,
// and on a real server each gets its own limit (a collision would deny the second one).
func TestKeysResistInjection(t *testing.T) {
	srv := redisserver.StartTest(t)
	s := newStore(t, newClient(t, srv.URL()), Options{Prefix: "sluice", Timeout: testTimeout, ExplicitTime: true})
	seen := map[string]string{}
	for _, lim := range limiter.Variants(1, time.Minute, 0, time.Minute) {
		for _, key := range hostile {
			for _, k := range checkKeys(t, s, key, lim) {
				if other, dup := seen[k]; dup {
					t.Fatalf("%.40q and %.40q share key %s", key, other, k)
				}
				seen[k] = key
			}
			if r := mustTake(t, s, key, lim, 1, at(0)); !r.Allowed {
				t.Fatalf("%s: first request of %.40q denied: %+v; its key collides with another", lim.Name(), key, r)
			}
		}
	}
	n, err := srv.Do("DBSIZE")
	if err != nil {
		t.Fatal(err)
	}
	want := 0
	for _, lim := range limiter.Variants(1, time.Minute, 0, time.Minute) {
		want += len(hostile) * len(s.Keys("", lim))
	}
	if n != strconv.Itoa(want) {
		t.Fatalf("DBSIZE = %s, want %d: one state per key and algorithm", n, want)
	}
}

// TestKeysSeparateAlgorithmsAndWindows: the algorithm, leaky mode and window are part of the
// key, so a policy edit that changes what the state means starts from a fresh state; limit,
// burst and max delay are not, so such edits keep the state (as limiter.MemoryStore does).
func TestKeysSeparateAlgorithmsAndWindows(t *testing.T) {
	s := New(nil, Options{})
	base := limiter.Limit{Algorithm: limiter.LeakyBucket, Limit: 10, Window: time.Second, Mode: limiter.Meter}
	same := func(l limiter.Limit) bool { return s.Keys("k", l)[0] == s.Keys("k", base)[0] }
	edit := func(f func(*limiter.Limit)) limiter.Limit { l := base; f(&l); return l }
	for name, tc := range map[string]struct {
		lim  limiter.Limit
		same bool
	}{
		"limit":     {edit(func(l *limiter.Limit) { l.Limit = 20 }), true},
		"burst":     {edit(func(l *limiter.Limit) { l.Burst = 50 }), true},
		"max delay": {edit(func(l *limiter.Limit) { l.MaxDelay = time.Second }), true},
		"window":    {edit(func(l *limiter.Limit) { l.Window = time.Minute }), false},
		"mode":      {edit(func(l *limiter.Limit) { l.Mode = limiter.Queue }), false},
		"algorithm": {edit(func(l *limiter.Limit) { l.Algorithm = limiter.TokenBucket }), false},
	} {
		if got := same(tc.lim); got != tc.same {
			t.Errorf("editing the %s: same key = %v, want %v", name, got, tc.same)
		}
	}
}

// FuzzKeys: any key, under any prefix the options accept, maps to keys in the layout, of
// bounded length, with the hash tag the only braces; distinct keys map to distinct keys.
func FuzzKeys(f *testing.F) {
	for _, k := range hostile[:12] {
		f.Add("sluice", k, "other")
	}
	f.Fuzz(func(t *testing.T, prefix, a, b string) {
		o := Options{Prefix: prefix}
		if o.Validate() != nil || prefix == "" {
			return
		}
		s := New(nil, o)
		for _, lim := range limiter.Variants(1, time.Second, 0, 0) {
			ka, kb := checkKeys(t, s, a, lim), checkKeys(t, s, b, lim)
			if (a == b) != (ka[0] == kb[0]) {
				t.Fatalf("keys %q and %q map to %q and %q", a, b, ka[0], kb[0])
			}
		}
	})
}

func TestOptionsValidate(t *testing.T) {
	for prefix, ok := range map[string]bool{
		"":                      true,
		"sluice":                true,
		"team-a.prod_v2:limits": true,
		strings.Repeat("p", 64): true,
		strings.Repeat("p", 65): false,
		"a{b":                   false,
		"a}b":                   false,
		"a b":                   false,
		"a\nb":                  false,
		"\x7f":                  false,
	} {
		if err := (Options{Prefix: prefix}).Validate(); (err == nil) != ok {
			t.Errorf("Validate(prefix %q) = %v, want ok=%v", prefix, err, ok)
		}
	}
	if err := (Options{Timeout: -1}).Validate(); err == nil {
		t.Error("Validate accepted a negative timeout")
	}
	defer func() {
		if recover() == nil {
			t.Error("New accepted an invalid prefix")
		}
	}()
	New(nil, Options{Prefix: "{x}"})
}
