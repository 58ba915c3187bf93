// Package redisstore is a limiter.Store kept in Redis, so that every replica of a service shares
// one limit per key.
//
// Each decision is one EVALSHA of the algorithm's Lua script, which reads the key's state,
// applies the same integer transition as package limiter (ported formula for formula; a
// differential test against limiter.MemoryStore keeps them equal) and writes the state back with
// a TTL, atomically. By default (the zero Options) the script takes the time from Redis (TIME),
// so every client shares one clock however far apart their own clocks are.
//
// Concurrent decisions share round trips: with a single-node or Sentinel client, the Store's
// batcher sends the Takes waiting at that moment as one pipeline, without waiting for more (see
// batch.go). Cluster clients make one round trip per decision. Close stops the batcher.
//
// # Key layout
//
// A limiter key k under Limit lim is stored in
//
//	<prefix>:{<h>}:<alg><schema>:<W>
//
// where h is the first 16 bytes of SHA-256(k) in hex (32 characters), alg is fw, swl, swc, tb,
// lbm or lbq (LeakyBucket Meter and Queue), schema is the version of the script's state layout
// (1), and W is the window in milliseconds. Consequences:
//
//   - The braces make h the Redis Cluster hash tag: all keys of one limiter are in one slot, as a
//     script needs. Client input only reaches Redis hashed, so ':', braces, newlines or a
//     megabyte of key cannot inject into, or collide with, another limiter's keys, and a key is at
//     most len(prefix) + 52 bytes long.
//   - A policy edit that changes the algorithm, the window or the leaky mode moves the limiter to
//     new keys (the old ones expire): the state's units depend on them. Edits of the limit, burst
//     or maxDelay keep the state, whose transitions clamp it to the new capacity. This is how
//     limiter.MemoryStore treats edits too, with one difference: switching a key back to its
//     previous algorithm or window within the old state's TTL finds the old state.
//
// The state per algorithm, each key with a TTL (see below); the window and bucket algorithms
// keep a string of integers separated by spaces, so that a decision is one GET and at most one
// SET ... PX:
//
//	fw   string  "<window index> <units admitted in it>"
//	swc  string  "<window index w> <units in window w-1> <units in window w>"
//	tb   string  "<tokens in scaled units> <instant they were counted at, ms>"; absent = full
//	lbm  string  "<level in scaled units> <instant it was computed at, ms>"; absent = empty
//	lbq  string  as lbm
//	swl  list    sum, T1, c1, T2, c2, ...: the sum of the c's, then the units c admitted at
//	             each instant T, oldest first
//
// Memory per limiter, as MEMORY USAGE reports it on Redis 7.0 with the default prefix and a
// one-minute window (key name and Redis's per-key overhead included; TestMemoryPerKey logs it):
// 120 to 136 bytes for each string layout; 216 bytes for a log with one entry, plus about
// 12 bytes per further entry (a full log of 10,000 entries is about 119 KiB).
//
// # Expiry
//
// Every write sets a TTL: with server time, the decision's ResetAfter, after which the state is
// equivalent to an absent key; a state equivalent to an absent key is deleted rather than
// written, and an unchanged one is not written again. With explicit time (Options.ExplicitTime)
// the instants are the caller's, unrelated to Redis's expiry clock, so every write sets a
// TTL of at least ExplicitTimeMinTTL.
//
// # Requirements
//
// Redis 5 or later (scripts that call TIME need effects replication, the default since 5); Redis
// Cluster and Sentinel work (see NewClientFromURL). A call that times out may still run on the
// server later: a timeout means the decision is unknown, not that nothing was counted.
//
// # Arithmetic
//
// Lua numbers are doubles. Validate's bounds (limiter.MaxLimit, MaxWindow, MaxNowMs) keep every
// value the scripts form below 2^53, where doubles hold integers exactly, floor(a/b) of integers
// is exact, and redis.call formats numbers as exact integers ("%.17g"). The scripts' comments
// name the largest value of each formula.
package redisstore
