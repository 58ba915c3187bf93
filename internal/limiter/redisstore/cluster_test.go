package redisstore

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testutil/proc"
	"github.com/sluice-dev/sluice/internal/testutil/redisserver"
)

// TestCluster runs the store against three masters: the keys of each limiter hash to one slot,
// limiters spread over the masters, and decisions equal limiter.MemoryStore's.
func TestCluster(t *testing.T) {
	c := redisserver.StartCluster(t, 3)
	addrs := c.Addrs()
	client := newClient(t, "redis+cluster://"+addrs[0]+"?addr="+addrs[1]+"&addr="+addrs[2])
	rs := newStore(t, client, Options{Prefix: freshPrefix("cluster"), Timeout: testTimeout, ExplicitTime: true})
	ms := limiter.NewMemoryStore(limiter.MemoryStoreOptions{})
	if rs.batch != nil {
		t.Fatal("a cluster client's Store has one batcher for every master; a hung master would hold back every node's decisions")
	}

	keys := []string{"user:1", "user:2", "10.0.0.1", "{tag}", "a}b{c", "tenant/x", "y", "z"}
	for _, lim := range limiter.Variants(3, time.Second, 0, time.Second) {
		for _, key := range keys {
			rk := rs.Keys(key, lim)
			slot, err := client.ClusterKeySlot(context.Background(), rk[0]).Result()
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range rk[1:] {
				if s, _ := client.ClusterKeySlot(context.Background(), k).Result(); s != slot {
					t.Fatalf("%s: key %s in slot %d, %s in slot %d", lim.Name(), rk[0], slot, k, s)
				}
			}
			for step := range 6 {
				now := at(int64(step) * 150)
				want := mustTake(t, ms, key+string(lim.Algorithm)+string(lim.Mode), lim, 1, now)
				got := mustTake(t, rs, key, lim, 1, now)
				if got != want {
					t.Fatalf("%s key %q step %d: redis %+v, memory %+v", lim.Name(), key, step, got, want)
				}
			}
		}
	}
	rs.mu.Lock()
	batchers := len(rs.nodes)
	rs.mu.Unlock()
	if batchers < 2 {
		t.Errorf("%d batchers for limiters on several masters, want one per master", batchers)
	}
	used := 0
	for _, s := range c.Servers {
		n, err := s.Do("DBSIZE")
		if err != nil {
			t.Fatal(err)
		}
		if n != "0" {
			used++
		}
	}
	if used < 2 {
		t.Errorf("limiters landed on %d of 3 masters; with %d keys they should spread", used, len(keys))
	}
	// Every key the store wrote has a TTL.
	for _, s := range c.Servers {
		out, err := s.Do("KEYS", "*")
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range strings.Fields(out) {
			if ttl, _ := s.Do("PTTL", k); strings.HasPrefix(ttl, "-") {
				t.Errorf("key %s on %s has PTTL %s", k, s.Addr(), ttl)
			}
		}
	}
}

// clusterStore is a Store on a 3-master cluster with one replica each, and the cluster.
func clusterStore(t *testing.T, opts Options) (*Store, *redisserver.Cluster, *redis.ClusterClient) {
	t.Helper()
	c := redisserver.StartCluster(t, 3, redisserver.WithReplicas(1))
	a := c.Addrs()
	client := newClient(t, "redis+cluster://"+a[0]+"?addr="+a[1]+"&addr="+a[2])
	return newStore(t, client, opts), c, client.(*redis.ClusterClient)
}

// keysPerMaster finds one limiter key on each master (by index in c.Servers) under lim.
func keysPerMaster(t *testing.T, s *Store, c *redisserver.Cluster, client *redis.ClusterClient, lim limiter.Limit, name string) []string {
	t.Helper()
	keys := make([]string, len(c.Servers))
	found := 0
	for i := 0; found < len(keys); i++ {
		k := name + strconv.Itoa(i)
		node, err := client.MasterForKey(context.Background(), s.Keys(k, lim)[0])
		if err != nil {
			t.Fatal(err)
		}
		for j, srv := range c.Servers {
			if srv.Addr() == node.Options().Addr && keys[j] == "" {
				keys[j] = k
				found++
			}
		}
	}
	return keys
}

