package limiter

import (
	"context"
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// want is one take's expected decision in a step table.
type want struct {
	allowed   bool
	remaining int64
	reason    Reason
}

func ok(remaining int64) want { return want{allowed: true, remaining: remaining} }
func no(remaining int64, reason Reason) want {
	return want{remaining: remaining, reason: reason}
}

// reqStep is one request of a step table: its takes at t0+at, whether it is admitted and each
// take's decision.
type reqStep struct {
	at       int64
	takes    []Take
	admitted bool
	want     []want
}

// requestTables are the multi-rule scenarios every RequestStore must decide alike. Every step is
// at one instant (or an hour apart), so no bucket refills between steps and a later step's
// Remaining shows exactly what an earlier one charged.
var requestTables = func() map[string][]reqStep {
	hour := time.Hour
	perIP := Limit{Algorithm: FixedWindow, Limit: 5, Window: hour}
	perKey := Limit{Algorithm: FixedWindow, Limit: 2, Window: hour}
	tb := Limit{Algorithm: TokenBucket, Limit: 3, Window: hour}
	swl := Limit{Algorithm: SlidingWindowLog, Limit: 4, Window: hour}
	meter := Limit{Algorithm: LeakyBucket, Limit: 5, Window: hour, Mode: Meter}
	queue := Limit{Algorithm: LeakyBucket, Limit: 5, Window: hour, Mode: Queue} // MaxDelay 0
	swc := Limit{Algorithm: SlidingWindowCounter, Limit: 2, Window: hour}
	one := Limit{Algorithm: FixedWindow, Limit: 1, Window: hour}
	three := Limit{Algorithm: FixedWindow, Limit: 3, Window: hour}
	log3 := Limit{Algorithm: SlidingWindowLog, Limit: 3, Window: hour}
	tk := func(key string, lim Limit, n int64) Take { return Take{Key: key, Limit: lim, N: n} }
	shadow := func(key string, lim Limit, n int64) Take { return Take{Key: key, Limit: lim, N: n, Shadow: true} }
	const limited, tooCostly, tooLong = ReasonLimited, ReasonCostExceedsCapacity, ReasonDelayTooLong
	ipA := func() []Take { return []Take{tk("ip:1.2.3.4", perIP, 1), tk("key:A", perKey, 1)} }
	ipB := func() []Take { return []Take{tk("ip:1.2.3.4", perIP, 1), tk("key:B", perKey, 1)} }
	return map[string][]reqStep{
		// Issue 21: key A's denied requests do not spend the shared IP's quota, so key B from
		// the same IP still gets its 2 of 3.
		"issue 21": {
			{0, ipA(), true, []want{ok(4), ok(1)}},
			{0, ipA(), true, []want{ok(3), ok(0)}},
			{0, ipA(), false, []want{ok(2), no(0, limited)}},
			{0, ipA(), false, []want{ok(2), no(0, limited)}},
			{0, ipB(), true, []want{ok(2), ok(1)}},
			{0, ipB(), true, []want{ok(1), ok(0)}},
			{0, ipB(), false, []want{ok(0), no(0, limited)}},
			{0, []Take{tk("ip:1.2.3.4", perIP, 1)}, true, []want{ok(0)}},
		},
		"denied by the first rule": {
			{0, []Take{tk("a", tb, 3), tk("b", swl, 1), tk("c", meter, 1)}, true, []want{ok(0), ok(3), ok(4)}},
			{0, []Take{tk("a", tb, 1), tk("b", swl, 1), tk("c", meter, 1)}, false, []want{no(0, limited), ok(2), ok(3)}},
			{0, []Take{tk("b", swl, 3), tk("c", meter, 4)}, true, []want{ok(0), ok(0)}},
		},
		"denied by the middle rule, cost exceeds capacity": {
			{0, []Take{tk("a", tb, 1), tk("b", swl, 5), tk("c", meter, 1)}, false, []want{ok(2), no(4, tooCostly), ok(4)}},
			{0, []Take{tk("a", tb, 3), tk("c", meter, 5)}, true, []want{ok(0), ok(0)}},
		},
		"denied by the last rule, queue delay": {
			{0, []Take{tk("a", tb, 1), tk("b", swl, 1), tk("q", queue, 1)}, true, []want{ok(2), ok(3), ok(0)}},
			{0, []Take{tk("a", tb, 1), tk("b", swl, 1), tk("q", queue, 1)}, false, []want{ok(1), ok(2), no(0, tooLong)}},
			{0, []Take{tk("a", tb, 2), tk("b", swl, 3)}, true, []want{ok(0), ok(0)}},
		},
		"shadow rules are charged only when the request is admitted": {
			{0, []Take{shadow("s", swc, 1), tk("e1", one, 1)}, true, []want{ok(1), ok(0)}},
			{0, []Take{shadow("s", swc, 1), tk("e1", one, 1)}, false, []want{ok(0), no(0, limited)}},
			{0, []Take{shadow("s", swc, 1), tk("e2", one, 1)}, true, []want{ok(0), ok(0)}},
			{0, []Take{shadow("s", swc, 1), tk("e3", one, 1)}, true, []want{no(0, limited), ok(0)}},
			{0, []Take{shadow("s", swc, 1)}, true, []want{no(0, limited)}},
		},
		"a repeated key sees its earlier takes": {
			{0, []Take{tk("k", three, 2), tk("k", three, 2)}, false, []want{ok(1), no(1, limited)}},
			{0, []Take{tk("k", three, 3)}, true, []want{ok(0)}},
			{0, []Take{tk("k2", three, 1), tk("k2", three, 1)}, true, []want{ok(2), ok(1)}},
			{0, []Take{tk("k2", three, 1)}, true, []want{ok(0)}},
			{0, []Take{tk("k2", three, 1)}, false, []want{no(0, limited)}},
		},
		"a repeated log key merges and is undone": {
			{0, []Take{tk("l", log3, 1), tk("l", log3, 1)}, true, []want{ok(2), ok(1)}},
			{0, []Take{tk("l", log3, 2)}, false, []want{no(1, limited)}},
			{0, []Take{tk("l", log3, 1), tk("l", log3, 1)}, false, []want{ok(0), no(0, limited)}},
			{0, []Take{tk("l", log3, 1)}, true, []want{ok(0)}},
			{3_600_000, []Take{tk("l", log3, 3), tk("x", one, 1)}, true, []want{ok(0), ok(0)}},
		},
	}
}()

// runRequestTables runs requestTables through the RequestStore newStore returns (fresh per
// table).
func runRequestTables(t *testing.T, newStore func(t *testing.T) RequestStore) {
	for name, steps := range requestTables {
		t.Run(name, func(t *testing.T) {
			s := newStore(t)
			for i, st := range steps {
				res := make([]Result, len(st.takes))
				admitted, err := s.TakeRequest(context.Background(), st.takes, at(st.at), res)
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				var got []want
				for _, r := range res {
					got = append(got, want{r.Allowed, r.Remaining, r.Reason})
				}
				if admitted != st.admitted || fmt.Sprint(got) != fmt.Sprint(st.want) {
					t.Fatalf("step %d: admitted %v %v, want %v %v", i, admitted, got, st.admitted, st.want)
				}
				if admitted != Admitted(st.takes, res) {
					t.Fatalf("step %d: admitted %v, but Admitted says %v", i, admitted, !admitted)
				}
			}
		})
	}
}

func TestMemoryStoreTakeRequestTables(t *testing.T) {
	runRequestTables(t, func(*testing.T) RequestStore { return NewMemoryStore(MemoryStoreOptions{}) })
}

// refEntry is refStore's state of one key: the pure state and the Limit it was last used with.
type refEntry struct {
	s   taker
	lim Limit
	// expires is when s is a fresh key's again under lim: the last take's now + ResetAfter;
	// latest the latest instant it was decided at.
	expires, latest int64
}

// refStore is the reference TakeRequest: the algorithms' Take on explicit copies of the states,
// committed only when the request is admitted. A key used with another algorithm, window or
// mode starts fresh, as in MemoryStore, and so does a key used with another Limit once its
// state is back to a fresh key's (expired).
type refStore map[string]refEntry

func (ref refStore) takeRequest(takes []Take, now int64) ([]Result, bool) {
	tent := map[string]refEntry{}
	isNew := map[string]bool{} // keys the request found absent, or expired for its limit
	res := make([]Result, len(takes))
	for i, tk := range takes {
		e, ok := tent[tk.Key]
		if !ok {
			if e, ok = ref[tk.Key]; ok {
				e.s = clone(e.s)
			}
			if ok && e.lim != tk.Limit && e.expires <= max(now, e.latest) {
				ok = false // expired under its old limit: a new key, as if absent
			}
			isNew[tk.Key] = !ok
		}
		if !ok || e.lim.Algorithm != tk.Limit.Algorithm || e.lim.Window != tk.Limit.Window || e.lim.Mode != tk.Limit.Mode {
			e.s, e.latest = newState(tk.Limit.Algorithm), 0
		}
		e.latest = max(e.latest, now)
		e.lim = tk.Limit
		res[i] = e.s.Take(tk.Limit, tk.N, now)
		e.expires = now + res[i].ResetAfter.Milliseconds()
		tent[tk.Key] = e
	}
	admitted := Admitted(takes, res)
	if admitted {
		for k, e := range tent {
			if isNew[k] && e.expires <= now {
				delete(ref, k) // a new key the request leaves fresh is not remembered
				continue
			}
			ref[k] = e
		}
	}
	return res, admitted
}

// randomRequestLimit is randomLimit with LeakyBucket in either mode.
func randomRequestLimit(rng *rand.Rand) Limit {
	lim := randomLimit(rng, algorithms[rng.Intn(len(algorithms))])
	if lim.Algorithm == LeakyBucket && rng.Intn(2) == 0 {
		lim.Mode, lim.MaxDelay = Queue, ms(rng.Int63n(2*lim.WindowMs()))
	}
	return lim
}

// TestMemoryStoreTakeRequestMatchesReference replays random multi-take requests (repeated keys,
// shadow takes, costs beyond capacity, limits edited in place or replaced, instants that go
// backwards) through MemoryStore.TakeRequest and refStore: every decision must be identical.
func TestMemoryStoreTakeRequestMatchesReference(t *testing.T) {
	keys := []string{"a", "b", "c", "d"}
	for seed := int64(0); seed < traces; seed++ {
		rng := rand.New(rand.NewSource(seed))
		m, ref := NewMemoryStore(MemoryStoreOptions{}), refStore{}
		lims := map[string]Limit{}
		for _, k := range keys {
			lims[k] = randomRequestLimit(rng)
		}
		now, admitted, denied := t0, 0, 0
		type past struct {
			now   int64
			takes []Take
			ok    bool
		}
		var trace []past
		for step := 0; step < 300; step++ {
			now += randomGap(rng, 100)
			if rng.Intn(25) == 0 {
				now -= rng.Int63n(100)
			}
			takes := make([]Take, 1+rng.Intn(5))
			for i := range takes {
				k := keys[rng.Intn(len(keys))]
				switch rng.Intn(40) {
				case 0: // another algorithm, or the same with other parameters
					lims[k] = randomRequestLimit(rng)
				case 1:
					l := lims[k]
					l.Limit = 1 + rng.Int63n(20)
					lims[k] = l
				}
				takes[i] = Take{Key: k, Limit: lims[k], N: randomCost(rng, lims[k].Capacity()), Shadow: rng.Intn(5) == 0}
			}
			want, wantOK := ref.takeRequest(takes, now)
			got := make([]Result, len(takes))
			gotOK, err := m.TakeRequest(context.Background(), takes, time.UnixMilli(now), got)
			if err != nil {
				t.Fatalf("seed %d step %d: %v", seed, step, err)
			}
			trace = append(trace, past{now, takes, wantOK})
			if gotOK != wantOK || !slices.Equal(got, want) {
				var b strings.Builder
				for _, p := range trace[max(0, len(trace)-10):] {
					fmt.Fprintf(&b, "  t0+%d %+v -> %v\n", p.now-t0, p.takes, p.ok)
				}
				t.Fatalf("seed %d step %d at t0+%d, takes %+v:\nmemory    %v %+v\nreference %v %+v\ntrace (last 10):\n%s",
					seed, step, now-t0, takes, gotOK, got, wantOK, want, b.String())
			}
			if gotOK {
				admitted++
			} else {
				denied++
			}
		}
		if admitted == 0 || denied == 0 {
			t.Fatalf("seed %d: %d admitted, %d denied: the trace tests little", seed, admitted, denied)
		}
	}
}

// TestMemoryStoreTakeRequestOneTakeIsTake: an admitted one-take request is Take, and a denied
// one decides as Take does.
func TestMemoryStoreTakeRequestOneTakeIsTake(t *testing.T) {
	for _, lim := range Variants(5, time.Second, 0, 500*time.Millisecond) {
		t.Run(lim.Name(), func(t *testing.T) {
			a, b := NewMemoryStore(MemoryStoreOptions{}), NewMemoryStore(MemoryStoreOptions{})
			rng := rand.New(rand.NewSource(1))
			now := t0
			for step := 0; step < 500; step++ {
				now += rng.Int63n(300)
				c := randomCost(rng, lim.Capacity())
				want, err := a.Take(context.Background(), "k", lim, c, time.UnixMilli(now))
				if err != nil {
					t.Fatal(err)
				}
				var got [1]Result
				admitted, err := b.TakeRequest(context.Background(), []Take{{Key: "k", Limit: lim, N: c}}, time.UnixMilli(now), got[:])
				if err != nil || got[0] != want || admitted != want.Allowed {
					t.Fatalf("step %d: TakeRequest %v %+v %v, Take %+v", step, admitted, got[0], err, want)
				}
			}
		})
	}
}

// TestMemoryStoreTakeRequestErrors: nothing is decided or charged for an invalid request.
func TestMemoryStoreTakeRequestErrors(t *testing.T) {
	good := Limit{Algorithm: FixedWindow, Limit: 1, Window: time.Second}
	for name, tc := range map[string]struct {
		takes []Take
		now   time.Time
		res   int
	}{
		"cost 0":        {[]Take{{Key: "k", Limit: good, N: 1}, {Key: "j", Limit: good, N: 0}}, at(0), 2},
		"invalid limit": {[]Take{{Key: "k", Limit: good, N: 1}, {Key: "j", Limit: Limit{Algorithm: FixedWindow}, N: 1}}, at(0), 2},
		"before epoch":  {[]Take{{Key: "k", Limit: good, N: 1}}, time.UnixMilli(-1), 1},
		"short res":     {[]Take{{Key: "k", Limit: good, N: 1}, {Key: "j", Limit: good, N: 1}}, at(0), 1},
	} {
		t.Run(name, func(t *testing.T) {
			m := NewMemoryStore(MemoryStoreOptions{})
			if _, err := m.TakeRequest(context.Background(), tc.takes, tc.now, make([]Result, tc.res)); err == nil {
				t.Fatal("no error")
			}
			if r, _ := m.Take(context.Background(), "k", good, 1, at(0)); !r.Allowed || m.Len() != 1 {
				t.Fatalf("the failed request charged k: %+v, %d keys", r, m.Len())
			}
		})
	}
	if admitted, err := NewMemoryStore(MemoryStoreOptions{}).TakeRequest(context.Background(), nil, at(0), nil); !admitted || err != nil {
		t.Fatalf("empty request: %v, %v", admitted, err)
	}
}

// TestMemoryStoreTakeRequestManyTakes: more takes than fit the inline buffers, spread over
// every shard, decide as the reference does.
func TestMemoryStoreTakeRequestManyTakes(t *testing.T) {
	m, ref := NewMemoryStore(MemoryStoreOptions{}), refStore{}
	lim := Limit{Algorithm: FixedWindow, Limit: 3, Window: time.Hour}
	for step := 0; step < 5; step++ {
		takes := make([]Take, 200)
		for i := range takes {
			takes[i] = Take{Key: fmt.Sprint("k", i%150), Limit: lim, N: 1}
		}
		if step == 2 {
			takes[199].N = 3 // k49 has 1 left: denied
		}
		want, wantOK := ref.takeRequest(takes, t0)
		got := make([]Result, len(takes))
		gotOK, err := m.TakeRequest(context.Background(), takes, at(0), got)
		if err != nil || gotOK != wantOK || fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("step %d: %v %v, reference %v", step, gotOK, err, wantOK)
		}
	}
	if m.Len() != 150 {
		t.Fatalf("%d keys, want 150", m.Len())
	}
}

