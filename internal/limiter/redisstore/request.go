package redisstore

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/limiter"
)

var _ limiter.RequestStore = (*Store)(nil)

// requestFields is how many integers a take's decision has once decodeReplies has expanded the
// request script's compact reply: allowed 0/1, remaining, resetAfter ms, retryAfter ms (-1:
// never), delay ms (a lease's units issued), reason, at and content (see lua/request.lua).
const requestFields = 8

// The request script's arguments (lua/request.lua): a take is one integer, its flags f plus
// its key's and limit's indices and its cost packed above them, unless they do not fit.
const (
	kindEnforce     = 0 // an enforced take
	kindShadow      = 1 // a take that does not deny its request
	kindCharge      = 2 // a late charge (limiter.Charger)
	kindCheck       = 3 // denies its request, changes nothing
	kindShadowCheck = 4
	kindLease       = 5 // a lease of up to cost units (limiter.Lessor)
	kindUsage       = 6 // usage to add, up to cost units (AddUsage)

	flagState = 8  // the reply carries the take's at and content
	flagEnd   = 16 // the take ends its request
	flagAlone = 32 // a group of its own, committed even when denied: Take, Charge, Issue
	flagBig   = 64 // key, limit and cost follow as three arguments of their own

	packedIndices = 512     // keys and limits a packed take can name
	packedCost    = 1 << 27 // costs below it pack (above limiter.MaxLimit + 1)
	maxExact      = 1 << 53 // the largest integer the script's doubles hold exactly
)

// scriptLimit is a Limit as the request script's ARGV carries it: algorithm (algCode), L, W,
// cap and M; a calendar window's W and M are the end and start of now's window.
type scriptLimit [5]int64

// scriptTake is one take of a call of the request script.
type scriptTake struct {
	key   int // index into the call's keys, from 0
	lim   scriptLimit
	cost  int64
	flags int64 // a kind and flags, as above
}

// scriptCall is the ARGV of one call of the request script, built take by take; keys are
// named by their indices into the call's KEYS, from 0.
type scriptCall struct {
	nowArg string
	kinds  int64 // the sum of 2^kind over the kinds of take in the call
	limits []scriptLimit
	takes  []int64 // the takes, encoded
	// last is the last take's encoded integer when it is a Take, Charge or Issue that another
	// equal to it may repeat (see add), else 0; repeat is the index of the repeat count that
	// follows it in takes, or -1.
	last   int64
	repeat int
}

// add appends take t, naming its key by index key (from 0).
func (sc *scriptCall) add(key int, t *scriptTake) {
	l := slices.Index(sc.limits, t.lim)
	if l < 0 {
		l = len(sc.limits)
		sc.limits = append(sc.limits, t.lim)
	}
	// A cost the script cannot tell from a smaller one is clamped, which keeps it exact in the
	// script's doubles and usually packable: a take's above max(L, cap) is denied whatever it
	// is, a lease issues at most cap, usage adds at most max(L, cap), and a late charge of 2^53
	// units already drains any bucket to limiter.MaxDebt.
	c := t.cost
	switch t.flags & 7 {
	case kindCharge:
		c = min(c, maxExact)
	case kindLease:
		c = min(c, t.lim[3])
	case kindUsage: // no state holds more than max(L, cap)
		c = min(c, max(t.lim[1], t.lim[3]))
	default:
		c = min(c, max(t.lim[1], t.lim[3])+1)
	}
	if t.lim[0] == algConcurrency {
		c = t.cost // the holding's number, not a cost
	}
	sc.kinds |= 1 << (t.flags & 7)
	if key < packedIndices && l < packedIndices && c >= 0 && c < packedCost {
		v := t.flags + 128*(int64(key)+packedIndices*(int64(l)+packedIndices*c))
		switch {
		case sc.last == 0 || v != sc.last:
			sc.takes = append(sc.takes, v)
			sc.last, sc.repeat = 0, -1
			if t.flags&flagAlone != 0 {
				sc.last = v
			}
		case sc.repeat < 0: // a hot key's batch: -r stands for r more takes equal to the last
			sc.repeat = len(sc.takes)
			sc.takes = append(sc.takes, -1)
		default:
			sc.takes[sc.repeat]--
		}
		return
	}
	sc.takes = append(sc.takes, t.flags|flagBig, int64(key)+1, int64(l)+1, c)
	sc.last = 0
}