// TestClusterCoalescesPerMaster: concurrent callers on one hot key per master admit exactly
// the limit, their calls coalesce, and after SCRIPT FLUSH on one master its batches recover
// from NOSCRIPT without counting a request twice.
func TestClusterCoalescesPerMaster(t *testing.T) {
	const goroutines, each = 48, 10
	s, c, client := clusterStore(t, explicitTime("ccoal"))
	lim := limiter.Limit{Algorithm: limiter.FixedWindow, Limit: 300, Window: time.Minute}
	run := func(name string) {
		keys := keysPerMaster(t, s, c, client, lim, name)
		results := make([][]limiter.Result, len(keys))
		var wg sync.WaitGroup
		for i, k := range keys {
			wg.Go(func() {
				results[i] = takeConcurrently(t, s, k, lim, goroutines, each, func() time.Time { return at(0) })
			})
		}
		wg.Wait()
		for i := range keys {
			checkExactlyCapacity(t, lim, results[i])
		}
	}
	run("hot")
	s.mu.Lock()
	var largest, reloads int64
	for _, b := range s.nodes {
		largest = max(largest, b.coalesced.Load())
		reloads += b.reloads.Load()
	}
	s.mu.Unlock()
	t.Logf("at most %d calls coalesced into one script call", largest)
	if largest < 2 {
		t.Errorf("no script call carried more than one call")
	}

	// The first few calls in flight make their own round trips, which recover from NOSCRIPT
	// by themselves (EVAL); this is about batches, so the flushed master's batcher pretends
	// they are always in flight.
	s.mu.Lock()
	flushed := s.nodes[c.Servers[1].Addr()]
	s.mu.Unlock()
	if flushed == nil {
		t.Fatalf("no batcher for master %s", c.Servers[1].Addr())
	}
	flushed.active.Add(directMax)
	defer flushed.active.Add(-directMax)
	before := flushed.reloads.Load()
	if _, err := c.Servers[1].Do("SCRIPT", "FLUSH"); err != nil {
		t.Fatal(err)
	}
	run("after-flush")
	if got := flushed.reloads.Load() - before; got < 1 {
		t.Errorf("no batch on the flushed master hit NOSCRIPT (%d recoveries)", got)
	}
	t.Logf("NOSCRIPT recoveries: %d on all masters before the flush, %d on the flushed one after", reloads, flushed.reloads.Load()-before)
}

// TestClusterHungMasterDelaysOnlyItsKeys: with one master paused, the keys of the others are
// decided as usual, while the paused master's fail as timeouts. The budget is what every
// caller of the paused master waits; it is long enough that a loaded machine does not time out
// a healthy master's calls too (which is the failure this test is about).
func TestClusterHungMasterDelaysOnlyItsKeys(t *testing.T) {
	const budget = 5 * time.Second
	s, c, client := clusterStore(t, Options{Prefix: freshPrefix("hung"), Timeout: budget})
	lim := limiter.Limit{Algorithm: limiter.FixedWindow, Limit: 1_000_000, Window: time.Hour}
	keys := keysPerMaster(t, s, c, client, lim, "k")
	for _, k := range keys {
		mustTake(t, s, k, lim, 1, time.Time{})
	}
	c.Servers[0].Pause()
	t.Cleanup(c.Servers[0].Resume)

	const callers = 40
	errs := make([][]error, len(keys))
	elapsed := make([][]time.Duration, len(keys))
	var wg sync.WaitGroup
	for i, k := range keys {
		errs[i], elapsed[i] = make([]error, callers), make([]time.Duration, callers)
		for j := range callers {
			wg.Go(func() {
				start := time.Now()
				_, errs[i][j] = s.Take(context.Background(), k, lim, 1, time.Time{})
				elapsed[i][j] = time.Since(start)
			})
		}
	}
	wg.Wait()
	for j := range callers {
		if err := errs[0][j]; !errors.Is(err, ErrTimeout) {
			t.Fatalf("caller %d on the paused master: %v, want a timeout", j, err)
		}
		for i := 1; i < len(keys); i++ {
			if errs[i][j] != nil {
				t.Fatalf("caller %d on healthy master %s: %v after %s", j, c.Servers[i].Addr(), errs[i][j], elapsed[i][j])
			}
		}
	}
	t.Logf("paused master's callers failed after at most %s; healthy masters' answered within %s",
		slices.Max(elapsed[0]), max(slices.Max(elapsed[1]), slices.Max(elapsed[2])))
}

