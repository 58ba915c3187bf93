package proxy_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/policy"
	st "github.com/sluice-dev/sluice/internal/testutil/sidecartest"
)

// TestHotReloadUnderLoad updates policies.json the way kubelet does while requests flow: the
// new limits apply, no request fails, and a broken file leaves the last good configuration.
func TestHotReloadUnderLoad(t *testing.T) {
	generous := st.Doc(t, st.Policy("api", []policy.Rule{st.Rule("r", 100_000_000, time.Hour)}))
	// A generous Redis budget: a call that timed out on a loaded machine would fall back to the
	// local share, a counter of its own, and admit past the tight limit below.
	e := newEnv(t, generous, envOpt{watch: true})
	l := e.startLoad(4, "/", func(int) map[string]string { return nil })
	waitRequests(t, l, 200)

	tight := st.Doc(t, st.Policy("api", []policy.Rule{st.Rule("r", 5, time.Hour, func(r *policy.Rule) {
		r.Key = []policy.KeyPart{{Source: policy.SourceMethod}} // a key no request used yet
	})}))
	e.vol.Write(t, map[string][]byte{"policies.json": tight})
	st.Eventually(t, func() error {
		if c := l.snapshot(); c[429] == 0 {
			return fmt.Errorf("no request limited yet (generation %d): %v", e.loader.Current().Generation, c)
		}
		return nil
	})
	if g := e.loader.Current().Generation; g != 2 {
		t.Errorf("generation %d, want 2", g)
	}

	failures := e.m.ReloadFailures.Value()
	e.vol.Write(t, map[string][]byte{"policies.json": []byte(`{"version":1,"policies":[{"name":"x"`)})
	st.Eventually(t, func() error {
		if got := e.m.ReloadFailures.Value(); got != failures+1 {
			return fmt.Errorf("reload failures %v, want %v", got, failures+1)
		}
		return nil
	})
	// Requests admitted under the tight limit may still be in flight; let them finish.
	waitRequests(t, l, sum(l.snapshot())+50)
	before := l.snapshot()
	waitRequests(t, l, sum(before)+200)
	after := l.snapshot()
	if after[200] != before[200] {
		t.Errorf("after the broken file %d more requests were admitted; the tight limit must stay", after[200]-before[200])
	}
	if g := e.loader.Current().Generation; g != 2 {
		t.Errorf("generation %d after a broken file, want 2", g)
	}

	e.vol.Write(t, map[string][]byte{"policies.json": generous})
	st.Eventually(t, func() error {
		if g := e.loader.Current().Generation; g != 3 {
			return fmt.Errorf("generation %d, want 3", g)
		}
		return nil
	})
	codes := l.end()
	for code, n := range codes {
		if code != 200 && code != 429 {
			t.Errorf("%d requests answered %d during reloads (0 = transport error): %v", n, code, codes)
		}
	}
	t.Logf("answers during reloads: %v", codes)
}

func waitRequests(t *testing.T, l *load, n int) {
	t.Helper()
	st.Eventually(t, func() error {
		if got := sum(l.snapshot()); got < n {
			return fmt.Errorf("%d requests done, want %d", got, n)
		}
		return nil
	})
}

func sum(m map[int]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
