package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testutil/redisserver"
)

// explicitTime are the options of a store deciding at the caller's instants, under a fresh
// prefix.
func explicitTime(name string) Options {
	return Options{Prefix: freshPrefix(name), Timeout: testTimeout, ExplicitTime: true}
}

// topology is a Redis to run a TakeRequest test against: a single node, whose requests are one
// script, or a 3-master cluster, whose requests are reservations and refunds.
type topology struct {
	name   string
	client func(t *testing.T) redis.UniversalClient
}

var topologies = []topology{
	{"single", func(t *testing.T) redis.UniversalClient { return newClient(t, redisserver.StartTest(t).URL()) }},
	{"cluster", func(t *testing.T) redis.UniversalClient {
		a := redisserver.StartCluster(t, 3).Addrs()
		return newClient(t, "redis+cluster://"+a[0]+"?addr="+a[1]+"&addr="+a[2])
	}},
}

func mustTakeRequest(t testing.TB, s limiter.RequestStore, takes []limiter.Take, now time.Time) ([]limiter.Result, bool) {
	t.Helper()
	res := make([]limiter.Result, len(takes))
	admitted, err := s.TakeRequest(context.Background(), takes, now, res)
	if err != nil {
		t.Fatalf("TakeRequest(%+v, %d): %v", takes, now.UnixMilli(), err)
	}
	return res, admitted
}

// TestTakeRequestIssue21 is the issue's scenario: per-IP 5 an hour, per-API-key 2 an hour; key
// A's two denied requests do not spend the IP's quota, so key B from the same IP gets 2 of 3.
func TestTakeRequestIssue21(t *testing.T) {
	perIP := limiter.Limit{Algorithm: limiter.FixedWindow, Limit: 5, Window: time.Hour}
	perKey := limiter.Limit{Algorithm: limiter.FixedWindow, Limit: 2, Window: time.Hour}
	for _, top := range topologies {
		t.Run(top.name, func(t *testing.T) {
			s := newStore(t, top.client(t), explicitTime("issue21"))
			request := func(key string) bool {
				_, admitted := mustTakeRequest(t, s, []limiter.Take{
					{Key: "ip:198.18.0.1", Limit: perIP, N: 1},
					{Key: "key:" + key, Limit: perKey, N: 1},
				}, at(0))
				return admitted
			}
			var got []bool
			for _, key := range []string{"A", "A", "A", "A", "B", "B", "B"} {
				got = append(got, request(key))
			}
			if want := []bool{true, true, false, false, true, true, false}; !slices.Equal(got, want) {
				t.Fatalf("admitted %v, want %v", got, want)
			}
			if r := mustTake(t, s, "ip:198.18.0.1", perIP, 1, at(0)); !r.Allowed || r.Remaining != 0 {
				t.Fatalf("the IP's fifth request: %+v, want the last one admitted", r)
			}
		})
	}
}

// diffRule is one rule of a differential trace: a Limit and the key parts it sees.
type diffRule struct {
	lim   limiter.Limit
	parts []string
}

