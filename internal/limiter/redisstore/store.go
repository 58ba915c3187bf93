package redisstore

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/limiter"
)

// Defaults for Options.
const (
	DefaultPrefix  = "sluice"
	DefaultTimeout = 50 * time.Millisecond
)

// ExplicitTimeMinTTL is the shortest TTL a key gets with Options.ExplicitTime. The
// instants then come from the caller (a test, the simulator) and need not advance with Redis's
// clock, which expires keys; this keeps state alive for the length of a test or simulation.
const ExplicitTimeMinTTL = 10 * time.Minute

// maxPrefixLen bounds Options.Prefix, so keys stay short.
const maxPrefixLen = 64

// schema is the version of the scripts' state layout, part of every key: a release that changes
// the layout bumps it, so it never reads state written by another layout.
const schema = "2"

// Options configures a Store. The zero value is the production setting: DefaultPrefix,
// DefaultTimeout and the decision time read from Redis.
type Options struct {
	// Prefix starts every key, e.g. to share a Redis with other programs; empty means
	// DefaultPrefix. At most 64 bytes, without braces, spaces or control characters.
	Prefix string
	// Timeout is the budget of one Take, on top of the caller's context (the earlier
	// deadline applies); zero means DefaultTimeout. It bounds how long a request waits on a
	// slow or unreachable Redis before the caller falls back. The client must honour context
	// deadlines (ContextTimeoutEnabled; NewClientFromURL sets it).
	Timeout time.Duration
	// ExplicitTime makes Take's now the decision time, as for limiter.MemoryStore: for tests
	// and the simulator, which replay instants. When false (production), the scripts read the
	// time from Redis (TIME) and ignore Take's now, so clients whose clocks disagree share one
	// limit exactly.
	ExplicitTime bool
}

// Validate reports whether the options can be used.
func (o Options) Validate() error {
	if len(o.Prefix) > maxPrefixLen {
		return fmt.Errorf("redisstore: prefix is %d bytes, more than %d", len(o.Prefix), maxPrefixLen)
	}
	for _, r := range o.Prefix {
		if r == '{' || r == '}' || r <= ' ' || r == 0x7f {
			return fmt.Errorf("redisstore: prefix %q contains %q; braces would change the cluster hash tag", o.Prefix, r)
		}
	}
	if o.Timeout < 0 {
		return fmt.Errorf("redisstore: negative timeout %s", o.Timeout)
	}
	return nil
}

// Store is a limiter.Store in Redis. It is safe for concurrent use.
type Store struct {
	client       redis.UniversalClient
	prefix       string
	timeout      time.Duration
	explicitTime bool
	minTTL       int64 // the request script's ARGV[2]
	// batch coalesces concurrent calls into pipelines of script calls (see batch.go), for a
	// single-node or Sentinel client; nil for a cluster client, or unbatched.
	batch *batcher
	// A cluster client's Store has one batcher per master, made at its first call (batcherFor).
	cluster *redis.ClusterClient
	load    atomic.Int64 // calls in do on the masters' batchers (see gather)
	mu      sync.Mutex
	nodes   map[string]*batcher // by master address
	closed  bool
	// refundFailures counts the refunds TakeRequest could not make (see RefundFailures).
	refundFailures atomic.Int64
	// holderID names the Store's Concurrency holdings in Redis (see concurrency.go).
	holderID int64
}

var _ limiter.Store = (*Store)(nil)

// New returns a Store deciding with client, which it does not own (close it yourself, after
// the Store). The Store runs batcher goroutines until Close: for a single-node or Sentinel
// client (*redis.Client) one batcher, for a cluster client (*redis.ClusterClient) one per
// master. It panics if opts fail Validate, a programming error; check options from
// configuration with Validate first.
func New(client redis.UniversalClient, opts Options) *Store {
	return newWithSenders(client, opts, senders)
}