// argv is the call's ARGV: now, then the numbers as little-endian doubles (see
// lua/request.lua), every one an integer below 2^53 in magnitude.
func (sc *scriptCall) argv(minTTL int64) []any {
	nums := make([]byte, 0, 8*(3+5*len(sc.limits)+len(sc.takes)))
	put := func(v int64) { nums = binary.LittleEndian.AppendUint64(nums, math.Float64bits(float64(v))) }
	put(minTTL)
	put(sc.kinds)
	put(int64(len(sc.limits)))
	for _, l := range sc.limits {
		for _, v := range l {
			put(v)
		}
	}
	for _, t := range sc.takes {
		put(t)
	}
	return []any{sc.nowArg, nums}
}

// errReply is a reply of the request script that does not fit its takes.
var errReply = errors.New("request script returned a reply that does not fit its takes")

// decodeReplies expands the replies of takes at the start of vals, the request script's
// compact form, into requestFields integers each, and returns the rest of vals. rp carries a
// replayed run from one call's takes to the next call's (a script call's groups are decoded in
// order, sharing one replay).
func decodeReplies(vals []int64, takes []scriptTake, rp *replay) (out, rest []int64, err error) {
	out = make([]int64, requestFields*len(takes))
	rest, err = decodeInto(out, vals, takes, rp)
	if err != nil {
		return nil, nil, err
	}
	return out, rest, nil
}

// decodeInto is decodeReplies into out, requestFields integers per take, which it overwrites
// whole.
func decodeInto(out, vals []int64, takes []scriptTake, rp *replay) (rest []int64, err error) {
	clear(out)
	for i := range takes {
		o := out[requestFields*i:]
		if rp.left == 0 && len(vals) >= 5 && vals[0] < 0 { // a run the script left to replay
			rp.left, rp.at, rp.s = -vals[0], vals[1], [3]int64{vals[2], vals[3], vals[4]}
			vals = vals[5:]
		}
		if rp.left > 0 {
			if !rp.next(&takes[i], o) {
				return nil, errReply
			}
			continue
		}
		if len(vals) < 1 || vals[0] < 0 {
			return nil, errReply
		}
		r1 := vals[0]
		o[0], o[1], o[2], o[5] = r1&1, r1>>6&(1<<27-1), r1>>33, r1>>3&3
		vals = vals[1:]
		if r1&32 != 0 {
			if len(vals) < 1 {
				return nil, errReply
			}
			o[2] = vals[0]
			vals = vals[1:]
		}
		if r1&2 != 0 {
			if len(vals) < 1 {
				return nil, errReply
			}
			if r1&1 == 1 {
				o[4] = vals[0]
			} else {
				o[3] = vals[0]
			}
			vals = vals[1:]
		}
		if r1&4 != 0 {
			if len(vals) < 2 {
				return nil, errReply
			}
			o[6], o[7] = vals[0], vals[1]
			vals = vals[2:]
		}
	}
	return vals, nil
}

// replay is a run of admitted repeats of one Take that the request script charged as one take
// of their summed cost and left to the decoder to reply to (lua/request.lua): left takes, each
// decided by package limiter's transition, the one limiter.MemoryStore runs, on the state s
// that the take before it left at instant at. So each gets what it would have got decided on
// its own in the script.
type replay struct {
	left int64
	at   int64
	s    [3]int64
}