// TestDifferentialTakeRequest replays seeded random multi-rule requests (2 to 4 rules of mixed
// algorithms, costs up to and beyond capacity, shadow rules, a rule's take repeated) through
// Store.TakeRequest and limiter.MemoryStore.TakeRequest with explicit time: every decision must
// be identical, on a single node (one script; instants also go backwards) and on a 3-master
// cluster (reservations and refunds; instants never go backwards, see TakeRequest). Denials by
// the first, a middle and the last take must all occur.
func TestDifferentialTakeRequest(t *testing.T) {
	for ti, top := range topologies {
		t.Run(top.name, func(t *testing.T) {
			sets, steps := 30, 150
			if top.name == "cluster" {
				sets, steps = 12, 100
			}
			client := top.client(t)
			rng := rand.New(rand.NewPCG(20260521, uint64(ti)))
			variants := limiter.Variants(1, time.Second, 0, 0)
			deniedAt := map[string]int{}
			for set := range sets {
				rules := make([]diffRule, 2+rng.IntN(3))
				for i := range rules {
					rules[i] = diffRule{
						lim:   randomLimit(rng, pick(rng, variants...)),
						parts: []string{"a", "b", "c"}[:1+rng.IntN(3)],
					}
				}
				rs := newStore(t, client, explicitTime("diffreq"))
				ms := limiter.NewMemoryStore(limiter.MemoryStoreOptions{})
				now := t0 + rng.Int64N(1000)
				var trace []string
				for step := range steps {
					gap := randomGap(rng, pick(rng, rules...).lim)
					if top.name == "cluster" {
						gap = max(0, gap)
					}
					now = min(max(0, now+gap), limiter.MaxNowMs)
					var takes []limiter.Take
					for i, r := range rules {
						if rng.IntN(8) == 0 {
							continue
						}
						tk := limiter.Take{
							Key:    fmt.Sprintf("r%d:%s", i, pick(rng, r.parts...)),
							Limit:  r.lim,
							N:      randomCost(rng, r.lim.Capacity()),
							Shadow: rng.IntN(7) == 0,
						}
						takes = append(takes, tk)
						if rng.IntN(10) == 0 { // the same rule and key again
							tk.N = randomCost(rng, r.lim.Capacity())
							takes = append(takes, tk)
						}
					}
					want, wantOK := mustTakeRequest(t, ms, takes, time.UnixMilli(now))
					got, gotOK := mustTakeRequest(t, rs, takes, time.UnixMilli(now))
					trace = append(trace, fmt.Sprintf("  %3d now=%d %+v -> %v", step, now, takes, wantOK))
					if gotOK != wantOK || !slices.Equal(got, want) {
						t.Fatalf("set %d step %d (now %d):\nredis  %v %+v\nmemory %v %+v\ntrace (last 8):\n%s",
							set, step, now, gotOK, got, wantOK, want, strings.Join(trace[max(0, len(trace)-8):], "\n"))
					}
					for i, r := range want {
						if r.Allowed || takes[i].Shadow {
							continue
						}
						switch i {
						case 0:
							deniedAt["first"]++
						case len(takes) - 1:
							deniedAt["last"]++
						default:
							deniedAt["middle"]++
						}
					}
				}
			}
			t.Logf("enforced denials by position: %v", deniedAt)
			for _, pos := range []string{"first", "middle", "last"} {
				if deniedAt[pos] == 0 {
					t.Errorf("no request was denied by its %s take: the traces test too little", pos)
				}
			}
			checkTTLs(t, client)
		})
	}
}

// checkTTLs checks that every key on every master has a TTL.
func checkTTLs(t *testing.T, client redis.UniversalClient) {
	t.Helper()
	ctx := context.Background()
	each := func(ctx context.Context, m *redis.Client) error {
		keys, err := m.Keys(ctx, "*").Result()
		if err != nil {
			return err
		}
		for _, k := range keys {
			// In ms, not as a Duration: a bucket's TTL can exceed 292 years.
			if ttl, err := m.Do(ctx, "PTTL", k).Int64(); err != nil || ttl < 0 {
				return fmt.Errorf("key %s has PTTL %d (%w)", k, ttl, err)
			}
		}
		return nil
	}
	var err error
	switch c := client.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, each)
	case *redis.Client:
		err = each(ctx, c)
	}
	if err != nil {
		t.Error(err)
	}
}