// TestClusterSlotMigration moves a limiter's slot from one master to another, through the
// MIGRATING/IMPORTING phase (ASK) to the end (MOVED), while the Store keeps deciding on a
// client with the old slot map: decisions equal limiter.MemoryStore's throughout.
func TestClusterSlotMigration(t *testing.T) {
	s, c, client := clusterStore(t, explicitTime("migrate"))
	ms := limiter.NewMemoryStore(limiter.MemoryStoreOptions{})
	lim := limiter.Limit{Algorithm: limiter.TokenBucket, Limit: 20, Window: time.Minute}
	key := keysPerMaster(t, s, c, client, lim, "m")[0]
	rk := s.Keys(key, lim)[0]
	src, dst := c.Servers[0], c.Servers[1]
	do := func(srv *redisserver.TestServer, args ...string) string {
		t.Helper()
		out, err := srv.Do(args...)
		if err != nil {
			t.Fatalf("%s on %s: %v", strings.Join(args, " "), srv.Addr(), err)
		}
		return out
	}
	slot := do(src, "CLUSTER", "KEYSLOT", rk)
	srcID, dstID := do(src, "CLUSTER", "MYID"), do(dst, "CLUSTER", "MYID")
	step := 0
	check := func(phase string, n int) {
		t.Helper()
		for range n {
			now := at(int64(step) * 500)
			step++
			want, got := mustTake(t, ms, key, lim, 3, now), mustTake(t, s, key, lim, 3, now)
			if got != want {
				t.Fatalf("%s, step %d: redis %+v, memory %+v", phase, step, got, want)
			}
		}
	}
	check("before", 5)
	// Through pipelines, not the direct calls of the first few in flight: the source's
	// batcher, which the client's old slot map keeps choosing, pretends they are in flight.
	s.mu.Lock()
	for _, b := range s.nodes {
		b.active.Add(directMax)
		defer b.active.Add(-directMax)
	}
	s.mu.Unlock()
	do(dst, "CLUSTER", "SETSLOT", slot, "IMPORTING", srcID)
	do(src, "CLUSTER", "SETSLOT", slot, "MIGRATING", dstID)
	check("migrating, key on the source", 3)
	do(src, "MIGRATE", "127.0.0.1", strconv.Itoa(dst.Port()), "", "0", "5000", "KEYS", rk)
	check("migrating, key on the target (ASK)", 3)
	for _, srv := range c.Servers {
		do(srv, "CLUSTER", "SETSLOT", slot, "NODE", dstID)
	}
	check("migrated (MOVED)", 5)
	if out, _ := dst.Do("EXISTS", rk); out != "1" {
		t.Fatalf("the key is not on the target master after the migration (EXISTS %q)", out)
	}
	// The source refused the batches once the key had left (ASK, then MOVED), and they were
	// decided again per slot.
	s.mu.Lock()
	redirected := s.nodes[src.Addr()].redirected.Load()
	s.mu.Unlock()
	if redirected < 1 {
		t.Errorf("no batch on the source master was decided again per slot")
	}
}

// onMaster finds keys served by one master: key(name, lim) is name, or name with a suffix,
// such that its Redis key under lim is served by master, in a slot of its own among the keys
// found so far (the same name and Limit give the same key).
type onMaster struct {
	t      *testing.T
	s      *Store
	client *redis.ClusterClient
	master string
	keys   map[string]string // by name and Limit
	slots  map[int64]bool
}

func newOnMaster(t *testing.T, s *Store, client *redis.ClusterClient, master string) *onMaster {
	return &onMaster{t: t, s: s, client: client, master: master, keys: map[string]string{}, slots: map[int64]bool{}}
}

func (o *onMaster) key(name string, lim limiter.Limit) string {
	o.t.Helper()
	id := name + "\x00" + lim.Name()
	if k, ok := o.keys[id]; ok {
		return k
	}
	ctx := context.Background()
	for i := 0; ; i++ {
		k := name + "~" + strconv.Itoa(i)
		rk := o.s.Keys(k, lim)[0]
		node, err := o.client.MasterForKey(ctx, rk)
		if err != nil {
			o.t.Fatal(err)
		}
		if node.Options().Addr != o.master {
			continue
		}
		slot, err := o.client.ClusterKeySlot(ctx, rk).Result()
		if err != nil {
			o.t.Fatal(err)
		}
		if o.slots[slot] {
			continue
		}
		o.slots[slot] = true
		o.keys[id] = k
		return k
	}
}

