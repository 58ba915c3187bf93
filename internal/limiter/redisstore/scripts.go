package redisstore

import (
	_ "embed"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/limiter"
)

// The scripts are the prelude (arguments, clock, integer helpers, save) followed by one
// algorithm's transition, ported from package limiter formula for formula.
var (
	//go:embed lua/prelude.lua
	preludeLua string
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

// One script per algorithm.
var (
	fixedWindowScript    = newScript(preludeLua + fixedWindowLua)
	slidingLogScript     = newScript(preludeLua + slidingLogLua)
	slidingCounterScript = newScript(preludeLua + slidingCounterLua)
	tokenBucketScript    = newScript(preludeLua + tokenBucketLua)
	leakyBucketScript    = newScript(preludeLua + leakyBucketLua)
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
