package redisstore

import (
	"context"
	_ "embed"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
)

// The request script decides every Take and TakeRequest: the integer helpers and every
// transition, ported from package limiter formula for formula, as functions over a state. The
// refund script holds the inverse of each charge (see request.go).
var (
	//go:embed lua/arith.lua
	arithLua string
	//go:embed lua/request.lua
	requestLua string
	//go:embed lua/refund.lua
	refundLua string
	//go:embed lua/slots.lua
	slotsLua string
)

// script is a Lua script run with EVALSHA. When Redis answers NOSCRIPT (after a restart or
// SCRIPT FLUSH) an unbatched call falls back to EVAL (Run), which caches it; a batch re-sends
// the calls that failed as EVAL of src.
type script struct {
	*redis.Script
	src string
}

func newScript(src string) *script { return &script{Script: redis.NewScript(src), src: src} }

// The request script and the refund script.
var (
	requestScript = newScript(arithLua + requestLua)
	refundScript  = newScript(arithLua + refundLua)
	slotsScript   = newScript(arithLua + slotsLua)
)

// evalPiped runs sc as EVALSHA in a pipeline of its own, and as EVAL if the node answers
// NOSCRIPT (which means it did not run).
func evalPiped(ctx context.Context, client redis.UniversalClient, sc *script, keys []string, args ...any) *redis.Cmd {
	pipe := client.Pipeline()
	cmd := pipe.EvalSha(ctx, sc.Hash(), keys, args...)
	_, _ = pipe.Exec(ctx)
	if !isNoScript(cmd.Err()) {
		return cmd
	}
	pipe = client.Pipeline()
	cmd = pipe.Eval(ctx, sc.src, keys, args...)
	_, _ = pipe.Exec(ctx)
	return cmd
}

func isNoScript(err error) bool { return redis.HasErrorPrefix(err, "NOSCRIPT") }

// Preloading. The request script is about 16 KB of Lua: the first EVAL on a node that does not
// have it cached (a new or restarted Redis, a promoted replica) compiles it, which can take
// longer than a decision's budget. So a batcher loads the scripts on its node (SCRIPT EXISTS,
// then SCRIPT LOAD of those missing) when it starts and after each new connection to the node
// (preloadHook), in the background: a Store comes up at once with Redis down, and a preload that
// fails is tried again at the next connection. A preload takes a wire token like any round trip.

// preloadTimeout bounds one preload, which holds the node's wire tokens meanwhile.
const preloadTimeout = time.Second

// preload asks for the scripts to be loaded on the node, in a goroutine of its own unless one
// runs (which then loads them once more).
func (b *batcher) preload() {
	b.preloadWanted.Store(true)
	if !b.preloading.CompareAndSwap(false, true) {
		return
	}
	b.bgMu.Lock()
	if b.stopped {
		b.bgMu.Unlock()
		b.preloading.Store(false)
		return
	}
	b.bg.Add(1)
	b.bgMu.Unlock()
	go func() {
		defer b.bg.Done()
		for {
			for b.preloadWanted.Swap(false) {
				b.loadScripts()
			}
			b.preloading.Store(false)
			// A request that came after the last Swap and found preloading still set.
			if !b.preloadWanted.Load() || !b.preloading.CompareAndSwap(false, true) {
				return
			}
		}
	}()
}

// loadScripts loads the scripts the node does not have. It takes every wire token, so that it
// runs on a connection left idle rather than dial one more: the call whose new connection
// asked for the preload still holds it.
func (b *batcher) loadScripts() {
	b.loading.Lock()
	defer b.loading.Unlock()
	for i := range MaxConns {
		if !b.acquire(false, nil) {
			for range i {
				b.release()
			}
			return
		}
	}
	defer func() {
		for range MaxConns {
			b.release()
		}
	}()
	ctx, cancel := context.WithTimeout(b.ctx, preloadTimeout)
	defer cancel()
	scripts := []*script{requestScript}
	if b.cluster {
		scripts = append(scripts, refundScript, b.xscript)
	}
	hashes := make([]string, len(scripts))
	for i, sc := range scripts {
		hashes[i] = sc.Hash()
	}
	exists, err := b.node.ScriptExists(ctx, hashes...).Result()
	if err != nil || len(exists) != len(scripts) {
		return
	}
	for i, sc := range scripts {
		if exists[i] {
			continue
		}
		if err := b.node.ScriptLoad(ctx, sc.src).Err(); err != nil {
			if sc == b.xscript && noCrossSlot(err) {
				b.perSlot.Store(true)
				continue
			}
			return
		}
		b.preloads.Add(1)
	}
}

// preloadHook preloads the scripts after each new connection to the batcher's node.
type preloadHook struct{ b *batcher }

func (h preloadHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if _, dead := conn.(*deadConn); err == nil && !dead {
			h.b.preload()
		}
		return conn, err
	}
}

func (h preloadHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h preloadHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