// TestMemoryStoreTakeRequestKeepsLogAccounting: admitted and denied requests over logs keep
// the shard's count of log entries equal to what its logs hold, and the bound holds.
func TestMemoryStoreTakeRequestKeepsLogAccounting(t *testing.T) {
	m := NewMemoryStore(MemoryStoreOptions{MaxKeys: 16, MaxLogEntries: 64})
	rng := rand.New(rand.NewSource(7))
	now := t0
	for step := 0; step < 3000; step++ {
		now += rng.Int63n(20)
		takes := make([]Take, 1+rng.Intn(4))
		for i := range takes {
			lim := Limit{Algorithm: SlidingWindowLog, Limit: 1 + rng.Int63n(40), Window: time.Second}
			if rng.Intn(3) == 0 {
				lim = Limit{Algorithm: TokenBucket, Limit: 3, Window: time.Second}
			}
			takes[i] = Take{Key: fmt.Sprint(rng.Intn(40)), Limit: lim, N: 1 + rng.Int63n(2)}
		}
		if _, err := m.TakeRequest(context.Background(), takes, time.UnixMilli(now), make([]Result, len(takes))); err != nil {
			t.Fatal(err)
		}
		for i := range m.shards {
			sh := &m.shards[i]
			held := 0
			for _, e := range sh.entries {
				held += e.logEntries()
			}
			if held != sh.logEntries {
				t.Fatalf("step %d shard %d: logs hold %d entries, the shard counts %d", step, i, held, sh.logEntries)
			}
		}
	}
	if n := m.Len(); n > 16 {
		t.Fatalf("%d keys held, bound 16", n)
	}
}

