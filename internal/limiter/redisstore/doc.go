// Package redisstore is a limiter.Store kept in Redis, so that every replica of a service shares
// one limit per key.
//
// Every decision is made by one Lua script, lua/request.lua, which reads each key's state once,
// applies the same integer transitions as package limiter (ported formula for formula; a
// differential test against limiter.MemoryStore keeps them equal) and writes each state back
// once with a TTL, atomically. By default (the zero Options) the script takes the time from
// Redis (TIME, once per script call), so every client shares one clock however far apart their
// own clocks are.
//
// What a decision costs Redis is mostly per script call (the call itself, TIME, a GET and a SET
// per key), so the script keeps the per-take part small: a call's numbers travel as one
// argument of doubles, a take as one of them (its key, limit, cost and flags packed; each
// limit once per call), a run of equal Takes of a hot key as one and a count, a decision comes
// back as one integer in the common case (allowed, reason, remaining and resetAfter packed),
// and a call defines only the transitions of the algorithms it uses. The admitted part of such
// a run is found by bisection and charged as one take, and the decoder replays its decisions
// with package limiter's transitions (see lua/request.lua; bench/rediscpu.sh measures it).
//
// Concurrent decisions share round trips and script calls: the Store's batcher coalesces the
// Takes and TakeRequests waiting at that moment into as few calls of the script as it can,
// each a group decided in arrival order at one instant, exactly as MemoryStore would decide that
// sequence (see batch.go): a hot key costs one script call per batch. One flush policy decides
// when a batch goes (flush.go): an idle or lightly used Store sends a lone call at once on its own
// round trip; a busy one keeps one pipeline in flight per batcher and lets the next batch wait
// for as many calls as were in flight lately, up to 100 µs for each and 2 ms in all (500 µs on a
// cluster master), so that N callers in a closed loop (a sidecar's requests) share about N
// decisions per script call. A
// single-node or Sentinel client has one batcher; a Redis Cluster client one per master, so a
// hung master delays only its own keys. A master's batcher coalesces its calls across slots
// into script calls sent to that master (Redis 7's allow-cross-slot-keys, keys passed in ARGV;
// see cluster.go), and sends a batch the master refuses because a slot moved again per slot
// through the cluster client, which follows MOVED and ASK. Close stops the batchers.
//
// A Store keeps at most MaxConns (2) round trips in flight per Redis node, and the clients of
// NewClient and NewClientFromURL hold at most that many connections per node, none to cluster
// masters that hold none of the Store's keys, none at all once idle for ClientOptions.IdleTimeout;
// a failed dial holds a node's dials back for a jittered, growing time, and a batcher loads the
// scripts on its node when it starts and after each new connection (see conns.go, batch.go).
//
// # Key layout
//
// A limiter key k under Limit lim is stored in
//
//	<prefix>:{<id>}:<schema>
//
// where id is the first 96 bits of SHA-256(alg, W, NUL, k) in base64url (16 characters), alg is
// fw, swl, swc, tb, lbm or lbq (LeakyBucket Meter and Queue), W the window in milliseconds, and
// schema the version of the state layout (2). Consequences:
//
//   - The braces make id the Redis Cluster hash tag. Client input only reaches Redis hashed, so
//     ':', braces, newlines or a megabyte of key cannot inject into, or collide with, another
//     limiter's keys, and a key is len(prefix) + 21 bytes long (27 with the default prefix, so
//     that the key name fits a 32-byte allocation).
//   - A policy edit that changes the algorithm, the window or the leaky mode moves the limiter to
//     a new key (the old one expires): the state's units depend on them. Edits of the limit,
//     burst or maxDelay keep the state, whose transitions clamp it to the new capacity (a state
//     that expired under the old limit is gone: the key starts fresh). This is how
//     limiter.MemoryStore treats edits too, with one difference: switching a key back to its
//     previous algorithm or window within the old state's TTL finds the old state.
//
// The state per algorithm, each key with a TTL (see below); the window and bucket algorithms
// keep a string, so that a decision is one GET and at most one SET ... PX:
//
//	fw   string  "<window index> <units admitted in it>", decimal
//	swc  string  "<window index w> <units in window w-1> <units in window w>", decimal
//	tb   string  <tokens in scaled units, instant they were counted at (ms)>, packed in 12 bytes
//	             (14 for instants from 2^43 ms, the year 2248; see lua/arith.lua); absent = full
//	lbm  string  <level in scaled units, instant it was computed at (ms)>, packed as tb;
//	             absent = empty
//	lbq  string  as lbm
//	swl  list    sum, T1, c1, T2, c2, ...: the sum of the c's, then the units c admitted at
//	             each instant T, oldest first
//
// Memory per limiter, as MEMORY USAGE reports it on Redis 7.0 with the default prefix and a
// one-minute window (key name and Redis's per-key overhead included; TestMemoryPerKey logs it):
// 88 bytes for each string layout; 184 bytes for a log with one entry, plus about 12 bytes per
// further entry (a full log of 10,000 entries is about 119 KiB).
//
// The second round of issue 13 (the compact arguments and replies above) left the state
// layout, and so the schema, as it was: only what a call sends and returns changed, which is
// never stored, so Stores of both versions (two script digests) share one key's state during a
// rollout.
//
// Schema 1 (until issue 13) named keys <prefix>:{<hex of 128 bits of SHA-256(k)>}:<alg>1:<W>
// and kept the buckets in decimal ("<tokens> <instant>"): 120 to 136 bytes per limiter. Its
// keys are never read by schema 2 and expire on their own.
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
// Cluster and Sentinel work (see NewClientFromURL); a cluster master before Redis 7 gets one
// script call per slot, not per batch (it knows no script flags, see cluster.go). A call that
// times out may still run on the server later: a timeout means the decision is unknown, not
// that nothing was counted.
//
// # Arithmetic
//
// Lua numbers are doubles. Validate's bounds (limiter.MaxLimit, MaxWindow, MaxNowMs) keep every
// value the scripts form below 2^53, where doubles hold integers exactly, floor(a/b) of integers
// is exact, and redis.call formats numbers as exact integers ("%.17g"). The scripts' comments
// name the largest value of each formula.
package redisstore
