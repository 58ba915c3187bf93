package redisstore

import (
	"sync/atomic"
	"time"
)

// Flush policy: when a batcher sends what it has collected. One for both topologies, with
// their own numbers (nodePolicy, clusterPolicy).
//
// Each script call costs Redis a fixed part (the call, TIME, and the GET and SET of each of
// its keys: about 9 µs on a loaded machine) whatever number of decisions it carries, so Redis
// CPU per decision falls with the batch size. Sending whatever queued while the last pipeline
// was on the wire ("natural batching") gave about 5 decisions per script call through the
// sidecar (wrk -c32) where 32 requests were in flight: the first few calls of each wave went
// on their own and the rest split over two pipelines. So while a batcher is busy it keeps one
// pipeline in flight (senders), sends no call on its own (do) and lets a batch wait for as
// many calls as were in flight lately (at most fill): in a closed loop of N callers the batch
// waits for the N that its last reply released. It waits at most as long as they take to come
// at one per pace, and never more than linger: the calls that pile up while a batch waits
// count as in flight, so a longer wait keeps a batcher busy at a lower rate, and the pace sets
// the rate (1/pace) below which the waits stop growing toward linger (see nodePolicy). An
// idle or lightly used batcher never waits and sends a lone call at once on its own round
// trip: what it saw lately counts only while a batch was sent or answered within idle, and
// below busy calls in flight there is little to share. So a lone call right after a busy spell may wait
// once, up to its batch's wait, for calls that do not come; a slow Redis makes a busy
// batcher's batches larger, not its waits longer.
type flushPolicy struct {
	senders int           // pipelines in flight at most
	busy    int64         // calls in flight lately at or above which the batcher is busy
	fill    int64         // the most calls a batch waits for
	pace    time.Duration // a batch waits at most this per call it wants (0: linger alone)
	linger  time.Duration // the longest a batch waits; far below any Options.Timeout
	idle    time.Duration // what was in flight longer ago than this is forgotten
}

var (
	// nodePolicy is a single node's (or Sentinel's) batcher's. Through the sidecar (wrk -c32)
	// the 32 requests of a wave reach the limiter over 1 to 3 ms on a loaded 2-CPU machine: a
	// wait of at most 1 ms filled batches to 19 to 23 decisions per script call, 2 ms to 27 to
	// 31, and Redis CPU per decision fell by about 30 % at the same or a lower p50 (the machine
	// spends less on round trips; bench/results.md, sixth round). At 100 µs per call a batch
	// of 8 waits at most 0.8 ms. Under an open load of R calls a second the wait w grows to
	// linger only from R = 1/pace (10,000 a second): a wait gathers R*(w + round trip) calls,
	// which the next batch waits pace for each of; below that rate w settles at
	// pace*R*rtt/(1 - pace*R) (0.3 ms at 5,000 a second and a 0.3 ms round trip), where a
	// fixed 1 ms wait waited 1 ms whenever 8 calls had been in flight.
	nodePolicy = flushPolicy{senders: senders, busy: 8, fill: maxBatch, pace: 100 * time.Microsecond, linger: 2 * time.Millisecond, idle: 20 * time.Millisecond}
	// clusterPolicy is a cluster master's batcher's, whose load counts the calls on all the
	// Store's masters: it waits, while 16 are in flight over the Store, for a batch of 16; on
	// a master that carries at least three quarters of them (a hot key's), for as many as it
	// carries (see gather). Without that a hot key's master sent batches of 16 and then of the
	// 34 that queued meanwhile: 24 decisions per script call at 50 callers, where one node
	// has 50. (Half is too little: a master's peak share of distinct keys reaches it.)
	clusterPolicy = flushPolicy{senders: 1, busy: 16, fill: 16, linger: 500 * time.Microsecond, idle: 20 * time.Millisecond}
)

// flow is what a batcher's policy has seen. Safe for concurrent use.
type flow struct {
	peak   atomic.Int64 // the most calls in flight seen since the last batch was sent
	recent atomic.Int64 // peak when the last batch was sent
	// sent is when the last batch was sent or its replies came (monotonic nanoseconds since
	// flowEpoch).
	sent atomic.Int64
}

var flowEpoch = time.Now()

func monoNow() int64 { return int64(time.Since(flowEpoch)) }

// see records load calls in flight.
func (f *flow) see(load int64) {
	for {
		p := f.peak.Load()
		if load <= p || f.peak.CompareAndSwap(p, load) {
			return
		}
	}
}

// flushed records that a batch is being sent with load calls in flight.
func (f *flow) flushed(load int64) {
	f.recent.Store(f.peak.Swap(load))
	f.sent.Store(monoNow())
}

// replied records that a batch's replies came (or it failed).
func (f *flow) replied() { f.sent.Store(monoNow()) }

// lately is how many calls were in flight lately: the most during the last round trip or
// since, none if no batch was sent or answered within p.idle.
func (f *flow) lately(p flushPolicy) int64 {
	if monoNow()-f.sent.Load() > int64(p.idle) {
		return 0
	}
	return max(f.recent.Load(), f.peak.Load())
}

// busy reports whether the batcher is busy (see flushPolicy).
func (f *flow) busy(p flushPolicy) bool { return f.lately(p) >= p.busy }

// loadNow is the calls in flight the batcher's policy goes by: on a cluster over all the
// Store's masters.
func (b *batcher) loadNow() int64 {
	if b.load != nil {
		return b.load.Load()
	}
	return b.active.Load()
}

// wants is how many calls a batch waits for: as many as were in flight lately, at most fill;
// on a cluster master that carried at least three quarters of them, as many as it carried.
// Below the policy's busy, none.
func (b *batcher) wants() int64 {
	lately := b.flow.lately(b.policy)
	want := min(b.policy.fill, lately)
	if own := b.own.lately(b.policy); b.load != nil && 4*own >= 3*lately {
		want = max(want, min(maxBatch, own))
	}
	if want < b.policy.busy {
		return 0
	}
	return want
}

// wait is the longest a batch that wants want calls waits for them: want*pace, at most linger.
func (p flushPolicy) wait(want int64) time.Duration {
	if p.pace <= 0 {
		return p.linger
	}
	return min(p.linger, time.Duration(want)*p.pace)
}

// gather lets a busy batcher's batch wait, up to its policy's wait, for the calls it wants,
// and returns it. *timer is the sender's, made at its first use.
func (b *batcher) gather(batch []*call, timer **time.Timer) []*call {
	want := b.wants()
	if int64(len(batch)) >= want {
		return batch
	}
	b.lingered.Add(1)
	wait := b.policy.wait(want)
	if *timer == nil {
		*timer = time.NewTimer(wait)
	} else {
		(*timer).Reset(wait)
	}
	defer (*timer).Stop()
	for int64(len(batch)) < want {
		select {
		case c := <-b.queue:
			batch = append(batch, c)
		case <-(*timer).C:
			return batch
		case <-b.stop:
			return batch
		}
	}
	return batch
}