// newWithSenders is New with n pipelines in flight at most per single-node batcher (a
// cluster's batchers have clusterPolicy's, see flush.go); 0 sends every call on its own. The benchmarks compare
// them.
func newWithSenders(client redis.UniversalClient, opts Options, n int) *Store {
	if err := opts.Validate(); err != nil {
		panic(err)
	}
	s := &Store{client: client, prefix: opts.Prefix, timeout: opts.Timeout, explicitTime: opts.ExplicitTime, holderID: newHolderID()}
	if s.prefix == "" {
		s.prefix = DefaultPrefix
	}
	if s.timeout == 0 {
		s.timeout = DefaultTimeout
	}
	if s.explicitTime {
		s.minTTL = ExplicitTimeMinTTL.Milliseconds()
	}
	if n > 0 {
		if cc, ok := client.(*redis.ClusterClient); ok {
			s.cluster, s.nodes = cc, map[string]*batcher{}
		} else {
			node, _ := client.(*redis.Client) // nil for other clients: no preload
			s.batch = newBatcher(client, node, n, s.minTTL)
			s.batch.rel = &releases{timeout: s.timeout}
		}
	}
	return s
}

// batcherFor returns the batcher that sends calls on key: the Store's, or on a cluster that of
// key's master (made at its first call); nil for an unbatched Store.
func (s *Store) batcherFor(ctx context.Context, key string) (*batcher, error) {
	if s.cluster == nil {
		return s.batch, nil
	}
	node, err := s.cluster.MasterForKey(ctx, key)
	if err != nil {
		return nil, err
	}
	addr := node.Options().Addr
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	b := s.nodes[addr]
	if b == nil {
		b = newNodeBatcher(s.cluster, node, s.minTTL, &s.load)
		s.nodes[addr] = b
	}
	return b, nil
}

// nowArg is the request script's ARGV[1] for a decision at now: empty (Redis's clock) unless
// Options.ExplicitTime, else now in ms, which must lie between the Unix epoch and
// limiter.MaxNowMs (else the error wraps limiter.ErrInvalidTime).
func (s *Store) nowArg(now time.Time) (string, error) {
	if !s.explicitTime {
		return "", nil
	}
	nowMs := now.UnixMilli()
	if nowMs < 0 || nowMs > limiter.MaxNowMs {
		return "", fmt.Errorf("%w: %s is outside the Unix epoch .. %d ms", limiter.ErrInvalidTime, now, limiter.MaxNowMs)
	}
	return strconv.FormatInt(nowMs, 10), nil
}

// run decides one group of the request script (see call in batch.go) and returns its
// requestFields integers per take, within ctx.
func (s *Store) run(ctx context.Context, nowArg string, keys []string, takes []scriptTake) ([]int64, error) {
	return s.runBy(ctx, time.Time{}, nowArg, keys, takes, nil)
}

// runBy is run within ctx and by deadline (zero: ctx's alone). A single node's batcher waits for
// the deadline without a context of its own (see batcher.do); a cluster's Store, or an
// unbatched one, puts it on ctx first, which finding the key's master needs too. With one set,
// the reply of a group of one take may be returned in it (see batcher.do).
func (s *Store) runBy(ctx context.Context, deadline time.Time, nowArg string, keys []string, takes []scriptTake, one *[requestFields]int64) ([]int64, error) {
	if s.batch == nil {
		var cancel context.CancelFunc
		ctx, cancel = withDeadline(ctx, deadline)
		defer cancel()
	}
	b, err := s.batcherFor(ctx, keys[0])
	if err != nil {
		return nil, err
	}
	var vals []int64
	if b != nil {
		g := group{keys: keys, takes: takes}
		vals, err = b.do(ctx, deadline, nowArg, &g, one)
	} else {
		vals, err = runDirect(ctx, s.client, nowArg, s.minTTL, keys, takes)
	}
	if err != nil {
		s.reloadCluster()
	}
	return vals, err
}

// runOne is runBy for a group of one take on one key (Take, Charge): on a single node's
// batcher without a slice for either.
func (s *Store) runOne(ctx context.Context, deadline time.Time, nowArg, key string, t scriptTake, one *[requestFields]int64) ([]int64, error) {
	if s.batch == nil {
		return s.runBy(ctx, deadline, nowArg, []string{key}, []scriptTake{t}, one)
	}
	g := group{key: key, take: t}
	return s.batch.do(ctx, deadline, nowArg, &g, one)
}

// Master is the address of the Redis Cluster master holding key's state under lim, by the
// client's current slot map; "" for a single-node or Sentinel client, or when the map is not
// loaded. Callers keep per-master state with it (the sidecar's breakers).
func (s *Store) Master(ctx context.Context, key string, lim limiter.Limit) string {
	if s.cluster == nil {
		return ""
	}
	node, err := s.cluster.MasterForKey(ctx, s.Keys(key, lim)[0])
	if err != nil {
		return ""
	}
	return node.Options().Addr
}