// next decides the run's next take, t, into o, and reports whether it was admitted, as every
// take the script charged must be.
func (rp *replay) next(t *scriptTake, o []int64) bool {
	rp.left--
	l, c, at := &t.lim, t.cost, rp.at
	lim := limiter.Limit{Limit: l[1], Window: time.Duration(l[2]) * time.Millisecond, Burst: l[3]}
	var r limiter.Result
	var content int64
	switch l[0] {
	case 1:
		lim.Algorithm = limiter.FixedWindow
		st := limiter.FixedWindowState{Window: rp.s[0], Count: rp.s[1]}
		r = st.Take(lim, c, at)
		rp.s = [3]int64{st.Window, st.Count}
	case 3:
		lim.Algorithm = limiter.SlidingWindowCounter
		st := limiter.SlidingWindowCounterState{Window: rp.s[0], Prev: rp.s[1], Curr: rp.s[2]}
		r = st.Take(lim, c, at)
		rp.s = [3]int64{st.Window, st.Prev, st.Curr}
	case 4:
		lim.Algorithm = limiter.TokenBucket
		st := limiter.TokenBucketState{Tokens: rp.s[0], Last: rp.s[1], Started: true}
		r = st.Take(lim, c, at)
		rp.s, content = [3]int64{st.Tokens, st.Last}, st.Tokens
	case 5:
		lim.Algorithm = limiter.LeakyBucket
		st := limiter.LeakyBucketState{Level: rp.s[0], Last: rp.s[1]}
		r = st.TakeMeter(lim, c, at)
		rp.s, content = [3]int64{st.Level, st.Last}, st.Level
	case 7: // the calendar window's end and start are W and M (see takeOf)
		lim.Algorithm = limiter.FixedWindow
		st := limiter.CalendarWindowState{Start: rp.s[0], End: rp.s[1], Count: rp.s[2]}
		r = st.Take(lim, c, at, l[4], l[2])
		rp.s = [3]int64{st.Start, st.End, st.Count}
	default:
		return false
	}
	o[0], o[1], o[2], o[6], o[7] = 1, r.Remaining, r.ResetAfter.Milliseconds(), at, content
	return r.Allowed
}