// TestClusterBatchAcrossSlotsIsOneScriptCall: a cluster batcher's batch of 1 to 64 calls on keys
// of several slots of its master (a hot key and others, every algorithm, costs up to and beyond
// capacity) is one script call on that master, counted by its INFO commandstats, as on a single
// node, and decides what limiter.MemoryStore decides.
func TestClusterBatchAcrossSlotsIsOneScriptCall(t *testing.T) {
	s, c, client := clusterStore(t, explicitTime("xslot"))
	master := c.Servers[0]
	for vi, base := range limiter.Variants(10, time.Second, 15, 500*time.Millisecond) {
		t.Run(base.Name(), func(t *testing.T) {
			keys := newOnMaster(t, s, client, master.Addr())
			checkCoalescedBatches(t, batchTarget{
				store: s,
				batcher: func(rk string) *batcher {
					b, err := s.batcherFor(context.Background(), rk)
					if err != nil {
						t.Fatal(err)
					}
					return b
				},
				key:         keys.key,
				scriptCalls: func() int64 { return scriptCalls(t, master) },
			}, base, uint64(vi))
			if len(keys.slots) < 4 {
				t.Fatalf("the batches' keys were in %d slots, want 4 (hot, k0, k1, k2)", len(keys.slots))
			}
		})
	}
}