// reloadCluster has a cluster client reload the slots' masters after a failed call. go-redis
// reloads them on MOVED and ASK, and otherwise only every minute: after a master died and its
// replica took over, the dead address would keep failing that long. The reload runs in the
// background, at most one at a time with a 200 ms pause between (go-redis's LazyReload).
func (s *Store) reloadCluster() {
	if s.cluster != nil {
		s.cluster.ReloadState(context.Background())
	}
}

// runDirect is one call of the request script with one group, in a round trip of its own.
func runDirect(ctx context.Context, client redis.UniversalClient, nowArg string, minTTL int64, keys []string, takes []scriptTake) ([]int64, error) {
	return decodeOne(requestScript.Run(ctx, client, keys, oneCall(nowArg, takes).argv(minTTL)...), takes)
}

// oneCall is the script call of one group alone.
func oneCall(nowArg string, takes []scriptTake) *scriptCall {
	sc := &scriptCall{nowArg: nowArg}
	for i := range takes {
		sc.add(takes[i].key, &takes[i])
	}
	return sc
}

// decodeOne is the requestFields integers per take of the reply of a call of takes.
func decodeOne(cmd *redis.Cmd, takes []scriptTake) ([]int64, error) {
	vals, err := cmd.Int64Slice()
	if err != nil {
		return nil, err
	}
	var rp replay
	out, rest, err := decodeReplies(vals, takes, &rp)
	if err == nil && (len(rest) != 0 || rp.left != 0) {
		err = errReply
	}
	return out, err
}

// Close stops the Store's batcher and waits for its goroutines to return, at most
// Options.Timeout (a pipeline in flight runs out its budget). Takes waiting for a pipeline fail
// at once, like every later Take, with an *Error wrapping ErrClosed. Close does not close the
// client; close it after the Store. Close is idempotent and always returns nil.
func (s *Store) Close() error {
	if s.batch != nil {
		s.batch.close()
	}
	s.mu.Lock()
	s.closed = true
	nodes := s.nodes
	s.nodes = nil
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, b := range nodes {
		wg.Go(b.close)
	}
	wg.Wait()
	return nil
}

// Take implements limiter.Store: it decides whether n units fit under lim for key and records
// them when they do, as one group of the request script, coalesced with the other calls on the
// same master waiting at the moment (see batch.go); a denial still brings the state forward to
// the decision's instant, as in limiter.MemoryStore.Take. It returns when the reply arrives or
// the budget
// (Options.Timeout, or ctx's deadline if earlier) runs out, whichever is first.
//
// Without ExplicitTime, now is ignored; with it, now is the decision time, truncated to the
// millisecond, and must lie between the Unix epoch and limiter.MaxNowMs (else the error wraps
// limiter.ErrInvalidTime). An invalid lim or n < 1 gives an error wrapping
// limiter.ErrInvalidLimit. A Redis failure, including running past Options.Timeout, gives an
// *Error, which matches ErrUnavailable (and ErrTimeout for timeouts) under errors.Is.
func (s *Store) Take(ctx context.Context, key string, lim limiter.Limit, n int64, now time.Time) (limiter.Result, error) {
	nowArg, err := s.nowArg(now)
	if err != nil {
		return limiter.Result{}, err
	}
	if n < 1 {
		return limiter.Result{}, fmt.Errorf("%w: cost %d is below 1", limiter.ErrInvalidLimit, n)
	}
	if err := lim.Validate(); err != nil {
		return limiter.Result{}, fmt.Errorf("%w: %w", limiter.ErrInvalidLimit, err)
	}
	if lim.Algorithm == limiter.Concurrency {
		return limiter.Result{}, fmt.Errorf("%w: a Concurrency slot is taken by TakeRequest, with its holder", limiter.ErrInvalidLimit)
	}
	// The budget as a deadline, not a context: see runBy.
	start := time.Now()
	deadline := start.Add(s.timeout)
	// A group of one take that is committed even when denied (see lua/request.lua).
	var one [requestFields]int64
	vals, err := s.runOne(ctx, deadline, nowArg, s.key(key, lim), s.aloneTake(key, lim, n, now, kindEnforce, 0), &one)
	if err != nil {
		return limiter.Result{}, s.wrapBy(ctx, deadline, err, time.Since(start))
	}
	return resultFrom(vals, lim.Capacity()), nil
}

var _ limiter.Charger = (*Store)(nil)