// TakeRequest implements limiter.RequestStore: a request is admitted only when every enforced
// take is allowed, and only then is any take charged. now, the costs, the Limits, the budget
// and the errors are as for Take; a request whose decision failed charges nothing (but see
// Redis Cluster below).
//
// With a single-node or Sentinel client the request is one call of one script over all its
// keys (lua/request.lua, sent in a pipeline with the other calls waiting at the moment), which
// runs the same integer transitions as Take, decides every take and writes the states of an
// admitted request, or nothing: the unit is atomic, as in limiter.MemoryStore, and decisions
// equal MemoryStore.TakeRequest's step for step (TestDifferentialTakeRequest).
//
// With a Redis Cluster client the keys of different rules live in different slots, which one
// script cannot span, so a request is a reservation and a refund. Each rule's takes are
// decided and charged by their own script call, all calls in parallel; if an enforced take is
// denied (or a call fails), the charges of every call that made some are given back by the
// inverse transition (lua/refund.lua): tokens returned up to the bucket's capacity, a leaky
// level lowered down to 0, a window's count decremented in the window it was charged in, the
// units removed from the log entry they were added to. What this guarantees, per key:
//
//   - Nothing is ever over-admitted. A refund gives back at most what the request took, never
//     leaves a bucket above its capacity or a count or level below 0, and never gives back
//     what the state would have lost without the charge (a bucket's refill beyond its
//     capacity, a level's leak below 0, while other requests moved the state on between the
//     reservation and the refund): the state after a refund is never more permissive than if
//     the charge had not been made.
//   - Between a reservation and its refund (one round trip) the reservation holds quota that
//     the request does not use: a request on the same key decided in that interval can be
//     denied by it. So at most as many requests as are in flight on those keys at once can be
//     denied by reservations later refunded; with sequential requests at explicit instants,
//     none, and decisions equal MemoryStore.TakeRequest's (TestDifferentialTakeRequest).
//   - A refund is exact unless the state has moved on: the charge's window has rolled
//     (FixedWindow, or twice for SlidingWindowCounter) or its log entry has expired, so there
//     is nothing left to give back; or another request refilled (leaked) the bucket in
//     between to within the charge of its capacity (of 0), and the refund gives back only
//     what the bucket could not have lost. A refund that fails (its master unreachable)
//     leaves the charge in place, erring towards denial; RefundFailures counts them. So does
//     a reservation whose call failed or timed out (the request's error): it may still run
//     on its master, and nothing is known to give back (TestTakeRequestClusterFailure).
//   - Instants that go backwards between requests can make a refunded state differ from the
//     one before the reservation (a bucket is brought forward to the reservation's instant).
//
// The per-call instant of a cluster request is each master's clock (by default); with
// explicit time, now.
func (s *Store) TakeRequest(ctx context.Context, takes []limiter.Take, now time.Time, res []limiter.Result) (bool, error) {
	nowArg, err := s.nowArg(now)
	if err != nil {
		return false, err
	}
	if err := limiter.ValidateRequest(takes, res); err != nil {
		return false, err
	}
	if len(takes) == 0 {
		return true, nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	start := time.Now()

	// The Redis keys, each once, and the takes of each.
	keys := make([]string, 0, len(takes))
	keyOf := make([]int, len(takes))
	for i := range takes {
		rk := s.Keys(takes[i].Key, takes[i].Limit)[0]
		j := slices.Index(keys, rk)
		if j < 0 {
			j = len(keys)
			keys = append(keys, rk)
		}
		keyOf[i] = j
	}
	if _, single := s.client.(*redis.Client); single || len(keys) == 1 {
		st := make([]scriptTake, len(takes))
		for i := range takes {
			st[i] = s.takeOf(keyOf[i], &takes[i], now)
		}
		st[len(st)-1].flags |= flagEnd
		if _, _, err := s.runRequest(ctx, nowArg, keys, st, takes, res); err != nil {
			return false, s.wrap(ctx, err, time.Since(start))
		}
		return limiter.Admitted(takes, res), nil
	}
	return s.reserve(ctx, start, keys, keyOf, takes, now, nowArg, res)
}

// takeOf is take t of a request for the request script, its key keys[k]: enforced, shadow or
// a check as t says. A calendar window's W and M carry the end and start of now's window (the
// caller's clock, in the limit's time zone: the script has no time-zone database).
func takeOf(k int, t *limiter.Take, now time.Time) scriptTake {
	lim := &t.Limit
	kind := int64(kindEnforce)
	switch {
	case t.Check && t.Shadow:
		kind = kindShadowCheck
	case t.Check:
		kind = kindCheck
	case t.Shadow:
		kind = kindShadow
	}
	w, m := lim.WindowMs(), lim.MaxDelay.Milliseconds()
	if lim.Period != "" {
		m, w = lim.CalendarBounds(now.UnixMilli())
	}
	return scriptTake{key: k, lim: scriptLimit{int64(algCode(lim)), lim.Limit, w, lim.Capacity(), m}, cost: t.N, flags: kind}
}

// takeOf is takeOf with, for a Concurrency take, the Store's holder id in place of M and the
// holding's number in place of the cost (see lua/request.lua).
func (s *Store) takeOf(k int, t *limiter.Take, now time.Time) scriptTake {
	st := takeOf(k, t, now)
	if st.lim[0] == algConcurrency {
		st.lim[4], st.cost = s.holderID, t.Holder
	}
	return st
}

// runRequest runs the request script on one group of takes (st, the script's form of takes)
// and fills res (in the order of takes, the script's replies) from its reply. It returns the
// at and content of the last take that is not a check (flagState), what a refund of the call's
// charges needs.
func (s *Store) runRequest(ctx context.Context, nowArg string, keys []string, st []scriptTake, takes []limiter.Take, res []limiter.Result) (at, content int64, err error) {
	vals, err := s.run(ctx, nowArg, keys, st)
	if err != nil {
		return 0, 0, err
	}
	for i := range takes {
		v := vals[requestFields*i:]
		res[i] = resultFrom(v, takes[i].Limit.Capacity())
		if !takes[i].Check { // a check's content is what the state would have been
			at, content = v[6], v[7]
		}
	}
	return at, content, nil
}

// resultFrom is a take's Result from the script's integers, as in Take.
func resultFrom(v []int64, capacity int64) limiter.Result {
	r := limiter.Result{
		Allowed:    v[0] == 1,
		Limit:      capacity,
		Remaining:  v[1],
		ResetAfter: limiter.DurationFromMs(v[2]),
		RetryAfter: limiter.DurationFromMs(v[3]),
		Delay:      limiter.DurationFromMs(v[4]),
		Reason:     reasons[v[5]],
	}
	if v[3] < 0 {
		r.RetryAfter = limiter.NeverRetry
	}
	return r
}

// reserve is TakeRequest on Redis Cluster: one call per key, in parallel, each deciding and
// charging that key's takes as a request of its own; then, unless the request is admitted, one
// refund per call that charged something.
func (s *Store) reserve(ctx context.Context, start time.Time, keys []string, keyOf []int, takes []limiter.Take, now time.Time, nowArg string, res []limiter.Result) (bool, error) {
	type call struct {
		takes       []int // indices into takes
		at, content int64 // for the refund
		err         error
	}
	calls := make([]call, len(keys))
	for i, k := range keyOf {
		calls[k].takes = append(calls[k].takes, i)
	}
	var wg sync.WaitGroup
	for k := range calls {
		c := &calls[k]
		wg.Go(func() {
			st := make([]scriptTake, len(c.takes))
			sub := make([]limiter.Take, len(c.takes))
			for j, i := range c.takes {
				sub[j] = takes[i]
				st[j] = s.takeOf(0, &takes[i], now)
				st[j].flags |= flagState
			}
			st[len(st)-1].flags |= flagEnd
			out := make([]limiter.Result, len(sub))
			c.at, c.content, c.err = s.runRequest(ctx, nowArg, keys[k:k+1], st, sub, out)
			if c.err == nil {
				for j, i := range c.takes {
					res[i] = out[j]
				}
			}
		})
	}
	wg.Wait()

	var err error
	for k := range calls {
		if calls[k].err != nil {
			err = s.wrap(ctx, calls[k].err, time.Since(start))
			break
		}
	}
	if err == nil && limiter.Admitted(takes, res) {
		return true, nil
	}
	// Give back what the calls that committed charged. The refunds have a budget of their own
	// and are sent even when the caller has gone: a charge left in place denies later requests.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.timeout)
	defer cancel()
	for k := range calls {
		c := &calls[k]
		if c.err != nil {
			continue
		}
		var units int64
		committed := true
		for _, i := range c.takes {
			if res[i].Allowed {
				if !takes[i].Check {
					units += takes[i].N
				}
			} else if !takes[i].Shadow {
				committed = false // the script charged nothing
			}
		}
		if !committed || units == 0 {
			continue
		}
		lim := &takes[c.takes[len(c.takes)-1]].Limit // the content is under its capacity (a key has one limit)
		if lim.Algorithm == limiter.Concurrency {    // the holdings taken, removed
			wg.Go(func() {
				for _, i := range c.takes {
					if res[i].Allowed && s.Release(rctx, takes[i].Key, *lim, takes[i].Holder) != nil {
						s.refundFailures.Add(1) // the holding expires after Window
					}
				}
			})
			continue
		}
		wg.Go(func() {
			// On the key's master's connections, like every round trip (see conns.go).
			err := s.roundTrip(rctx, keys[k], func() error {
				return evalPiped(rctx, s.client, refundScript, keys[k:k+1], s.minTTL, algCode(lim), lim.Limit,
					lim.WindowMs(), lim.Capacity(), units, c.at, c.content).Err()
			})
			if err != nil {
				s.refundFailures.Add(1)
			}
		})
	}
	wg.Wait()
	return false, err
}

// roundTrip runs fn as a round trip to key's node, on the connections of its batcher (directly
// for an unbatched Store).
func (s *Store) roundTrip(ctx context.Context, key string, fn func() error) error {
	b, err := s.batcherFor(ctx, key)
	if err != nil {
		return err
	}
	if b == nil {
		return fn()
	}
	var ferr error
	if err := b.roundTrip(ctx, func() { ferr = fn() }); err != nil {
		return err
	}
	return ferr
}

// RefundFailures is the number of refunds that failed since the Store was created: charges of
// denied Redis Cluster requests left in place (see TakeRequest).
func (s *Store) RefundFailures() int64 { return s.refundFailures.Load() }

// algCode is the scripts' number for lim's algorithm and mode.
func algCode(lim *limiter.Limit) int {
	switch lim.Algorithm {
	case limiter.FixedWindow:
		if lim.Period != "" {
			return 7
		}
		return 1
	case limiter.SlidingWindowLog:
		return 2
	case limiter.SlidingWindowCounter:
		return 3
	case limiter.TokenBucket:
		return 4
	case limiter.Concurrency:
		return algConcurrency
	default: // LeakyBucket; Validate admits nothing else
		if lim.Mode == limiter.Queue {
			return 6
		}
		return 5
	}
}

// algConcurrency is the scripts' number for Concurrency.
const algConcurrency = 8
