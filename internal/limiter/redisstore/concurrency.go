package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/limiter"
)

// Concurrency slots in Redis. A Concurrency key is a sorted set of holdings: the member
// "<holder id>:<holding>" names one admitted request (the Store's holder id, drawn at random
// when it is made, and the holding number of its limiter.Take), scored by the instant (Redis's
// clock, ms) it expires. The request script (lua/request.lua) drops the expired holdings and
// admits a take while fewer than Limit remain; Release removes one holding; Renew pushes back
// the expiry of those its holder still holds (and holds again any that Redis lost). So a holder that dies holds nothing once Window has passed
// since it last renewed, and a release repeated (or sent after the holding expired) removes
// nothing more.

// newHolderID draws a Store's holder id: 52 random bits, below 2^53 so that the script's doubles
// hold it exactly. Two Stores share an id with a probability of about n^2 / 2^53 for n Stores.
func newHolderID() int64 {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return int64(binary.LittleEndian.Uint64(b[:]) >> 12)
}

// member is the sorted set's member for holding h of the Store.
func (s *Store) member(h int64) string {
	return strconv.FormatInt(s.holderID, 10) + ":" + strconv.FormatInt(h, 10)
}

var _ limiter.SlotStore = (*Store)(nil)

// Release implements limiter.SlotStore: it removes holding holder of key under lim (ZREM),
// within Options.Timeout. A holding already gone (released, expired) is no error. Concurrent
// releases share round trips: see releases.
func (s *Store) Release(ctx context.Context, key string, lim limiter.Limit, holder int64) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	start := time.Now()
	rk := s.Keys(key, lim)[0]
	var err error
	if s.batch == nil { // a cluster (its batchers are per master) or an unbatched Store
		err = s.roundTrip(ctx, rk, func() error { return s.client.ZRem(ctx, rk, s.member(holder)).Err() })
	} else {
		err = s.rel.release(ctx, s, rk, s.member(holder))
	}
	if err != nil {
		return s.wrap(ctx, err, time.Since(start))
	}
	return nil
}

// releases coalesces a single-node Store's concurrent Releases into pipelines of ZREM, one
// round trip each: every request of a Concurrency rule ends in a release, and on its own round
// trip each would cost Redis and the sidecar more than the request's decision, which the
// batcher shares with the others in flight (bench/concurrency.sh). A release that finds no
// pipeline of releases being sent starts one, which sends every release queued by the time
// it goes, then those queued meanwhile, until none is left.
type releases struct {
	mu      sync.Mutex
	sending bool
	queue   []*pendingRelease
}

// pendingRelease is one queued ZREM and where its outcome goes (buffered: the sender never
// waits for a caller that gave up).
type pendingRelease struct {
	key, member string
	done        chan error
}

// release queues a ZREM of member of key and waits for its outcome, or for ctx.
func (r *releases) release(ctx context.Context, s *Store, key, member string) error {
	p := &pendingRelease{key: key, member: member, done: make(chan error, 1)}
	r.mu.Lock()
	r.queue = append(r.queue, p)
	start := !r.sending
	r.sending = true
	r.mu.Unlock()
	if start {
		go r.send(s) //nolint:gosec // the sender serves every release queued, not this caller alone: it outlives ctx
	}
	select {
	case err := <-p.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// send sends the queued releases, a pipeline of at most queueLen at a time, until the queue
// is empty.
func (r *releases) send(s *Store) {
	for {
		r.mu.Lock()
		batch := r.queue[:min(len(r.queue), queueLen)]
		if r.queue = r.queue[len(batch):]; len(r.queue) == 0 {
			r.queue = nil
		}
		if len(batch) == 0 {
			r.sending = false
			r.mu.Unlock()
			return
		}
		r.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
		cmds := make([]*redis.IntCmd, len(batch))
		err := s.roundTrip(ctx, batch[0].key, func() error {
			_, err := s.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
				for i, p := range batch {
					cmds[i] = pipe.ZRem(ctx, p.key, p.member)
				}
				return nil
			})
			return err
		})
		cancel()
		for i, p := range batch {
			e := err
			if cmds[i] != nil {
				e = cmds[i].Err()
			}
			p.done <- e
		}
	}
}

// Renew makes the holdings of key under lim expire lim.Window after now (Redis's clock unless
// ExplicitTime), holding again those Redis no longer had, whether or not they fit: their
// requests still run (the holding expired while its holder was cut off from Redis, Redis
// restarted empty, or it was taken on a local share while Redis could not decide). It
// returns how many Redis did not hold. A holding released while its renewal was on the way
// is held again by it: its holder releases it once more. Within Options.Timeout.
func (s *Store) Renew(ctx context.Context, key string, lim limiter.Limit, holders []int64, now time.Time) (int, error) {
	if len(holders) == 0 {
		return 0, nil
	}
	nowArg, err := s.nowArg(now)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	start := time.Now()
	rk := s.Keys(key, lim)[0]
	args := make([]any, 0, 3+len(holders))
	args = append(args, nowArg, lim.WindowMs(), s.minTTL)
	for _, h := range holders {
		args = append(args, s.member(h))
	}
	var n int64
	err = s.roundTrip(ctx, rk, func() error {
		var err error
		n, err = evalPiped(ctx, s.client, slotsScript, []string{rk}, args...).Int64()
		return err
	})
	if err != nil {
		return 0, s.wrap(ctx, err, time.Since(start))
	}
	return int(n), nil
}

// Holding is one holding of a Concurrency key: its holder's id and number, and when it
// expires unless renewed (Redis's clock).
type Holding struct {
	Holder, Number int64
	Expires        time.Time
}

// Holdings lists key's holdings under lim, expired ones included until a decision or a renewal
// drops them (compare Expires with Redis's TIME), for inspection (sluicectl, tests).
func (s *Store) Holdings(ctx context.Context, key string, lim limiter.Limit) ([]Holding, error) {
	zs, err := s.client.ZRangeWithScores(ctx, s.Keys(key, lim)[0], 0, -1).Result()
	if err != nil {
		return nil, err
	}
	out := make([]Holding, 0, len(zs))
	for _, z := range zs {
		m, _ := z.Member.(string)
		id, num, ok := strings.Cut(m, ":")
		if !ok {
			return nil, fmt.Errorf("redisstore: holding %q is not <holder>:<number>", m)
		}
		h := Holding{Expires: time.UnixMilli(int64(z.Score))}
		h.Holder, _ = strconv.ParseInt(id, 10, 64)
		h.Number, _ = strconv.ParseInt(num, 10, 64)
		out = append(out, h)
	}
	return out, nil
}

// HolderID is the Store's holder id, the first part of its holdings' members.
func (s *Store) HolderID() int64 { return s.holderID }
