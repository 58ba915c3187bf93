package redisstore

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Batching.
//
// A Take through go-redis costs a pooled connection, a write and a read syscall and a goroutine
// wake-up per decision; with tens of concurrent callers that, not Redis, is the ceiling. So the
// Store funnels the Takes of a single-node client (and Sentinel's, which is one) through a
// batcher: a goroutine that takes every call queued at that moment (at most maxBatch), sends
// them as one pipeline of EVALSHAs, and hands each caller its reply. It never waits for a batch
// to fill: an idle store sends a lone call at once, a busy one sends whatever queued while the
// previous pipeline was on the wire ("natural batching").
//
// Each decision is still one script, so atomicity per key is unchanged; the pipeline only shares
// the round trip. A pipeline does not retry (the client's MaxRetries applies, -1 from
// NewClientFromURL), so no script runs twice, with one exception that is safe: entries answered
// NOSCRIPT did not run, and are re-sent after SCRIPT LOAD on the same connection.
//
// Redis Cluster clients are not batched: go-redis splits a cluster pipeline by node and waits for
// every node, so one hung master would hold back the decisions of keys on healthy masters until
// the budget ran out. Unbatched, a hung master delays only its own keys.

// maxBatch bounds the calls in one pipeline, so one batch's replies do not hold a caller
// behind thousands of others.
const maxBatch = 128

// queueLen is the buffer between callers and the batcher; a caller that finds it full waits
// within its budget like one whose batch is in flight.
const queueLen = 1024

// senders is how many pipelines a batcher keeps in flight. Two let one batch collect while
// the other is on the wire; bench/redis.sh compares 1, 2 and 4 (see the commit message).
const senders = 2

// directMax is how many calls send their own round trip before the rest are batched. Below a
// few concurrent calls a pipeline has little to share, and the hand-offs to and from a sender
// cost more than it saves; bench/redis.sh measured 1, 4 and 8 (see the commit message).
const directMax = 4

// ErrClosed is wrapped by the *Error of a Take on a closed Store, or one whose batch was
// abandoned by Close; such errors match ErrUnavailable too.
var ErrClosed = errors.New("store closed")

// call is one Take waiting for its batch.
type call struct {
	ctx    context.Context // the caller's, with the budget
	script *script
	keys   []string
	args   []any

	// Set by the batcher before it closes done.
	vals []int64
	err  error
	done chan struct{}
}

// batcher sends the calls queued on it as pipelines. Safe for concurrent use.
type batcher struct {
	client redis.UniversalClient
	queue  chan *call
	// ctx is canceled by close, so a sender does not start another round trip.
	ctx     context.Context
	cancel  context.CancelFunc
	stop    chan struct{} // closed by close: senders return, callers give up
	senders sync.WaitGroup
	once    sync.Once
	// active counts the calls in do; see there.
	active atomic.Int64

	// For tests: pipelines sent, the most calls one carried, NOSCRIPT recoveries.
	batches, largest, reloads atomic.Int64
}

func newBatcher(client redis.UniversalClient, n int) *batcher {
	ctx, cancel := context.WithCancel(context.Background())
	b := &batcher{
		client: client,
		queue:  make(chan *call, queueLen),
		ctx:    ctx,
		cancel: cancel,
		stop:   make(chan struct{}),
	}
	for range n {
		b.senders.Go(b.run)
	}
	return b
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
	})
}