// TestClusterRefusedBatchIsDecidedPerSlot: a batch whose script call the master refuses,
// because one key's slot has moved to another master behind the client's back (its state
// migrated, or an empty slot reassigned), is decided again per slot: every call exactly once,
// the local keys' calls decided before the moved key's too (a script that wrote them before
// reading the moved key would count them twice), equal to limiter.MemoryStore's decisions.
func TestClusterRefusedBatchIsDecidedPerSlot(t *testing.T) {
	s, c, client := clusterStore(t, explicitTime("refused"))
	ctx := context.Background()
	ms := limiter.NewMemoryStore(limiter.MemoryStoreOptions{})
	lim := limiter.Limit{Algorithm: limiter.TokenBucket, Limit: 10, Window: time.Minute}
	src := c.Servers[0]
	keys := newOnMaster(t, s, client, src.Addr())
	local, moved, empty := keys.key("local", lim), keys.key("moved", lim), keys.key("empty", lim)
	b, err := s.batcherFor(ctx, s.Keys(local, lim)[0])
	if err != nil {
		t.Fatal(err)
	}
	b.loadScripts()
	do := func(srv *redisserver.TestServer, args ...string) string {
		t.Helper()
		out, err := srv.Do(args...)
		if err != nil {
			t.Fatalf("%s on %s: %v", strings.Join(args, " "), srv.Addr(), err)
		}
		return out
	}
	// moveSlot gives key's slot to dst on every node, migrating the key first if it has state.
	moveSlot := func(key string, dst *redisserver.TestServer) {
		rk := s.Keys(key, lim)[0]
		slot := do(src, "CLUSTER", "KEYSLOT", rk)
		srcID, dstID := do(src, "CLUSTER", "MYID"), do(dst, "CLUSTER", "MYID")
		state := do(src, "EXISTS", rk) == "1"
		do(dst, "CLUSTER", "SETSLOT", slot, "IMPORTING", srcID)
		do(src, "CLUSTER", "SETSLOT", slot, "MIGRATING", dstID)
		if state {
			do(src, "MIGRATE", "127.0.0.1", strconv.Itoa(dst.Port()), "", "0", "5000", "KEYS", rk)
		}
		for _, srv := range c.Servers {
			do(srv, "CLUSTER", "SETSLOT", slot, "NODE", dstID)
		}
	}
	type step struct {
		key string
		n   int64
	}
	now := int64(0)
	batch := func(phase string, steps ...step) {
		t.Helper()
		now += 700
		nowArg := strconv.FormatInt(t0+now, 10)
		qs := make([]queued, len(steps))
		calls := make([]*call, len(steps))
		for i, st := range steps {
			qs[i] = queueTake(ctx, s, nowArg, limiter.Take{Key: st.key, Limit: lim, N: st.n})
			calls[i] = qs[i].c
		}
		b.send(calls)
		for i, q := range qs {
			<-q.c.done
			if q.c.err != nil {
				t.Fatalf("%s, call %d: %v", phase, i, q.c.err)
			}
			want := mustTake(t, ms, steps[i].key, lim, steps[i].n, at(now))
			if got := resultFrom(q.c.vals, lim.Capacity()); got != want {
				t.Fatalf("%s, call %d (%+v): redis %+v, memory %+v", phase, i, steps[i], got, want)
			}
		}
	}
	batch("before", step{local, 3}, step{moved, 4}, step{local, 2})
	if got := b.redirected.Load(); got != 0 {
		t.Fatalf("%d batches redirected before any slot moved", got)
	}

	moveSlot(moved, c.Servers[1])
	batch("a key's slot and state moved", step{local, 3}, step{local, 2}, step{moved, 4}, step{local, 1}, step{moved, 9})
	if got := b.redirected.Load(); got != 1 {
		t.Fatalf("%d batches redirected after a slot moved, want 1", got)
	}
	if do(c.Servers[1], "EXISTS", s.Keys(moved, lim)[0]) != "1" {
		t.Fatal("the moved key's state is not on its new master")
	}

	moveSlot(empty, c.Servers[2])
	batch("an empty slot moved", step{local, 1}, step{empty, 6}, step{local, 1})
	if got := b.redirected.Load(); got != 2 {
		t.Fatalf("%d batches redirected after an empty slot moved, want 2", got)
	}
	if do(c.Servers[2], "EXISTS", s.Keys(empty, lim)[0]) != "1" {
		t.Fatal("the key of the moved empty slot is not on its new master")
	}
	if do(src, "CLUSTER", "COUNTKEYSINSLOT", do(src, "CLUSTER", "KEYSLOT", s.Keys(empty, lim)[0])) != "0" {
		t.Fatal("the key of the moved empty slot was written on its old master")
	}

	// The slot map follows; the moved keys are then batched by their new masters.
	deadline := time.Now().Add(proc.Patience)
	for s.Master(ctx, moved, lim) != c.Servers[1].Addr() || s.Master(ctx, empty, lim) != c.Servers[2].Addr() {
		if time.Now().After(deadline) {
			t.Fatal("the client's slot map never showed the moved slots")
		}
		client.ReloadState(ctx)
		time.Sleep(10 * time.Millisecond)
	}
	for _, k := range []string{moved, empty, local} {
		now += 300
		want := mustTake(t, ms, k, lim, 1, at(now))
		if got := mustTake(t, s, k, lim, 1, at(now)); got != want {
			t.Fatalf("after the reload, key %s: redis %+v, memory %+v", k, got, want)
		}
	}
	if got := b.redirected.Load(); got != 2 {
		t.Fatalf("%d batches redirected after the slot map reload, want still 2", got)
	}
}