// TestTakeRequestConcurrent: 64 goroutines send requests under two rules sharing the IP part of
// their keys (per IP, FixedWindow; per IP and API key, TokenBucket) at one instant. Each rule is
// charged for exactly the requests admitted, and never admits more than its limit. On a single
// node (one script per request) exactly the tighter total passes. On a cluster (reservations and
// refunds) a reservation later refunded can deny a concurrent request, so fewer may pass, but
// the stored states still match the admitted counts exactly.
func TestTakeRequestConcurrent(t *testing.T) {
	const goroutines, each, apiKeys = 64, 20, 8
	for _, top := range topologies {
		t.Run(top.name, func(t *testing.T) {
			client := top.client(t)
			for _, tc := range []struct {
				name          string
				perIP, perKey int64
			}{
				{"per-IP binds", 50, 10},
				{"per-key binds", 100, 10},
			} {
				t.Run(tc.name, func(t *testing.T) {
					ipLim := limiter.Limit{Algorithm: limiter.FixedWindow, Limit: tc.perIP, Window: time.Hour}
					keyLim := limiter.Limit{Algorithm: limiter.TokenBucket, Limit: tc.perKey, Window: time.Hour}
					s := newStore(t, client, explicitTime("concreq"))
					counts := make([]atomic.Int64, apiKeys)
					var wg sync.WaitGroup
					for g := range goroutines {
						wg.Go(func() {
							k := g % apiKeys
							takes := []limiter.Take{
								{Key: "ip:198.18.0.1", Limit: ipLim, N: 1},
								{Key: fmt.Sprintf("ip:198.18.0.1/key:%d", k), Limit: keyLim, N: 1},
							}
							res := make([]limiter.Result, 2)
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
						})
					}
					wg.Wait()
					// A request costlier than the capacity is denied, charges nothing and
					// reports what is left.
					probe := func(key string, lim limiter.Limit) int64 {
						return mustTake(t, s, key, lim, lim.Capacity()+1, at(0)).Remaining
					}
					total := int64(0)
					for k := range counts {
						n := counts[k].Load()
						total += n
						if n > tc.perKey {
							t.Errorf("API key %d: %d admitted, limit %d", k, n, tc.perKey)
						}
						if left := probe(fmt.Sprintf("ip:198.18.0.1/key:%d", k), keyLim); left != tc.perKey-n {
							t.Errorf("API key %d: %d left after %d admitted, want %d", k, left, n, tc.perKey-n)
						}
					}
					if left := probe("ip:198.18.0.1", ipLim); left != tc.perIP-total {
						t.Errorf("per-IP rule: %d left after %d admitted, want %d", left, total, tc.perIP-total)
					}
					ideal := min(tc.perIP, apiKeys*tc.perKey)
					t.Logf("%d admitted of %d requests (the limits allow %d)", total, goroutines*each, ideal)
					if total > ideal || (top.name == "single" && total != ideal) {
						t.Errorf("%d admitted, want exactly %d", total, ideal)
					}
					if n := s.RefundFailures(); n != 0 {
						t.Errorf("%d refunds failed", n)
					}
				})
			}
		})
	}
}