// Charge implements limiter.Charger: a late charge of n units, as one group of the request
// script (a take of kind kindCharge, lua/request.lua), coalesced like Take. now, lim, n and
// the errors are as for Take; lim must be LateChargeable.
func (s *Store) Charge(ctx context.Context, key string, lim limiter.Limit, n int64, now time.Time) (limiter.Result, error) {
	nowArg, err := s.nowArg(now)
	if err != nil {
		return limiter.Result{}, err
	}
	if err := limiter.ValidateCharge(lim, n); err != nil {
		return limiter.Result{}, err
	}
	// The budget as a deadline, not a context: see runBy.
	start := time.Now()
	deadline := start.Add(s.timeout)
	var one [requestFields]int64
	vals, err := s.runOne(ctx, deadline, nowArg, s.key(key, lim), s.aloneTake(key, lim, n, now, kindCharge, 0), &one)
	if err != nil {
		return limiter.Result{}, s.wrapBy(ctx, deadline, err, time.Since(start))
	}
	return resultFrom(vals, lim.Capacity()), nil
}

// alone is the one take of a Take (kind kindEnforce), Charge or Issue: a group of its own,
// committed even when denied.
func (s *Store) alone(key string, lim limiter.Limit, n int64, now time.Time, kind, flags int64) []scriptTake {
	return []scriptTake{s.aloneTake(key, lim, n, now, kind, flags)}
}

// aloneTake is alone's take.
func (s *Store) aloneTake(key string, lim limiter.Limit, n int64, now time.Time, kind, flags int64) scriptTake {
	t := takeOf(0, &limiter.Take{Key: key, Limit: lim, N: n}, now)
	t.flags = kind | flagAlone | flags
	return t
}

// State is what Inspect reports of a key.
type State struct {
	// Found is false for a key Redis holds no state for: never seen, expired or reset.
	Found bool
	// Result is the key's state now: Remaining, ResetAfter; for a TokenBucket in debt,
	// Allowed is false and RetryAfter is when the debt is paid. (A check of cost 0 through the
	// request script: it changes nothing.)
	Result limiter.Result
	// Debt is the whole tokens a TokenBucket owes after a late charge, 0 otherwise.
	Debt int64
}

// Inspect reports key's state under lim at Redis's clock (or now, with ExplicitTime), charging
// nothing: a check through the request script, the same transitions that decide requests.
func (s *Store) Inspect(ctx context.Context, key string, lim limiter.Limit, now time.Time) (State, error) {
	if err := lim.Validate(); err != nil {
		return State{}, fmt.Errorf("%w: %w", limiter.ErrInvalidLimit, err)
	}
	rk := s.Keys(key, lim)
	n, err := s.client.Exists(ctx, rk[0]).Result()
	if err != nil || n == 0 {
		return State{}, err
	}
	nowArg, err := s.nowArg(now)
	if err != nil {
		return State{}, err
	}
	t := limiter.Take{Key: key, Limit: lim, N: 0, Check: true} // cost 0: the state as it is
	check := takeOf(0, &t, now)
	check.flags |= flagEnd | flagState
	vals, err := runDirect(ctx, s.client, nowArg, s.minTTL, rk, []scriptTake{check})
	if err != nil {
		return State{}, err
	}
	st := State{Found: true, Result: resultFrom(vals, lim.Capacity())}
	if lim.Algorithm == limiter.TokenBucket && !st.Result.Allowed {
		st.Debt = limiter.Debt(lim, vals[7]) // a denied check leaves the content as refilled
	}
	return st, nil
}

// Reset deletes key's state under lim, as if it had never been seen; false when there was none.
func (s *Store) Reset(ctx context.Context, key string, lim limiter.Limit) (bool, error) {
	n, err := s.client.Del(ctx, s.Keys(key, lim)...).Result()
	return n > 0, err
}

// reasons maps the scripts' reason codes to limiter.Reason.
var reasons = map[int64]limiter.Reason{
	0: "",
	1: limiter.ReasonLimited,
	2: limiter.ReasonCostExceedsCapacity,
	3: limiter.ReasonDelayTooLong,
}

// Keys returns the Redis keys that hold key's state under lim, the script's KEYS (one, in this
// layout): for inspecting state (MEMORY USAGE, TTL) and in tests. See the package comment.
func (s *Store) Keys(key string, lim limiter.Limit) []string {
	return []string{s.key(key, lim)}
}

