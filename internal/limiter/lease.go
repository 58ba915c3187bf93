package limiter

import (
	"context"
	"fmt"
	"hash/maphash"
	"time"
)

// Lease bounds: a lease's MaxAge is a whole number of milliseconds in MinLeaseAge..MaxLeaseAge.
const (
	MinLeaseAge = time.Millisecond
	MaxLeaseAge = 10 * time.Second
)

// Leasable reports whether leases keep a stated bound under l's algorithm (see package lease):
// every algorithm but SlidingWindowLog, whose point is a bound on every sliding interval that
// units spent after they were issued would break, and LeakyBucket Queue, whose delay is decided
// from the level a request finds, which a unit leased earlier cannot know.
func (l Limit) Leasable() error {
	switch {
	case l.Algorithm == SlidingWindowLog:
		return fmt.Errorf("leases do not apply to %s: units spent up to maxAge after they were issued would break its bound on every sliding window", l.Algorithm)
	case l.Algorithm == Concurrency:
		return fmt.Errorf("leases do not apply to Concurrency: a slot is held by one request until it ends, not spent")
	case l.Algorithm == LeakyBucket && l.Mode == Queue:
		return fmt.Errorf("leases do not apply to LeakyBucket Queue: a queued request's delay depends on the level it finds")
	}
	return nil
}

// Grant is what issuing a lease got from a store.
type Grant struct {
	// Units is the number of units issued, 0..k: all k when k takes of cost 1 would have
	// passed, else as many as would have.
	Units int64
	// Result is the decision of the take that issued Units, or when none were issued the
	// denial of a take of one unit (what a request of cost 1 gets): Remaining is what the
	// shared limit still holds.
	Result Result
	// At is the instant the store decided at (ms since the epoch, on the store's clock), and
	// Content the bucket's content after the take (scaled units; 0 for the window
	// algorithms): what Return needs to clamp a return.
	At, Content int64
}

// WindowLeft is, for FixedWindow and SlidingWindowCounter, the ms from the grant's instant to
// the end of its aligned window: a lease of these algorithms must be spent before then so that
// every window admits at most its limit. For the buckets it is MaxDurationMs.
func (g Grant) WindowLeft(lim Limit) int64 {
	if lim.Algorithm != FixedWindow && lim.Algorithm != SlidingWindowCounter {
		return MaxDurationMs
	}
	W := lim.WindowMs()
	return (g.At/W+1)*W - g.At
}

// Lessor issues leases on a shared limit and takes back the units a lease did not use.
// Implementations are safe for concurrent use.
//
// Issue grants up to k units of key under lim at now (k >= 1, lim Leasable), exactly as k
// takes of cost 1 at that instant would: it charges min(k, n) units where n is the most that
// fit, as one take. Return gives back unused (<= g.Units) units of grant g, clamped so that
// the state is never more permissive than had those units not been issued (the inverse
// transition of a refund), and reports how many whole units it gave back.
type Lessor interface {
	Issue(ctx context.Context, key string, lim Limit, k int64, now time.Time) (Grant, error)
	Return(ctx context.Context, key string, lim Limit, g Grant, unused int64) (int64, error)
}

var _ Lessor = (*MemoryStore)(nil)

// ValidateIssue checks what every Lessor checks before issuing: lim is valid and Leasable and
// k >= 1. The errors wrap ErrInvalidLimit.
func ValidateIssue(lim Limit, k int64) error {
	if k < 1 {
		return fmt.Errorf("%w: lease of %d units", ErrInvalidLimit, k)
	}
	if err := lim.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidLimit, err)
	}
	if err := lim.Leasable(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidLimit, err)
	}
	return nil
}