// TestRefund drives reservations and refunds one by one, with other requests between them,
// against a MemoryStore that never saw the reservation: after the refund both must decide
// alike, where the refund cannot be exact it must err towards denial, and a bucket must never
// get back what it would have lost to its capacity (or a leaky level below 0) without the
// charge.
func TestRefund(t *testing.T) {
	srv := redisserver.StartTest(t)
	client := newClient(t, srv.URL())
	ctx := context.Background()
	type op struct {
		kind string // "both": a Take on both stores; "reserve", "refund": on Redis only; "probe": compare
		at   int64
		n    int64
		back int64 // refund: the units (scaled for the buckets) it must give back
	}
	for _, tc := range []struct {
		name string
		lim  limiter.Limit
		ops  []op
	}{
		{"TokenBucket exact", limiter.Limit{Algorithm: limiter.TokenBucket, Limit: 10, Window: 10 * time.Second},
			[]op{{"both", 0, 2, 0}, {"reserve", 0, 5, 0}, {"both", 1000, 1, 0}, {"refund", 1000, 5, 50_000}, {"probe", 1000, 0, 0}}},
		{"TokenBucket refunded later", limiter.Limit{Algorithm: limiter.TokenBucket, Limit: 10, Window: 10 * time.Second},
			// No request refilled the state in between: all of it comes back, and the refill
			// since is computed from the refunded state, capped as without the charge.
			[]op{{"reserve", 0, 5, 0}, {"refund", 4000, 5, 50_000}, {"probe", 4000, 0, 0}}},
		{"TokenBucket full meanwhile", limiter.Limit{Algorithm: limiter.TokenBucket, Limit: 10, Window: 10 * time.Second},
			// Without the charge the bucket (8 after the first request) is full after 2 s and
			// loses 2 tokens of refill by 4 s: only 3 of the 5 come back.
			[]op{{"both", 0, 2, 0}, {"reserve", 0, 5, 0}, {"both", 4000, 2, 0}, {"refund", 4000, 5, 30_000}, {"probe", 4000, 0, 0}, {"both", 4000, 8, 0}, {"probe", 4000, 0, 0}}},
		{"LeakyBucket empty meanwhile", limiter.Limit{Algorithm: limiter.LeakyBucket, Limit: 10, Window: 10 * time.Second, Mode: limiter.Meter},
			[]op{{"both", 0, 2, 0}, {"reserve", 0, 5, 0}, {"both", 4000, 2, 0}, {"refund", 4000, 5, 30_000}, {"probe", 4000, 0, 0}, {"both", 4000, 8, 0}, {"probe", 4000, 0, 0}}},
		{"LeakyBucket Queue exact", limiter.Limit{Algorithm: limiter.LeakyBucket, Limit: 10, Window: 10 * time.Second, Mode: limiter.Queue, MaxDelay: 10 * time.Second},
			[]op{{"both", 0, 2, 0}, {"reserve", 500, 3, 0}, {"both", 800, 1, 0}, {"refund", 800, 3, 30_000}, {"probe", 800, 0, 0}}},
		{"SlidingWindowLog middle entry", limiter.Limit{Algorithm: limiter.SlidingWindowLog, Limit: 5, Window: 10 * time.Second},
			[]op{{"both", 0, 1, 0}, {"reserve", 1000, 2, 0}, {"both", 2000, 1, 0}, {"refund", 2000, 2, 2}, {"probe", 2000, 0, 0}, {"both", 10_001, 4, 0}, {"probe", 10_001, 0, 0}}},
		{"SlidingWindowLog merged entry", limiter.Limit{Algorithm: limiter.SlidingWindowLog, Limit: 5, Window: 10 * time.Second},
			[]op{{"both", 0, 1, 0}, {"both", 3000, 1, 0}, {"reserve", 3000, 2, 0}, {"refund", 3000, 2, 2}, {"probe", 3000, 0, 0}, {"both", 10_001, 4, 0}, {"probe", 10_001, 0, 0}}},
		{"SlidingWindowLog expired", limiter.Limit{Algorithm: limiter.SlidingWindowLog, Limit: 5, Window: time.Second},
			[]op{{"reserve", 0, 2, 0}, {"both", 1000, 1, 0}, {"refund", 1000, 2, 0}, {"probe", 1000, 0, 0}}},
		{"FixedWindow rolled", limiter.Limit{Algorithm: limiter.FixedWindow, Limit: 3, Window: time.Second},
			[]op{{"reserve", 500, 2, 0}, {"both", 1200, 1, 0}, {"refund", 1200, 2, 0}, {"probe", 1200, 0, 0}}},
		{"FixedWindow same window", limiter.Limit{Algorithm: limiter.FixedWindow, Limit: 3, Window: time.Second},
			[]op{{"both", 100, 1, 0}, {"reserve", 500, 2, 0}, {"refund", 900, 2, 2}, {"both", 900, 2, 0}, {"probe", 900, 0, 0}}},
		{"SlidingWindowCounter rolled once", limiter.Limit{Algorithm: limiter.SlidingWindowCounter, Limit: 10, Window: time.Second},
			[]op{{"reserve", 500, 3, 0}, {"both", 1200, 1, 0}, {"refund", 1200, 3, 3}, {"probe", 1200, 0, 0}, {"probe", 1700, 0, 0}}},
		{"SlidingWindowCounter rolled twice", limiter.Limit{Algorithm: limiter.SlidingWindowCounter, Limit: 10, Window: time.Second},
			[]op{{"reserve", 500, 3, 0}, {"both", 2200, 1, 0}, {"refund", 2200, 3, 0}, {"probe", 2200, 0, 0}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := newStore(t, client, explicitTime("refund"))
			ms := limiter.NewMemoryStore(limiter.MemoryStoreOptions{})
			const key = "k"
			rk := rs.Keys(key, tc.lim)
			var resAt, resContent int64
			for i, o := range tc.ops {
				now := at(o.at)
				switch o.kind {
				case "both":
					want, got := mustTake(t, ms, key, tc.lim, o.n, now), mustTake(t, rs, key, tc.lim, o.n, now)
					if !want.Allowed || !got.Allowed {
						t.Fatalf("op %d: memory %+v, redis %+v: both should admit", i, want, got)
					}
				case "reserve":
					take := limiter.Take{Key: key, Limit: tc.lim, N: o.n}
					st := takeOf(0, &take, now)
					st.flags |= flagEnd | flagState
					res := make([]limiter.Result, 1)
					var err error
					resAt, resContent, err = rs.runRequest(ctx, strconv.FormatInt(now.UnixMilli(), 10), rk, []scriptTake{st}, []limiter.Take{take}, res)
					if err != nil || !res[0].Allowed {
						t.Fatalf("op %d: reservation %+v, %v", i, res[0], err)
					}
				case "refund":
					back, err := refundScript.Run(ctx, client, rk, ExplicitTimeMinTTL.Milliseconds(), algCode(&tc.lim),
						tc.lim.Limit, tc.lim.WindowMs(), tc.lim.Capacity(), o.n, resAt, resContent).Int64()
					if err != nil || back != o.back {
						t.Fatalf("op %d: refund gave back %d (%v), want %d", i, back, err, o.back)
					}
				case "probe": // costlier than capacity: charges nothing, reports the state
					c := tc.lim.Capacity() + 1
					want, got := mustTake(t, ms, key, tc.lim, c, now), mustTake(t, rs, key, tc.lim, c, now)
					if got != want {
						t.Fatalf("op %d at %d: redis %+v, memory %+v", i, o.at, got, want)
					}
				}
			}
		})
	}
}