// do runs script for one caller and returns its reply, or ctx's error as soon as ctx is done,
// whether or not the batch is still in flight. While at most directMax calls are in do, a call
// makes its own round trip (on its own pooled connection, as an unbatched Store does); beyond
// that it queues for the next pipeline.
func (b *batcher) do(ctx context.Context, sc *script, keys []string, args []any) ([]int64, error) {
	defer b.active.Add(-1)
	if b.active.Add(1) <= directMax {
		select {
		case <-b.stop:
			return nil, ErrClosed
		default:
		}
		return sc.Run(ctx, b.client, keys, args...).Int64Slice()
	}
	c := &call{ctx: ctx, script: sc, keys: keys, args: args, done: make(chan struct{})}
	select {
	case b.queue <- c:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-b.stop:
		return nil, ErrClosed
	}
	select {
	case <-c.done:
		return c.vals, c.err
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-b.stop:
		// Abandoned: still queued (no sender will take it) or in a pipeline close gave up on.
		select {
		case <-c.done:
			return c.vals, c.err
		default:
			return nil, ErrClosed
		}
	}
}

// run is one sender: it blocks for a first call, takes whatever else is queued, sends the
// batch and repeats until close.
func (b *batcher) run() {
	batch := make([]*call, 0, maxBatch)
	for {
		select {
		case c := <-b.queue:
			batch = append(batch, c)
		case <-b.stop:
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
		b.send(batch)
		clear(batch)
		batch = batch[:0]
	}
}

// send runs one batch as a pipeline and completes every call in it.
func (b *batcher) send(batch []*call) {
	// Calls whose callers gave up (budget spent while queued, or canceled) are not sent: nobody
	// waits for their decision, and sending them would count requests that were not served.
	live := make([]*call, 0, len(batch))
	var deadline time.Time
	for _, c := range batch {
		if err := c.ctx.Err(); err != nil {
			c.finish(nil, err)
			continue
		}
		live = append(live, c)
		// Take always sets a deadline (Options.Timeout); the pipeline may take as long as the
		// most patient caller, and no longer: once every caller has gone, its replies are moot.
		if d, ok := c.ctx.Deadline(); ok && d.After(deadline) {
			deadline = d
		}
	}
	if len(live) == 0 {
		return
	}
	ctx, cancel := context.WithDeadline(b.ctx, deadline)
	defer cancel()
	b.batches.Add(1)
	for n := int64(len(live)); ; {
		m := b.largest.Load()
		if n <= m || b.largest.CompareAndSwap(m, n) {
			break
		}
	}

	cmds := b.exec(ctx, live, nil)
	var retry []*call
	for i, c := range live {
		if isNoScript(cmds[i].Err()) {
			retry = append(retry, c)
			continue
		}
		c.finish(cmds[i].Int64Slice())
	}
	if len(retry) == 0 {
		return
	}
	// The script cache was flushed (a restart, SCRIPT FLUSH, a failover to a replica that never
	// saw the scripts): load what the NOSCRIPT entries need and re-send only those, SCRIPT LOAD
	// first in the same pipeline. A NOSCRIPT reply means that script did not run, so this
	// cannot count a request twice. Whatever fails again is reported, not retried.
	b.reloads.Add(1)
	var load []*script
	for _, c := range retry {
		if !slices.Contains(load, c.script) {
			load = append(load, c.script)
		}
	}
	cmds = b.exec(ctx, retry, load)
	for i, c := range retry {
		c.finish(cmds[i].Int64Slice())
	}
}

// exec sends SCRIPT LOAD for each of load, then one EVALSHA per call, as one pipeline, and
// returns the EVALSHA commands in the order of calls. Errors are read per command.
func (b *batcher) exec(ctx context.Context, calls []*call, load []*script) []*redis.Cmd {
	pipe := b.client.Pipeline()
	for _, sc := range load {
		pipe.ScriptLoad(ctx, sc.src)
	}
	cmds := make([]*redis.Cmd, len(calls))
	for i, c := range calls {
		cmds[i] = pipe.EvalSha(ctx, c.script.Hash(), c.keys, c.args...)
	}
	_, _ = pipe.Exec(ctx)
	return cmds
}

func (c *call) finish(vals []int64, err error) {
	c.vals, c.err = vals, err
	close(c.done)
}

func isNoScript(err error) bool { return redis.HasErrorPrefix(err, "NOSCRIPT") }