// key is Keys' one key.
func (s *Store) key(key string, lim limiter.Limit) string {
	// The hashed bytes on the stack for the usual key (no allocation but the key's string).
	var in [128]byte
	tag := algTag(lim)
	w := lim.WindowMs()
	if lim.Algorithm == limiter.Concurrency {
		w = 0 // the holdings' expiry: a key whose expiry is edited keeps its holdings
	}
	b := append(in[:0], tag...)
	b = strconv.AppendInt(b, w, 10)
	b = append(b, 0)
	b = append(b, key...)
	sum := sha256.Sum256(b)
	var id [idLen]byte
	base64.RawURLEncoding.Encode(id[:], sum[:idBytes])
	var k strings.Builder
	k.Grow(len(s.prefix) + 2 + idLen + 2 + len(schema))
	k.WriteString(s.prefix)
	k.WriteString(":{")
	k.Write(id[:])
	k.WriteString("}:")
	k.WriteString(schema)
	return k.String()
}

// algTag names lim's algorithm and leaky mode in the hash of its key.
func algTag(lim limiter.Limit) string {
	switch lim.Algorithm {
	case limiter.FixedWindow:
		if lim.Period != "" {
			// the zone's name, not its offsets: a tz-data update keeps the counter
			return "cal/" + string(lim.Period) + "/" + lim.Zone.String()
		}
		return "fw"
	case limiter.SlidingWindowLog:
		return "swl"
	case limiter.SlidingWindowCounter:
		return "swc"
	case limiter.TokenBucket:
		return "tb"
	case limiter.Concurrency:
		return "conc"
	default: // LeakyBucket; Validate admits nothing else
		if lim.Mode == limiter.Queue {
			return "lbq"
		}
		return "lbm"
	}
}

// idBytes is how much of the SHA-256 names a limiter (96 bits: a collision among 10^12 limiters
// has a probability of about 10^-5), idLen its length in base64url.
const (
	idBytes = 12
	idLen   = 16
)

// ErrUnavailable matches (errors.Is) every error of a Take that Redis could not answer: the
// server is down, unreachable, paused, too slow for Options.Timeout, out of memory, or replied
// with an error, or the Store was closed. A caller falls back on it (e.g. to a local store).
var ErrUnavailable = errors.New("redis unavailable")

// ErrTimeout matches the subset of ErrUnavailable where the call ran out of time (Options.Timeout
// or the caller's deadline) rather than failing outright.
var ErrTimeout = errors.New("redis timed out")

// Error is a failed Take against Redis. errors.Is(err, ErrUnavailable) holds for every *Error,
// errors.Is(err, ErrTimeout) when Timeout is set, and errors.Is/As also see the underlying
// go-redis or network error.
type Error struct {
	// Timeout says the call ran out of time rather than failing outright.
	Timeout bool
	// Elapsed is how long the call took before it failed.
	Elapsed time.Duration
	// Err is the underlying error.
	Err error
}

func (e *Error) Error() string {
	kind := "unavailable"
	if e.Timeout {
		kind = "timed out"
	}
	return fmt.Sprintf("redisstore: redis %s after %s: %v", kind, e.Elapsed.Round(time.Microsecond), e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Is matches ErrUnavailable always and ErrTimeout for timeouts.
func (e *Error) Is(target error) bool {
	return target == ErrUnavailable || (target == ErrTimeout && e.Timeout)
}

// wrap classifies err from a script call made with ctx (already carrying the budget). A caller
// who canceled its own context gets the context's error back unwrapped by *Error: that is not
// Redis failing.
func (s *Store) wrap(ctx context.Context, err error, elapsed time.Duration) error {
	return s.wrapBy(ctx, time.Time{}, err, elapsed)
}

// wrapBy is wrap for a call made with ctx by deadline (zero: none but ctx's): a call that
// failed once deadline had passed ran out of time, as one whose context had run out.
func (s *Store) wrapBy(ctx context.Context, deadline time.Time, err error, elapsed time.Duration) error {
	if errors.Is(err, context.Canceled) && ctx.Err() == context.Canceled {
		return fmt.Errorf("redisstore: %w", err)
	}
	var ne interface{ Timeout() bool }
	timeout := errors.Is(err, context.DeadlineExceeded) || ctx.Err() == context.DeadlineExceeded ||
		(!deadline.IsZero() && !time.Now().Before(deadline)) || (errors.As(err, &ne) && ne.Timeout())
	return &Error{Timeout: timeout, Elapsed: elapsed, Err: err}
}