// TestTakeRequestManyKeysAndLimits: requests of more keys and distinct limits than the
// request script's packed takes can name (lua/request.lua), admitted and denied, decide as
// limiter.MemoryStore does.
func TestTakeRequestManyKeysAndLimits(t *testing.T) {
	client := newClient(t, redisserver.StartTest(t).URL())
	rs := newStore(t, client, explicitTime("many"))
	ms := limiter.NewMemoryStore(limiter.MemoryStoreOptions{})
	const n = packedIndices + 88
	for step, deny := range []bool{false, false, true, false} {
		takes := make([]limiter.Take, n)
		for i := range takes {
			// A limit of its own per take, each of the later ones on a key of its own.
			lim := limiter.Limit{Algorithm: limiter.FixedWindow, Limit: 10 + int64(i), Window: time.Minute}
			takes[i] = limiter.Take{Key: "k" + strconv.Itoa(i%(n-40)), Limit: lim, N: 1}
		}
		if deny {
			takes[n-1].N = takes[n-1].Limit.Limit // denied after the earlier steps: nothing is charged
		}
		want, wantOK := mustTakeRequest(t, ms, takes, at(int64(step)))
		got, gotOK := mustTakeRequest(t, rs, takes, at(int64(step)))
		if gotOK != wantOK || !slices.Equal(got, want) {
			t.Fatalf("step %d: redis %v %+v\nmemory %v %+v", step, gotOK, got, wantOK, want)
		}
		if wantOK == deny {
			t.Fatalf("step %d: admitted %v", step, wantOK)
		}
	}
}

