package redisstore

import (
	_ "embed"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/limiter"
)

// The per-algorithm scripts (Take) are the integer helpers, the prelude (arguments, clock,
// save) and one algorithm's transition, ported from package limiter formula for formula. The
// request script (TakeRequest) holds every transition as a function over a state, and the
// refund script the inverse of each charge (see request.go).
var (
	//go:embed lua/arith.lua
	arithLua string
	//go:embed lua/prelude.lua
	preludeLua string
	//go:embed lua/request.lua
	requestLua string
	//go:embed lua/refund.lua
	refundLua string
	//go:embed lua/fixedwindow.lua
	fixedWindowLua string
	//go:embed lua/slidinglog.lua
	slidingLogLua string
	//go:embed lua/slidingcounter.lua
	slidingCounterLua string
	//go:embed lua/tokenbucket.lua
	tokenBucketLua string
	//go:embed lua/leakybucket.lua
	leakyBucketLua string
)

// script is one algorithm's Lua, run with EVALSHA. When Redis answers NOSCRIPT (after a restart
// or SCRIPT FLUSH) an unbatched call falls back to EVAL (Run), which caches it; a batch sends
// SCRIPT LOAD of src and re-sends the entries that failed.
type script struct {
	*redis.Script
	src string
}

func newScript(src string) *script { return &script{Script: redis.NewScript(src), src: src} }

// One script per algorithm, the request script and the refund script.
var (
	fixedWindowScript    = newScript(arithLua + preludeLua + fixedWindowLua)
	slidingLogScript     = newScript(arithLua + preludeLua + slidingLogLua)
	slidingCounterScript = newScript(arithLua + preludeLua + slidingCounterLua)
	tokenBucketScript    = newScript(arithLua + preludeLua + tokenBucketLua)
	leakyBucketScript    = newScript(arithLua + preludeLua + leakyBucketLua)
	requestScript        = newScript(arithLua + requestLua)
	refundScript         = newScript(arithLua + refundLua)
)

func scriptFor(lim limiter.Limit) *script {
	switch lim.Algorithm {
	case limiter.FixedWindow:
		return fixedWindowScript
	case limiter.SlidingWindowLog:
		return slidingLogScript
	case limiter.SlidingWindowCounter:
		return slidingCounterScript
	case limiter.TokenBucket:
		return tokenBucketScript
	default: // LeakyBucket; Validate admits nothing else
		return leakyBucketScript
	}
}