// TestClusterSlotMigrationUnderLoad moves a hot limiter's slot, state and all, to another
// master while concurrent callers keep deciding it and other keys of its master: every call
// is decided, and each key admits exactly its limit.
func TestClusterSlotMigrationUnderLoad(t *testing.T) {
	const callers = 16
	s, c, client := clusterStore(t, explicitTime("migload"))
	lim := limiter.Limit{Algorithm: limiter.FixedWindow, Limit: 300, Window: time.Minute}
	src, dst := c.Servers[0], c.Servers[1]
	keys := newOnMaster(t, s, client, src.Addr())
	hot := []string{keys.key("moving", lim), keys.key("staying", lim), keys.key("staying2", lim)}
	rk := s.Keys(hot[0], lim)[0]
	do := func(srv *redisserver.TestServer, args ...string) string {
		out, err := srv.Do(args...)
		if err != nil {
			t.Errorf("%s on %s: %v", strings.Join(args, " "), srv.Addr(), err)
		}
		return out
	}
	var decided atomic.Int64
	migrated := make(chan struct{})
	go func() {
		defer close(migrated)
		for decided.Load() < 100 {
			time.Sleep(time.Millisecond)
		}
		slot := do(src, "CLUSTER", "KEYSLOT", rk)
		srcID, dstID := do(src, "CLUSTER", "MYID"), do(dst, "CLUSTER", "MYID")
		do(dst, "CLUSTER", "SETSLOT", slot, "IMPORTING", srcID)
		do(src, "CLUSTER", "SETSLOT", slot, "MIGRATING", dstID)
		time.Sleep(20 * time.Millisecond) // decisions on the source while migrating
		do(src, "MIGRATE", "127.0.0.1", strconv.Itoa(dst.Port()), "", "0", "5000", "KEYS", rk)
		time.Sleep(20 * time.Millisecond) // ASK
		for _, srv := range c.Servers {
			do(srv, "CLUSTER", "SETSLOT", slot, "NODE", dstID)
		}
		time.Sleep(20 * time.Millisecond) // MOVED
	}()
	admitted := make([]atomic.Int64, len(hot))
	var wg sync.WaitGroup
	for i, k := range hot {
		for range callers {
			wg.Go(func() {
				for n := 0; ; n++ {
					select {
					case <-migrated:
						if n >= 40 {
							return
						}
					default:
					}
					r, err := s.Take(context.Background(), k, lim, 1, at(0))
					if err != nil {
						t.Errorf("key %s: %v", k, err)
						return
					}
					decided.Add(1)
					if r.Allowed {
						admitted[i].Add(1)
					}
				}
			})
		}
	}
	wg.Wait()
	for i, k := range hot {
		if got := admitted[i].Load(); got != lim.Limit {
			t.Errorf("key %s: %d admitted, want exactly %d", k, got, lim.Limit)
		}
	}
	if out, _ := dst.Do("EXISTS", rk); out != "1" {
		t.Errorf("the moving key is not on the target master (EXISTS %q)", out)
	}
	var redirected int64
	s.mu.Lock()
	for _, b := range s.nodes {
		redirected += b.redirected.Load()
	}
	s.mu.Unlock()
	t.Logf("%d decisions, %d batches decided again per slot", decided.Load(), redirected)
}

// TestClusterMasterWithoutScriptFlags: a master that cannot compile the cross-slot script
// (Redis before 7 reads its shebang as Lua; here a flag Redis 7 does not know) has its batches
// decided per slot instead, exactly, from the first refused one on.
func TestClusterMasterWithoutScriptFlags(t *testing.T) {
	s, c, client := clusterStore(t, explicitTime("noflags"))
	ctx := context.Background()
	ms := limiter.NewMemoryStore(limiter.MemoryStoreOptions{})
	lim := limiter.Limit{Algorithm: limiter.TokenBucket, Limit: 10, Window: time.Minute}
	master := c.Servers[0]
	keys := newOnMaster(t, s, client, master.Addr())
	names := []string{keys.key("a", lim), keys.key("b", lim), keys.key("c", lim)}
	node, err := client.MasterForKey(ctx, s.Keys(names[0], lim)[0])
	if err != nil {
		t.Fatal(err)
	}
	// Not started: the test sends its batches itself, and nothing preloads.
	b := makeBatcher(client, node, s.minTTL)
	b.load = &s.load
	b.xscript = newScript("#!lua flags=no-such-flag\n" + arithLua + requestLua)
	t.Cleanup(b.close)
	for round := range 2 {
		now := int64(round) * 1000
		nowArg := strconv.FormatInt(t0+now, 10)
		var qs []queued
		var calls []*call
		for i := range 7 {
			q := queueTake(ctx, s, nowArg, limiter.Take{Key: names[i%len(names)], Limit: lim, N: int64(1 + i%4)})
			qs, calls = append(qs, q), append(calls, q.c)
		}
		b.send(calls)
		for i, q := range qs {
			<-q.c.done
			if q.c.err != nil {
				t.Fatalf("round %d, call %d: %v", round, i, q.c.err)
			}
			want := mustTake(t, ms, q.takes[0].Key, lim, q.takes[0].N, at(now))
			if got := resultFrom(q.c.vals, lim.Capacity()); got != want {
				t.Fatalf("round %d, call %d: redis %+v, memory %+v", round, i, got, want)
			}
		}
		if !b.perSlot.Load() {
			t.Fatalf("round %d: the batcher still sends the script its master refused", round)
		}
		if got := b.redirected.Load(); got != 1 {
			t.Fatalf("round %d: %d batches decided again per slot, want 1 (the first)", round, got)
		}
	}
}