// TestTakeRequestServerTime: with Redis's clock an admitted request writes each key with a TTL
// of its ResetAfter, and a denied one leaves no key behind: on a single node it writes nothing,
// on a cluster its reservation is refunded to a fresh state, which is deleted.
func TestTakeRequestServerTime(t *testing.T) {
	one := limiter.Limit{Algorithm: limiter.FixedWindow, Limit: 1, Window: time.Hour}
	tb := limiter.Limit{Algorithm: limiter.TokenBucket, Limit: 2, Window: time.Hour}
	log := limiter.Limit{Algorithm: limiter.SlidingWindowLog, Limit: 2, Window: time.Hour}
	for _, top := range topologies {
		t.Run(top.name, func(t *testing.T) {
			client := top.client(t)
			s := newStore(t, client, Options{Prefix: freshPrefix("reqst"), Timeout: testTimeout})
			ctx := context.Background()
			if _, ok := mustTakeRequest(t, s, []limiter.Take{{Key: "a", Limit: one, N: 1}, {Key: "b", Limit: tb, N: 1}}, time.Time{}); !ok {
				t.Fatal("the first request is denied")
			}
			for _, k := range [][]string{s.Keys("a", one), s.Keys("b", tb)} {
				ttl, err := client.Do(ctx, "PTTL", k[0]).Int64()
				if err != nil || ttl <= 0 || ttl > time.Hour.Milliseconds() {
					t.Errorf("key %s: PTTL %d (%v), want within the hour", k[0], ttl, err)
				}
			}
			denied := []limiter.Take{{Key: "c", Limit: tb, N: 1}, {Key: "d", Limit: log, N: 2}, {Key: "a", Limit: one, N: 1}}
			if res, ok := mustTakeRequest(t, s, denied, time.Time{}); ok || !res[0].Allowed || !res[1].Allowed || res[2].Allowed {
				t.Fatalf("denied request: %v %+v, want c and d allowed and a denied", ok, res)
			}
			for _, k := range [][]string{s.Keys("c", tb), s.Keys("d", log)} {
				if n, err := client.Exists(ctx, k[0]).Result(); err != nil || n != 0 {
					t.Errorf("key %s of a denied request exists (%d, %v)", k[0], n, err)
				}
			}
		})
	}
}

// TestTakeRequestClusterFailure: when one master hangs, a cluster request fails with an error
// matching ErrUnavailable (the caller falls back), and the charge the healthy master made for
// it is given back.
func TestTakeRequestClusterFailure(t *testing.T) {
	c := redisserver.StartCluster(t, 3)
	a := c.Addrs()
	client := newClient(t, "redis+cluster://"+a[0]+"?addr="+a[1]+"&addr="+a[2])
	opts := explicitTime("reqfail")
	opts.Timeout = 300 * time.Millisecond
	s := newStore(t, client, opts)
	lim := limiter.Limit{Algorithm: limiter.TokenBucket, Limit: 3, Window: time.Hour}
	cc := client.(*redis.ClusterClient)
	ctx := context.Background()
	master := func(key string) string {
		m, err := cc.MasterForKey(ctx, s.Keys(key, lim)[0])
		if err != nil {
			t.Fatal(err)
		}
		return m.Options().Addr
	}
	healthy, hung := "k0", ""
	for i := 1; hung == "" && i < 100; i++ {
		if k := fmt.Sprint("k", i); master(k) != master(healthy) {
			hung = k
		}
	}
	if hung == "" {
		t.Fatal("100 keys on one master")
	}
	// Warm the client's connections to both masters, so the pause hits a call, not a dial.
	mustTakeRequest(t, s, []limiter.Take{{Key: "warm-" + healthy, Limit: lim, N: 1}}, at(0))
	mustTake(t, s, healthy+"-x", lim, 1, at(0))
	mustTake(t, s, hung+"-x", lim, 1, at(0))
	var srv *redisserver.TestServer
	for _, sv := range c.Servers {
		if sv.Addr() == master(hung) {
			srv = sv
		}
	}
	srv.Pause()
	res := make([]limiter.Result, 2)
	_, err := s.TakeRequest(ctx, []limiter.Take{{Key: healthy, Limit: lim, N: 2}, {Key: hung, Limit: lim, N: 1}}, at(0), res)
	srv.Resume()
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("TakeRequest with a hung master: %v, want ErrUnavailable", err)
	}
	if r := mustTake(t, s, healthy, lim, 4, at(0)); r.Remaining != 3 || s.RefundFailures() != 0 {
		t.Fatalf("the healthy master's key after the failed request: %+v (refund failures %d), want its 3 tokens back", r, s.RefundFailures())
	}
}