// Issue implements Lessor. The take is committed whether or not units are issued, bringing the
// state forward to now as Take does; now is checked as in Take.
func (m *MemoryStore) Issue(_ context.Context, key string, lim Limit, k int64, now time.Time) (Grant, error) {
	nowMs := now.UnixMilli()
	if nowMs < 0 || nowMs > MaxNowMs {
		return Grant{}, fmt.Errorf("%w: %s is outside the Unix epoch .. %d ms", ErrInvalidTime, now, MaxNowMs)
	}
	if err := ValidateIssue(lim, k); err != nil {
		return Grant{}, err
	}
	sh := &m.shards[maphash.String(m.seed, key)&m.mask]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, isNew := sh.live(key, lim, nowMs), false
	if e == nil {
		e, isNew = new(memoryEntry), true
	}
	if e.lim != lim {
		e.adapt(lim)
	}
	c := min(k, lim.Capacity())
	r := e.take(c, nowMs)
	if !r.Allowed && r.Reason == ReasonLimited && r.Remaining > 0 {
		// k takes of cost 1 pass as long as one more fits: Remaining of them. The denied take
		// brought the state forward to now, so the second one decides at the same instant.
		c = min(c, r.Remaining)
		r = e.take(c, nowMs)
	}
	if !r.Allowed && c > 1 {
		// None fit: report the denial of one unit, what a request of cost 1 gets.
		c = 1
		r = e.take(c, nowMs)
	}
	g := Grant{Result: r}
	if r.Allowed {
		g.Units = c
	}
	g.At, g.Content = e.instant(nowMs)
	if isNew && r.ResetAfter > 0 {
		sh.makeRoom(nowMs)
		sh.entries[key] = e
	}
	return g, nil
}

// instant is the instant e's last take was decided at (now, or the state's latest when the
// clock went back) and the bucket's content: the request script's 7th and 8th fields.
func (e *memoryEntry) instant(nowMs int64) (at, content int64) {
	switch e.kind {
	case kindFixedWindow:
		return max(nowMs, e.fixed.Window*e.lim.WindowMs()), 0
	case kindSlidingWindowCounter:
		return max(nowMs, e.counter.Window*e.lim.WindowMs()), 0
	case kindTokenBucket:
		return e.tokens.Last, e.tokens.Tokens
	default:
		return e.leaky.Last, e.leaky.Level
	}
}

// Return implements Lessor with the transitions of lua/refund.lua (package redisstore),
// formula for formula. A key the store no longer holds gets nothing back (as an absent key in
// Redis): its state already equals a fresh key's, or was evicted.
func (m *MemoryStore) Return(_ context.Context, key string, lim Limit, g Grant, unused int64) (int64, error) {
	if unused < 0 || unused > g.Units {
		return 0, fmt.Errorf("%w: returning %d units of a lease of %d", ErrInvalidLimit, unused, g.Units)
	}
	if unused == 0 {
		return 0, nil
	}
	if err := ValidateIssue(lim, 1); err != nil {
		return 0, err
	}
	sh := &m.shards[maphash.String(m.seed, key)&m.mask]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.entries[key]
	if e == nil || e.lim != lim {
		return 0, nil
	}
	return e.refund(unused, g.At, g.Content), nil
}

// refund gives back c units charged at instant at, which left content in a bucket, and returns
// the whole units given back. See lua/refund.lua for why each clamp keeps the state no more
// permissive than without the charge.
func (e *memoryEntry) refund(c, at, content int64) int64 {
	W, L := e.lim.WindowMs(), e.lim.Limit
	switch e.kind {
	case kindFixedWindow:
		s := &e.fixed
		if s.Window != at/W {
			return 0
		}
		back := min(c, s.Count)
		s.Count -= back
		return back
	case kindSlidingWindowCounter:
		s, w := &e.counter, at/W
		var back int64
		switch s.Window {
		case w:
			back = min(c, s.Curr)
			s.Curr -= back
		case w + 1:
			back = min(c, s.Prev)
			s.Prev -= back
		}
		return back
	case kindTokenBucket:
		s := &e.tokens
		full := e.lim.Capacity() * W
		tokens, dt := min(s.Tokens, full), max(0, s.Last-at)
		before := content + c*W
		back := c * W
		if reaches(dt, L, full-content) {
			back = 0
		} else {
			back -= max(0, before+dt*L-full)
		}
		back = min(back, full-tokens)
		if back <= 0 {
			return 0
		}
		s.Tokens = tokens + back
		return back / W
	case kindLeakyMeter:
		s := &e.leaky
		full := e.lim.Capacity() * W
		level, dt := min(s.Level, full), max(0, s.Last-at)
		before := content - c*W
		back := c * W
		if reaches(dt, L, content) {
			back = 0
		} else {
			back -= max(0, dt*L-before)
		}
		back = min(back, level)
		if back <= 0 {
			return 0
		}
		s.Level = level - back
		return back / W
	}
	return 0
}
