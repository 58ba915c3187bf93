package redisstore

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Batching and coalescing.
//
// A Take through go-redis costs a pooled connection, a write and a read syscall and a goroutine
// wake-up per decision, and each script call costs Redis a fixed overhead; with tens of
// concurrent callers that, not the transitions, is the ceiling. So the Store funnels its calls
// through a batcher: a goroutine that takes every call queued at that moment (at most
// maxBatch), coalesces them into as few calls of the request script (lua/request.lua) as it
// can, each call's Take or TakeRequest a group of its own in arrival order, sends those as one
// pipeline and hands each caller its part of the reply. When it sends is its flush policy (see
// flushPolicy, one for both topologies): an idle or lightly used store sends a lone call at
// once, on a round trip of its own; a busy one keeps one pipeline in flight, collects the next
// batch while it is on the wire and lets it wait, briefly, for as many calls as were recently
// in flight.
//
// One script call decides its groups one after another at one instant, each on the state the
// earlier ones left, exactly as limiter.MemoryStore decides the same sequence at the same now:
// a hot key costs Redis one call per batch, its state read and written once. A call takes at
// most maxGroups groups and maxKeys keys, and only groups with the same explicit instant (with
// Options.ExplicitTime; one per batch with server time). A pipeline does not retry (the
// client's MaxRetries applies, -1 from NewClientFromURL), so no script runs twice, with one
// exception that is safe: calls answered NOSCRIPT did not run, and are re-sent as EVAL.
//
// Redis Cluster: the Store keeps one batcher per master (batcherFor), and each coalesces its
// calls across slots into script calls sent straight to its master, as on a single node (see
// cluster.go); a batch the master refuses (a slot moved) is sent again per slot through the
// cluster client, which follows MOVED and ASK. go-redis waits for every node of a cluster
// pipeline, so one pipeline over all masters would let a hung master hold back the decisions of
// keys on healthy ones until the budget ran out; per-master batchers delay only the hung
// master's keys.

// maxBatch bounds the calls in one pipeline, so one batch's replies do not hold a caller
// behind thousands of others.
const maxBatch = 128

// queueLen is the buffer between callers and the batcher; a caller that finds it full waits
// within its budget like one whose batch is in flight.
const queueLen = 1024

// senders is how many pipelines a single-node (or Sentinel) batcher keeps in flight: one, so
// that the next batch collects while it is on the wire (nodePolicy; bench/rediscpu.sh).
const senders = 1

// directMax is how many calls send their own round trip before the rest are batched. Below a
// few concurrent calls a pipeline has little to share, and the hand-offs to and from a sender
// cost more than it saves; bench/redis.sh measured 1, 4 and 8 (see the commit message). A
// call goes on its own only while a connection is free too (see wire), and never while the
// batcher is busy (flow.busy): then it joins the batch that is collecting.
const directMax = 4

// ErrClosed is wrapped by the *Error of a Take on a closed Store, or one whose batch was
// abandoned by Close; such errors match ErrUnavailable too.
var ErrClosed = errors.New("store closed")

// maxGroups and maxKeys bound one coalesced script call, so that one call's work (and the
// time Redis spends in it, blocking every other client) stays small.
const (
	maxGroups = 64
	maxKeys   = 128
)

// call is one Take or TakeRequest waiting for its batch: a group of the request script.
//
// Calls are pooled (getCall), with their done channel and timer: a decision costs no call, no
// channel, no context and no timer of its own. A call goes back to the pool only once its
// caller has received its reply on done, after which the batcher never touches it again; a
// call whose caller gave up (its budget ran out, ctx was canceled, the Store closed) may still
// be in a batch, and is left to the garbage collector, so a reused call is never handed a
// reply meant for an earlier caller.
type call struct {
	ctx context.Context // the caller's, for its cancellation
	// deadline is the end of the caller's budget (the earlier of Options.Timeout and ctx's
	// deadline); zero for none (only tests).
	deadline time.Time
	nowArg   string   // the request script's ARGV[1]
	keys     []string // the group's Redis keys, each once
	// takes are the group's takes (see request.go), naming keys by index.
	takes []scriptTake
	// key1 and take1 hold keys and takes for a group of one take (a Take or Charge), which
	// then costs no slices of its own.
	key1  [1]string
	take1 [1]scriptTake

	// Set by the batcher before it sends on done: requestFields integers per take, in buf
	// for a group of one take (see reply).
	vals []int64
	err  error
	buf  [requestFields]int64
	// done receives one value, sent by finish once vals and err are set (buffered: finish
	// never waits for a caller that has gone).
	done chan struct{}
	// timer ends the caller's wait at deadline; stopped whenever the call is pooled.
	timer *time.Timer
}

