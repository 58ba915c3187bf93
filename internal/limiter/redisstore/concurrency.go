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
// within Options.Timeout, and waits for Redis's answer. A holding already gone (released,
// expired) is no error. A single-node Store's releases ride on its batcher's pipelines (see
// releases); ReleaseAsync does not wait.
func (s *Store) Release(ctx context.Context, key string, lim limiter.Limit, holder int64) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	start := time.Now()
	rk := s.Keys(key, lim)[0]
	var err error
	if s.batch == nil { // a cluster (its batchers are per master) or an unbatched Store
		err = s.roundTrip(ctx, rk, func() error { return s.client.ZRem(ctx, rk, s.member(holder)).Err() })
	} else {
		p := &pendingRelease{key: rk, member: s.member(holder), done: make(chan error, 1)}
		s.batch.queueRelease(p)
		select {
		case err = <-p.done:
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	if err != nil {
		return s.wrap(ctx, err, time.Since(start))
	}
	return nil
}

// ReleaseAsync is Release without waiting: on a single-node Store it queues the ZREM for the
// batcher's next pipeline and returns; failed, unless nil, is called with the error of a
// release that did not reach Redis, on the batcher's goroutine (so it must not block). A
// cluster Store releases at once, as Release does.
func (s *Store) ReleaseAsync(key string, lim limiter.Limit, holder int64, failed func(error)) {
	if s.batch == nil {
		if err := s.Release(context.Background(), key, lim, holder); err != nil && failed != nil {
			failed(err)
		}
		return
	}
	s.batch.queueRelease(&pendingRelease{key: s.Keys(key, lim)[0], member: s.member(holder), failed: failed})
}

// releases is a single-node batcher's queue of ZREMs. Every request of a Concurrency rule
// ends in a release: on a round trip of its own each would cost Redis and the sidecar more
// than the request's decision, which the batcher shares with the others in flight, and would
// take a connection from the decisions' batches (bench/concurrency.sh). So the batcher sends
// the releases queued by the time it sends a batch of decisions in that batch's pipeline,
// before its script calls (a slot freed there can be taken by them), one ZREM per key; and
// when no decision is waiting, a pipeline of releases alone.
type releases struct {
	mu    sync.Mutex
	queue []*pendingRelease
	// timeout bounds a pipeline of releases alone (the Store's Options.Timeout).
	timeout time.Duration
}

// pendingRelease is one queued ZREM, and where its outcome goes: done (buffered: the sender
// never waits for a caller that gave up) for Release, failed for ReleaseAsync.
type pendingRelease struct {
	key, member string
	done        chan error
	failed      func(error)
}

func (p *pendingRelease) finish(err error) {
	switch {
	case p.done != nil:
		p.done <- err
	case err != nil && p.failed != nil:
		p.failed(err)
	}
}

// add queues p.
func (r *releases) add(p *pendingRelease) {
	r.mu.Lock()
	r.queue = append(r.queue, p)
	r.mu.Unlock()
}

// pending reports whether a release is queued.
func (r *releases) pending() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.queue) > 0
}

// take removes and returns the queued releases, at most queueLen.
func (r *releases) take() []*pendingRelease {
	r.mu.Lock()
	defer r.mu.Unlock()
	batch := r.queue[:min(len(r.queue), queueLen)]
	if r.queue = r.queue[len(batch):]; len(r.queue) == 0 {
		r.queue = nil
	}
	return batch
}

// releaseGroup is the releases of one key queued on a pipeline, as one ZREM.
type releaseGroup struct {
	ps      []*pendingRelease
	members []any
	cmd     *redis.IntCmd
}

// pipe takes the queued releases and queues them on pipe, the members of one key in one ZREM.
func (r *releases) pipe(ctx context.Context, pipe redis.Pipeliner) []*releaseGroup {
	var groups []*releaseGroup
	byKey := map[string]*releaseGroup{}
	for _, p := range r.take() {
		g := byKey[p.key]
		if g == nil {
			g = &releaseGroup{}
			byKey[p.key] = g
			groups = append(groups, g)
		}
		g.ps = append(g.ps, p)
		g.members = append(g.members, p.member)
	}
	for _, g := range groups {
		g.cmd = pipe.ZRem(ctx, g.ps[0].key, g.members...)
	}
	return groups
}

// finishReleases reports each release's outcome, its ZREM's (go-redis sets the pipeline's
// error on every command of a pipeline that failed).
func finishReleases(groups []*releaseGroup) {
	for _, g := range groups {
		err := g.cmd.Err()
		for _, p := range g.ps {
			p.finish(err)
		}
	}
}

// fail reports err to every queued release.
func (r *releases) fail(err error) {
	for ps := r.take(); len(ps) > 0; ps = r.take() {
		for _, p := range ps {
			p.finish(err)
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
