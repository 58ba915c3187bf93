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

// One script per algorithm, each run with EVALSHA, falling back to EVAL (which caches it) when
// Redis answers NOSCRIPT, as after a restart.
var (
	fixedWindowScript    = redis.NewScript(preludeLua + fixedWindowLua)
	slidingLogScript     = redis.NewScript(preludeLua + slidingLogLua)
	slidingCounterScript = redis.NewScript(preludeLua + slidingCounterLua)
	tokenBucketScript    = redis.NewScript(preludeLua + tokenBucketLua)
	leakyBucketScript    = redis.NewScript(preludeLua + leakyBucketLua)
)

func scriptFor(lim limiter.Limit) *redis.Script {
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