// calls is the pool of calls (see call).
var calls = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &call{done: make(chan struct{}, 1), timer: t}
}}

// getCall is a pooled call, its done channel empty and its timer stopped.
func getCall() *call { return calls.Get().(*call) }

// recycle puts c back in the pool: only once its reply was received from done, or before it
// was ever queued.
func (c *call) recycle() {
	c.timer.Stop()
	done, timer := c.done, c.timer
	*c = call{done: done, timer: timer} // buf too: nothing of a reply outlives its call
	calls.Put(c)
}

// budget is the end of the call's budget: its deadline, else its context's.
func (c *call) budget() (time.Time, bool) {
	if !c.deadline.IsZero() {
		return c.deadline, true
	}
	return c.ctx.Deadline()
}

// expired is why the call's caller gave up, or nil: ctx canceled, or the budget spent by now.
func (c *call) expired(now time.Time) error {
	if err := c.ctx.Err(); err != nil {
		return err
	}
	if !c.deadline.IsZero() && !now.Before(c.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

// batcher sends the calls queued on it as pipelines. Safe for concurrent use.
type batcher struct {
	client redis.UniversalClient
	// node is the node's own client, which SCRIPT LOAD goes to: client itself on a single
	// node, the master's node client on a cluster.
	node   *redis.Client
	minTTL int64 // the request script's ARGV[2]
	// wire holds a token per round trip in flight to the node, at most MaxConns: a direct
	// call takes one if it is free at once, a sender waits for one (and meanwhile more calls
	// queue behind it), so the Store never needs more than MaxConns connections to the node
	// whatever the load (see conns.go).
	wire chan struct{}
	// cluster: the client is a cluster client and node its master (see sendNode).
	cluster bool
	queue   chan *call
	// rel is a single-node batcher's queue of Concurrency releases (nil on a cluster), which
	// it sends with its batches; kick wakes a sender when a release is queued.
	rel  *releases
	kick chan struct{}
	// ctx is canceled by close, so a sender does not start another round trip.
	ctx     context.Context
	cancel  context.CancelFunc
	stop    chan struct{} // closed by close: senders return, callers give up
	senders sync.WaitGroup
	once    sync.Once
	// live counts the senders running, for tests.
	live atomic.Int64
	// bg runs the script preloads (preload); bgMu and stopped keep them from starting once
	// close waits for them.
	bg      sync.WaitGroup
	bgMu    sync.Mutex
	stopped bool
	// preloadWanted asks the preloading goroutine, preloading says it runs.
	preloadWanted, preloading atomic.Bool
	// loading serialises loadScripts: two callers each holding some of the wire tokens and
	// waiting for the rest would wait for ever.
	loading sync.Mutex
	// active counts the calls in do; see there.
	active atomic.Int64
	// load, on a cluster, counts the calls in do on every batcher of the Store (see gather);
	// nil on a single node, where the policy's load is active.
	load *atomic.Int64
	// policy is when to send (nodePolicy or clusterPolicy), flow what it has seen (of load),
	// and own, on a cluster, what it has seen of active.
	policy flushPolicy
	flow   flow
	own    flow
	// xscript is the script a cluster batcher sends to its master (nodeScript; tests set
	// another before start), and perSlot says the master cannot run it (see sendNode).
	xscript *script
	perSlot atomic.Bool

	// For tests and benchmarks: pipelines sent, the most calls one carried, script calls
	// sent, the most groups one carried, NOSCRIPT recoveries, scripts preloaded (SCRIPT LOAD
	// of a script the node did not have), most round trips in flight at once, calls sent on
	// their own (do), batches that waited for more calls (gather).
	batches, largest, scripts, coalesced, reloads, preloads, inFlight, mostInFlight, direct, lingered atomic.Int64
	// Cluster only: batches sent again per slot because the master refused a script call
	// (sendNode).
	redirected atomic.Int64
}

// newBatcher starts a batcher of n senders sending to one node through client, node being
// that node's own client. It preloads the scripts on the node now and after every new
// connection (preload), without waiting for it.
func newBatcher(client redis.UniversalClient, node *redis.Client, n int, minTTL int64) *batcher {
	b := makeBatcher(client, node, minTTL)
	b.start(n)
	return b
}

// makeBatcher is newBatcher without starting it.
func makeBatcher(client redis.UniversalClient, node *redis.Client, minTTL int64) *batcher {
	ctx, cancel := context.WithCancel(context.Background())
	_, cluster := client.(*redis.ClusterClient)
	policy := nodePolicy
	if cluster {
		policy = clusterPolicy
	}
	b := &batcher{
		policy:  policy,
		client:  client,
		node:    node,
		minTTL:  minTTL,
		cluster: cluster,
		xscript: nodeScript,
		wire:    make(chan struct{}, MaxConns),
		queue:   make(chan *call, queueLen),
		kick:    make(chan struct{}, 1),
		ctx:     ctx,
		cancel:  cancel,
		stop:    make(chan struct{}),
	}
	return b
}

// start starts n senders and the preloads.
func (b *batcher) start(n int) {
	for range n {
		b.live.Add(1)
		b.senders.Go(func() {
			defer b.live.Add(-1)
			b.run()
		})
	}
	if b.node != nil {
		b.node.AddHook(preloadHook{b})
		b.preload()
	}
}

// acquire takes a wire token, waiting for one (until close, or done is closed) unless now is
// set; it reports whether it got one.
func (b *batcher) acquire(now bool, done <-chan struct{}) bool {
	if now {
		select {
		case b.wire <- struct{}{}:
		default:
			return false
		}
	} else {
		select {
		case b.wire <- struct{}{}:
		case <-b.stop:
			return false
		case <-done:
			return false
		}
	}
	for n := b.inFlight.Add(1); ; {
		m := b.mostInFlight.Load()
		if n <= m || b.mostInFlight.CompareAndSwap(m, n) {
			break
		}
	}
	return true
}

func (b *batcher) release() {
	b.inFlight.Add(-1)
	<-b.wire
}

// close stops the senders and returns once every one has returned. Calls still queued or in
// flight fail at once with ErrClosed. A sender blocked reading a pipeline's replies (go-redis
// does not interrupt a read on cancellation) returns at that pipeline's deadline, so close
// takes at most the budget of the calls in flight. Idempotent; concurrent calls all wait.
func (b *batcher) close() {
	b.once.Do(func() {
		close(b.stop)
		b.cancel()
		b.senders.Wait()
		b.bgMu.Lock()
		b.stopped = true
		b.bgMu.Unlock()
		b.bg.Wait()
	})
}

// do decides one group (see call) for one caller and returns its requestFields integers per
// take, or an error as soon as ctx is done or deadline (zero: none; ctx's deadline applies
// too) has passed, whether or not the batch is still in flight (context.DeadlineExceeded for
// the budget). While at most directMax calls are in do, the batcher is not busy (flow.busy)
// and a wire token is free, a call makes its own round trip (on a pooled connection, as an
// unbatched Store does); otherwise it queues for the next pipeline, waiting on a pooled call
// (see call) rather than on a context of its own. With one set, the reply of a group of one
// take may be returned in it.
func (b *batcher) do(ctx context.Context, deadline time.Time, nowArg string, g *group, one *[requestFields]int64) ([]int64, error) {
	if d, ok := ctx.Deadline(); ok && (deadline.IsZero() || d.Before(deadline)) {
		deadline = d
	}
	defer b.active.Add(-1)
	n := b.active.Add(1)
	load := n
	if b.load != nil {
		load = b.load.Add(1)
		defer b.load.Add(-1)
		b.own.see(n)
	}
	b.flow.see(load)
	if n <= directMax && !b.flow.busy(b.policy) && len(b.queue) == 0 && b.acquire(true, nil) {
		b.direct.Add(1)
		defer b.release()
		select {
		case <-b.stop:
			return nil, ErrClosed
		default:
		}
		ctx, cancel := withDeadline(ctx, deadline)
		defer cancel()
		keys, takes := g.slices()
		if b.cluster {
			return runPiped(ctx, b.client, nowArg, b.minTTL, keys, takes)
		}
		return runDirect(ctx, b.client, nowArg, b.minTTL, keys, takes)
	}
	c := getCall()
	c.ctx, c.deadline, c.nowArg = ctx, deadline, nowArg
	if g.keys == nil {
		c.key1[0], c.take1[0] = g.key, g.take
		c.keys, c.takes = c.key1[:], c.take1[:]
	} else {
		c.keys, c.takes = g.keys, g.takes
	}
	var expire <-chan time.Time // nil, which never fires, without a deadline
	if !deadline.IsZero() {
		wait := time.Until(deadline)
		if wait <= 0 {
			c.recycle()
			return nil, context.DeadlineExceeded
		}
		c.timer.Reset(wait)
		expire = c.timer.C
	}
	// Not queued yet: the call is still the caller's alone, and goes back to the pool.
	select {
	case b.queue <- c:
	case <-ctx.Done():
		c.recycle()
		return nil, ctx.Err()
	case <-expire:
		c.recycle()
		return nil, context.DeadlineExceeded
	case <-b.stop:
		c.recycle()
		return nil, ErrClosed
	}
	// Queued: every path that returns before done has received abandons the call (no recycle).
	select {
	case <-c.done:
		return c.reply(one)
	case <-ctx.Done():
		c.timer.Stop()
		return nil, ctx.Err()
	case <-expire:
		return nil, context.DeadlineExceeded
	case <-b.stop:
		// Abandoned: still queued (no sender will take it) or in a pipeline close gave up on.
		select {
		case <-c.done:
			return c.reply(one)
		default:
			c.timer.Stop()
			return nil, ErrClosed
		}
	}
}

// group is the group of one call of do: keys and takes, or when keys is nil the one key and
// take of a Take or Charge, which a queued call copies into its own storage (call.key1).
type group struct {
	keys  []string
	takes []scriptTake
	key   string
	take  scriptTake
}

// slices is g's keys and takes as slices.
func (g *group) slices() ([]string, []scriptTake) {
	if g.keys == nil {
		return []string{g.key}, []scriptTake{g.take}
	}
	return g.keys, g.takes
}

// reply is the reply of a call received from done, which goes back to the pool: a reply in
// c.buf is copied to one (or, when one is nil, to a slice of its own), since the call's next
// user will overwrite it.
func (c *call) reply(one *[requestFields]int64) ([]int64, error) {
	vals, err := c.vals, c.err
	if len(vals) == requestFields && &vals[0] == &c.buf[0] {
		if one != nil {
			*one = c.buf
			vals = one[:]
		} else {
			vals = slices.Clone(vals)
		}
	}
	c.recycle()
	return vals, err
}

// withDeadline is ctx with deadline (zero: none), and its cancel; ctx itself when that adds
// nothing.
func withDeadline(ctx context.Context, deadline time.Time) (context.Context, context.CancelFunc) {
	if d, ok := ctx.Deadline(); deadline.IsZero() || (ok && !deadline.Before(d)) {
		return ctx, func() {}
	}
	return context.WithDeadline(ctx, deadline)
}

// run is one sender: it blocks for a first call (or a queued release), takes whatever else is
// queued, sends the batch and repeats until close.
func (b *batcher) run() {
	batch := make([]*call, 0, maxBatch)
	var timer *time.Timer // gather's
	for {
		select {
		case c := <-b.queue:
			batch = append(batch, c)
		case <-b.kick:
		case <-b.stop:
			b.failReleases()
			return
		}
		// The calls that queue while this waits for a connection join the batch.
		if !b.acquire(false, nil) {
			if len(batch) > 0 {
				batch[0].finish(nil, ErrClosed)
			}
			b.failReleases()
			return
		}
	fill:
		for len(batch) < maxBatch {
			select {
			case c := <-b.queue:
				batch = append(batch, c)
			default:
				break fill
			}
		}
		if len(batch) == 0 {
			b.sendReleases()
		} else {
			batch = b.gather(batch, &timer)
			b.flow.flushed(b.loadNow())
			if b.load != nil { // see own
				b.own.flushed(b.active.Load())
			}
			b.send(batch)
			b.flow.replied()
			b.own.replied()
		}
		b.release()
		clear(batch)
		batch = batch[:0]
		if b.rel != nil && b.rel.pending() { // queued meanwhile: with the next batch, or alone
			b.wake()
		}
	}
}

// queueRelease queues p for the next pipeline (see releases).
func (b *batcher) queueRelease(p *pendingRelease) {
	b.rel.add(p)
	b.wake()
	select {
	case <-b.stop: // no sender left to take it
		b.failReleases()
	default:
	}
}

// wake makes a sender run once more, to send the releases queued.
func (b *batcher) wake() {
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

// failReleases fails every queued release with ErrClosed.
func (b *batcher) failReleases() {
	if b.rel != nil {
		b.rel.fail(ErrClosed)
	}
}

// sendReleases sends the queued releases as a pipeline of their own: no decision is waiting to
// carry them.
func (b *batcher) sendReleases() {
	if b.rel == nil {
		return
	}
	ctx, cancel := context.WithTimeout(b.ctx, b.rel.timeout)
	defer cancel()
	pipe := b.client.Pipeline()
	groups := b.rel.pipe(ctx, pipe)
	if len(groups) == 0 {
		return
	}
	_, _ = pipe.Exec(ctx)
	finishReleases(groups)
}

// send runs one batch as a pipeline and completes every call in it.
func (b *batcher) send(batch []*call) {
	// Calls whose callers gave up (budget spent while queued, or canceled) are not sent: nobody
	// waits for their decision, and sending them would count requests that were not served.
	live := make([]*call, 0, len(batch))
	var deadline time.Time
	patient := false // a caller without a deadline
	now := time.Now()
	for _, c := range batch {
		if err := c.expired(now); err != nil {
			c.finish(nil, err)
			continue
		}
		live = append(live, c)
		// Take always sets a deadline (Options.Timeout); the pipeline may take as long as the
		// most patient caller, and no longer: once every caller has gone, its replies are moot.
		// (Only tests call without one.)
		if d, ok := c.budget(); !ok {
			patient = true
		} else if d.After(deadline) {
			deadline = d
		}
	}
	if len(live) == 0 {
		return
	}
	var ctx context.Context
	var cancel context.CancelFunc
	if patient {
		ctx, cancel = context.WithCancel(b.ctx)
	} else {
		ctx, cancel = context.WithDeadline(b.ctx, deadline)
	}
	defer cancel()
	b.batches.Add(1)
	for n := int64(len(live)); ; {
		m := b.largest.Load()
		if n <= m || b.largest.CompareAndSwap(m, n) {
			break
		}
	}

	if b.cluster && b.node != nil && !b.perSlot.Load() {
		b.sendNode(ctx, live)
		return
	}
	b.sendPiped(ctx, live)
}

// sendPiped sends calls as a pipeline through the batcher's client (on a cluster, which routes
// each script call by slot and follows MOVED and ASK), coalesced per slot on a cluster, and
// completes every call.
func (b *batcher) sendPiped(ctx context.Context, live []*call) {
	scripts := b.coalesce(live, b.cluster)
	cmds := b.exec(ctx, scripts, false)
	var retry []*merged
	for i, m := range scripts {
		if isNoScript(cmds[i].Err()) {
			retry = append(retry, m)
			continue
		}
		m.finish(cmds[i].Int64Slice())
	}
	if len(retry) == 0 {
		return
	}
	// The script cache was flushed (a restart, SCRIPT FLUSH, a failover to a replica that never
	// saw the script): re-send only the calls answered NOSCRIPT, as EVAL, which caches the
	// script on the node that runs it (on a cluster, the one that owns the keys). A NOSCRIPT
	// reply means that script did not run, so this cannot count a request twice. Whatever fails
	// again is reported, not retried.
	b.reloads.Add(1)
	cmds = b.exec(ctx, retry, true)
	for i, m := range retry {
		m.finish(cmds[i].Int64Slice())
	}
}

// merged is one call of the request script carrying the groups of several calls.
type merged struct {
	calls []*call
	keys  []string
	scriptCall
	// index maps keys to their index from 0; slot is the keys' hash tag (cluster only).
	index map[string]int
	slot  string
}

// coalesce packs calls, in order, into script calls: a call joins the latest script call of
// its slot (with perSlot; any, else) while that has the same instant and room for its group.
// Arrival order is kept among the calls of one slot, the only order that can change a
// decision, since each slot's script calls run in pipeline order.
func (b *batcher) coalesce(calls []*call, perSlot bool) []*merged {
	var out []*merged
	open := map[string]*merged{} // per slot, the script call still taking groups
	for _, c := range calls {
		slot := ""
		if perSlot {
			slot = hashTag(c.keys[0])
		}
		m := open[slot]
		if m == nil || m.nowArg != c.nowArg || len(m.calls) == maxGroups || len(m.keys)+len(c.keys) > maxKeys {
			m = &merged{index: make(map[string]int, len(c.keys)), slot: slot, scriptCall: scriptCall{nowArg: c.nowArg}}
			open[slot] = m
			out = append(out, m)
		}
		m.calls = append(m.calls, c)
		for j := range c.takes {
			k := c.keys[c.takes[j].key]
			idx, ok := m.index[k]
			if !ok {
				idx = len(m.keys)
				m.keys = append(m.keys, k)
				m.index[k] = idx
			}
			m.add(idx, &c.takes[j])
		}
	}
	b.scripts.Add(int64(len(out)))
	for _, m := range out {
		for n := int64(len(m.calls)); ; {
			g := b.coalesced.Load()
			if n <= g || b.coalesced.CompareAndSwap(g, n) {
				break
			}
		}
	}
	return out
}

// finish hands each call its part of the script's reply, decoded into the call's buf for a
// group of one take (no allocation per decision).
func (m *merged) finish(vals []int64, err error) {
	var rp replay
	for _, c := range m.calls {
		if err != nil {
			break
		}
		if len(c.takes) == 1 {
			c.vals = c.buf[:]
		} else {
			c.vals = make([]int64, requestFields*len(c.takes))
		}
		vals, err = decodeInto(c.vals, vals, c.takes, &rp)
	}
	if err == nil && (len(vals) != 0 || rp.left != 0) {
		err = errReply
	}
	for _, c := range m.calls {
		if err != nil {
			c.finish(nil, err)
		} else {
			c.finish(c.vals, nil)
		}
	}
}

// exec sends the script calls as one pipeline, as EVALSHA (or EVAL, with src), and returns
// their commands in order. Errors are read per command.
func (b *batcher) exec(ctx context.Context, scripts []*merged, src bool) []*redis.Cmd {
	pipe := b.client.Pipeline()
	var groups []*releaseGroup
	if !src && b.rel != nil { // releases first: a slot they free can go to the takes after them
		groups = b.rel.pipe(ctx, pipe)
	}
	cmds := make([]*redis.Cmd, len(scripts))
	for i, m := range scripts {
		if src {
			cmds[i] = pipe.Eval(ctx, requestScript.src, m.keys, m.argv(b.minTTL)...)
		} else {
			cmds[i] = pipe.EvalSha(ctx, requestScript.Hash(), m.keys, m.argv(b.minTTL)...)
		}
	}
	_, _ = pipe.Exec(ctx)
	finishReleases(groups)
	return cmds
}

// finish completes c: the batcher does not touch c again (its caller may reuse it at once).
func (c *call) finish(vals []int64, err error) {
	c.vals, c.err = vals, err
	c.done <- struct{}{}
}

// hashTag is the part of key Redis Cluster hashes to find its slot: what lies between the
// first '{' and the next '}' when that is not empty, else the whole key. Keys with one tag are
// in one slot (keys with different tags may be too, and are then merely not coalesced).
func hashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

// runPiped is runDirect for a cluster client: a pipeline of one script call, because go-redis
// routes a lone command through its command table (COMMAND, asked of a random node, on a
// connection left open there), and a pipeline by slot alone. NOSCRIPT is answered with EVAL.
func runPiped(ctx context.Context, client redis.UniversalClient, nowArg string, minTTL int64, keys []string, takes []scriptTake) ([]int64, error) {
	return decodeOne(evalPiped(ctx, client, requestScript, keys, oneCall(nowArg, takes).argv(minTTL)...), takes)
}

// roundTrip runs fn as one round trip to the node, holding a wire token; it fails with
// ErrClosed after close, and with ctx's error if ctx ends while it waits for a token.
func (b *batcher) roundTrip(ctx context.Context, fn func()) error {
	if !b.acquire(false, ctx.Done()) {
		if err := ctx.Err(); err != nil {
			return err
		}
		return ErrClosed
	}
	defer b.release()
	fn()
	return nil
}
