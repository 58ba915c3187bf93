package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Redis Cluster batches. A cluster batcher's calls are all on keys its master served when they
// were queued (Store.batcherFor), mostly each in a slot of its own (every limiter key is its
// own hash tag), and a script call's declared keys must share one slot. Redis 7's script flag
// allow-cross-slot-keys lets a script reach keys of several slots served by the node that runs
// it, though only keys it does not declare (Redis checks declared ones before any flag). So a
// cluster batcher coalesces its batch across slots exactly as a single node does, and sends
// each script call to its master as nodeScript: the request script behind a prologue
// (lua/crossslot.lua) that takes the keys from the end of ARGV; the call declares none.
//
// Redis checks every key at each command the script runs: a key whose slot is no longer
// served by the master (a slot moved or migrating, a failover, the cluster down) fails the call
// at that key's first read, with an error, and the request script reads every state before it
// writes any, so a refused call changed nothing (TestClusterRefusedBatchIsDecidedPerSlot fails
// if a script wrote a key before reading a later one). The calls of the refused script calls are then
// sent again per slot through the cluster client (sendPiped), which follows MOVED and ASK, and
// the slot map is reloaded. Those calls are then decided after the batch's other script calls,
// which for callers waiting at the same moment is as valid an arrival order as any; each
// decision is still exactly MemoryStore's for the sequence Redis applied. Errors that may
// mean the call ran (a timeout, a broken connection) are reported, never retried.

// A cluster batcher's flush policy is clusterPolicy (see flush.go): a Store's callers spread
// over the masters, so at a given load each master sees a third of the calls a single node
// would, and natural batching (send whatever queued during the last round trip) gave it
// batches a third the size, at a script call's fixed cost each: Redis CPU per decision was 1.8
// to 2 times a single node's for distinct keys (bench/rediscpu.sh).

// newNodeBatcher starts the batcher of one master of a cluster; load counts the calls in
// flight on all of the Store's masters.
func newNodeBatcher(client *redis.ClusterClient, node *redis.Client, minTTL int64, load *atomic.Int64) *batcher {
	b := makeBatcher(client, node, minTTL)
	b.load = load
	b.start(b.policy.senders)
	return b
}

//go:embed lua/crossslot.lua
var crossSlotLua string

// nodeScript is the request script as a cluster batcher sends it to its master.
var nodeScript = newScript(crossSlotLua + arithLua + requestLua)

// sendNode sends a cluster batcher's calls to its master, coalesced across slots, and
// completes every call: a script call answered NOSCRIPT is sent again as EVAL, and one the
// master refused because a key is not its own (notServed) is sent again per slot through the
// cluster client. So is one a master cannot compile (noCrossSlot: Redis before 7 knows no
// script flags), and the batcher then sends every batch per slot.
func (b *batcher) sendNode(ctx context.Context, live []*call) {
	scripts := b.coalesce(live, false)
	noScript, refused := b.settleNode(scripts, b.execNode(ctx, scripts, false), true)
	if len(noScript) > 0 {
		// As in sendPiped: a NOSCRIPT reply means the script did not run.
		b.reloads.Add(1)
		_, again := b.settleNode(noScript, b.execNode(ctx, noScript, true), false)
		refused = append(refused, again...)
	}
	if len(refused) == 0 {
		return
	}
	b.redirected.Add(1)
	if cc, ok := b.client.(*redis.ClusterClient); ok {
		cc.ReloadState(ctx)
	}
	var calls []*call
	for _, m := range refused {
		calls = append(calls, m.calls...)
	}
	b.sendPiped(ctx, calls)
}

// execNode sends the script calls to the batcher's master as one pipeline of nodeScript, as
// EVALSHA (or EVAL, with src), declaring no keys: each call's ARGV ends with its keys and
// their count (lua/crossslot.lua).
func (b *batcher) execNode(ctx context.Context, scripts []*merged, src bool) []*redis.Cmd {
	pipe := b.node.Pipeline()
	cmds := make([]*redis.Cmd, len(scripts))
	for i, m := range scripts {
		argv := m.argv(b.minTTL)
		for _, k := range m.keys {
			argv = append(argv, k)
		}
		argv = append(argv, len(m.keys))
		if src {
			cmds[i] = pipe.Eval(ctx, b.xscript.src, nil, argv...)
		} else {
			cmds[i] = pipe.EvalSha(ctx, b.xscript.Hash(), nil, argv...)
		}
	}
	_, _ = pipe.Exec(ctx)
	return cmds
}

// notServed reports whether err is a master's refusal of a script call because one of its keys
// is not served there, which Redis answers before the script ran or at the key's first read
// (before it wrote anything): the slot moved or is migrating (inside a script, "non local
// key"; MOVED, ASK, TRYAGAIN and CROSSSLOT for declared keys), the cluster is down, or the node
// is a replica now (READONLY).
func notServed(err error) bool {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return false // no reply: the call may have run
	}
	for _, p := range []string{"MOVED", "ASK", "TRYAGAIN", "CROSSSLOT", "CLUSTERDOWN", "READONLY"} {
		if redis.HasErrorPrefix(err, p) {
			return true
		}
	}
	// "ERR Script attempted to access a non local key in a cluster node ...", "... to execute a
	// (write) command while the cluster is down ..."
	msg := rerr.Error()
	return strings.HasPrefix(msg, "ERR Script attempted to ") &&
		(strings.Contains(msg, " non local key ") || strings.Contains(msg, " while the cluster is down"))
}

// noCrossSlot reports whether err is a master's refusal to compile nodeScript: Redis 5 and 6
// read the shebang line as Lua ("Error compiling script ... unexpected symbol near '#'"), a
// Redis 7 that did not know the flag would say so ("Unexpected flag in script shebang"). The
// script did not run.
func noCrossSlot(err error) bool {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return false
	}
	msg := rerr.Error()
	return strings.Contains(msg, "Error compiling script") || strings.Contains(msg, "shebang")
}

// settleNode completes the merged calls their master answered and returns those it did not
// run: answered NOSCRIPT (only when noScriptAgain: the first try, by EVALSHA), or refused,
// to be sent again per slot.
func (b *batcher) settleNode(scripts []*merged, cmds []*redis.Cmd, noScriptAgain bool) (noScript, refused []*merged) {
	for i, m := range scripts {
		switch err := cmds[i].Err(); {
		case noScriptAgain && isNoScript(err):
			noScript = append(noScript, m)
		case notServed(err):
			refused = append(refused, m)
		case noCrossSlot(err):
			b.perSlot.Store(true)
			refused = append(refused, m)
		default:
			m.finish(cmds[i].Int64Slice())
		}
	}
	return noScript, refused
}
