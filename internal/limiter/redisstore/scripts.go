package redisstore

import (
	_ "embed"

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
)