// TestMemoryStoreTakeRequestZeroAllocs: a request of up to 8 takes on existing keys allocates
// nothing, admitted or denied.
func TestMemoryStoreTakeRequestZeroAllocs(t *testing.T) {
	m := NewMemoryStore(MemoryStoreOptions{})
	var takes []Take
	for i, lim := range Variants(10_000, time.Hour, 0, time.Hour) {
		takes = append(takes, Take{Key: fmt.Sprint("k", i), Limit: lim, N: 1})
	}
	takes = append(takes, takes[0], takes[1]) // 8, with repeated keys
	res := make([]Result, len(takes))
	ctx, now := context.Background(), at(0)
	for range 3 { // the logs reach their buffer's size
		if _, err := m.TakeRequest(ctx, takes, now, res); err != nil {
			t.Fatal(err)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = m.TakeRequest(ctx, takes, now, res) }); n != 0 {
		t.Errorf("admitted: %v allocations per request, want 0", n)
	}
	denied := append([]Take(nil), takes...)
	denied[3].N = 20_000 // cost exceeds capacity
	if n := testing.AllocsPerRun(100, func() { _, _ = m.TakeRequest(ctx, denied, now, res) }); n != 0 {
		t.Errorf("denied: %v allocations per request, want 0", n)
	}
}

// TestMemoryStoreTakeRequestConcurrent: 64 goroutines send requests under two rules sharing
// the IP part of their keys, a per-IP limit and a per-(IP, API key) limit, at one instant.
// Exactly the tighter total passes, and each rule is charged for exactly the admitted requests:
// a rule that admits a request another denies is not charged for it (independent Takes would
// charge the per-IP rule for every request the per-key rule denies, and vice versa).
func TestMemoryStoreTakeRequestConcurrent(t *testing.T) {
	const goroutines, each, apiKeys = 64, 40, 8
	for _, tc := range []struct {
		name          string
		perIP, perKey int64
	}{
		{"per-IP binds", 50, 10},   // 8 keys x 10 > 50
		{"per-key binds", 100, 10}, // 8 keys x 10 < 100
	} {
		t.Run(tc.name, func(t *testing.T) {
			ipLim := Limit{Algorithm: FixedWindow, Limit: tc.perIP, Window: time.Hour}
			keyLim := Limit{Algorithm: TokenBucket, Limit: tc.perKey, Window: time.Hour}
			m := NewMemoryStore(MemoryStoreOptions{})
			admitted := runTwoRules(t, m, ipLim, keyLim, goroutines, each, apiKeys)
			total := int64(0)
			for _, n := range admitted {
				total += n
			}
			if want := min(tc.perIP, apiKeys*tc.perKey); total != want {
				t.Fatalf("%d admitted, want exactly %d", total, want)
			}
			// Probe each rule's state with a request costlier than its capacity: denied, it
			// charges nothing and reports what is left.
			probe := func(key string, lim Limit) int64 {
				r, err := m.Take(context.Background(), key, lim, lim.Capacity()+1, at(0))
				if err != nil {
					t.Fatal(err)
				}
				return r.Remaining
			}
			if left := probe("ip:10.0.0.1", ipLim); left != tc.perIP-total {
				t.Errorf("per-IP rule has %d left after %d admitted, want %d", left, total, tc.perIP-total)
			}
			for k, n := range admitted {
				if left := probe(fmt.Sprintf("ip:10.0.0.1/key:%d", k), keyLim); left != tc.perKey-n {
					t.Errorf("API key %d: %d left after %d admitted, want %d", k, left, n, tc.perKey-n)
				}
			}
		})
	}
}

// runTwoRules has goroutines send each requests, goroutine g with API key g%apiKeys from one
// IP, under ipLim (key "ip:10.0.0.1") and keyLim (key "ip:10.0.0.1/key:<k>"), all at at(0),
// and returns the number admitted per API key.
func runTwoRules(t *testing.T, s RequestStore, ipLim, keyLim Limit, goroutines, each, apiKeys int) []int64 {
	t.Helper()
	counts := make([]atomic.Int64, apiKeys)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := g % apiKeys
			takes := []Take{
				{Key: "ip:10.0.0.1", Limit: ipLim, N: 1},
				{Key: fmt.Sprintf("ip:10.0.0.1/key:%d", k), Limit: keyLim, N: 1},
			}
			res := make([]Result, 2)
			for range each {
				admitted, err := s.TakeRequest(context.Background(), takes, at(0), res)
				if err != nil {
					t.Error(err)
					return
				}
				if admitted {
					counts[k].Add(1)
				}
			}
		}()
	}
	wg.Wait()
	out := make([]int64, apiKeys)
	for i := range counts {
		out[i] = counts[i].Load()
	}
	return out
}
