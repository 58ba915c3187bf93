package limiter

import (
	"context"
	"fmt"
	"hash/maphash"
	"time"
)

// A late charge is cost taken after a request was admitted, when its response tells what it
// cost or whether it counts (countWhen, responseCost): it is charged whether or not it fits,
// so a key can end above its limit, or, for TokenBucket, below zero (in debt). The algorithms
// where such a charge has a clear meaning are FixedWindow (calendar or not) and TokenBucket:
//
//   - FixedWindow: the count grows by the cost, up to the limit (a count at the limit already
//     denies every request until the window ends, so more would change no decision).
//   - TokenBucket: the tokens drop by the cost, possibly below zero; the debt is paid back by
//     the refill before anything passes again, and RetryAfter counts it exactly. The debt is
//     bounded by MaxDebt, which keeps every value of the arithmetic below 2^53.
//
// SlidingWindowCounter weights the previous window's count, which must stay within the limit
// for its arithmetic to be exact; SlidingWindowLog keeps at most limit entries per key; a
// LeakyBucket Queue has already handed out its delays. None of them takes late charges.

// Charger charges n units of key under lim at now whether or not they fit, returning the state
// after the charge (Allowed is true). Implementations are safe for concurrent use.
type Charger interface {
	Charge(ctx context.Context, key string, lim Limit, n int64, now time.Time) (Result, error)
}

// LateChargeable reports whether lim's algorithm takes late charges: FixedWindow or TokenBucket.
func (l Limit) LateChargeable() bool {
	return l.Algorithm == FixedWindow || l.Algorithm == TokenBucket
}

// MaxDebt is the lowest a TokenBucket's content may be charged to, in scaled units (negative):
// full - (2^53 - 1), so that full - tokens and c*W - tokens stay exact in Lua's doubles. For a
// bucket refilling over an hour that is a debt of about 2.5e9 tokens; a larger charge
// saturates there.
func MaxDebt(lim *Limit) int64 {
	return lim.Capacity()*lim.WindowMs() - (1<<53 - 1)
}

// Debt is the whole tokens a TokenBucket Result's state owes, from the content in scaled units
// (ceil(-tokens/W) when negative); 0 otherwise.
func Debt(lim Limit, tokens int64) int64 {
	if tokens >= 0 {
		return 0
	}
	return ceilDiv(-tokens, lim.WindowMs())
}

// charge is FixedWindowState's late charge: take's window handling, then Count = min(L, Count+c).
func (s *FixedWindowState) charge(lim *Limit, c, now int64) Result {
	return windowCharge(lim.Limit, c, &s.Count, s.roll(lim.WindowMs(), now))
}

// windowCharge is both fixed windows' late charge: c units counted, up to L, in a window
// holding *count units that ends e ms after the charge.
func windowCharge(L, c int64, count *int64, e int64) Result {
	*count = min(L, *count+min(c, L))
	r := Result{Allowed: true, Limit: L, Remaining: L - *count}
	if *count > 0 {
		r.ResetAfter = ms(e)
	}
	return r
}

// charge is CalendarWindowState's late charge, as FixedWindowState's.
func (s *CalendarWindowState) charge(lim *Limit, c, now, start, end int64) Result {
	return windowCharge(lim.Limit, c, &s.Count, s.roll(now, start, end))
}

// charge is TokenBucketState's late charge: take's refill, then
//
//	Tokens = MaxDebt if c > floor((Tokens - MaxDebt)/W), else Tokens - c*W
//	Remaining  = max(0, floor(Tokens/W))
//	ResetAfter = ceil((full - Tokens)/L)
func (s *TokenBucketState) charge(lim *Limit, c, now int64) Result {
	W, L, capacity := lim.WindowMs(), lim.Limit, lim.Capacity()
	full := capacity * W
	s.refill(L, full, now)
	if floor := MaxDebt(lim); c > (s.Tokens-floor)/W {
		s.Tokens = floor
	} else {
		s.Tokens -= c * W
	}
	return Result{Allowed: true, Limit: capacity, Remaining: max(0, s.Tokens/W), ResetAfter: ms(ceilDiv(full-s.Tokens, L))}
}

// charge applies e's late charge (e.kind is FixedWindow, calendar or TokenBucket).
func (e *memoryEntry) charge(c, now int64) Result {
	var r Result
	switch e.kind {
	case kindFixedWindow:
		r = e.fixed.charge(&e.lim, c, now)
	case kindCalendar:
		start, end := e.lim.CalendarBounds(now)
		r = e.calendar.charge(&e.lim, c, now, start, end)
	default:
		r = e.tokens.charge(&e.lim, c, now)
	}
	e.expiresAt = now + r.ResetAfter.Milliseconds()
	return r
}

var _ Charger = (*MemoryStore)(nil)

// Charge implements Charger. now, lim and n are checked as in Take, and lim must be
// LateChargeable.
func (m *MemoryStore) Charge(_ context.Context, key string, lim Limit, n int64, now time.Time) (Result, error) {
	nowMs := now.UnixMilli()
	if nowMs < 0 || nowMs > MaxNowMs {
		return Result{}, fmt.Errorf("%w: %s is outside the Unix epoch .. %d ms", ErrInvalidTime, now, MaxNowMs)
	}
	if err := ValidateCharge(lim, n); err != nil {
		return Result{}, err
	}
	sh := &m.shards[maphash.String(m.seed, key)&m.mask]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.live(key, lim, nowMs)
	isNew := e == nil
	if isNew {
		e = new(memoryEntry)
	}
	if e.lim != lim {
		e.adapt(lim)
	}
	r := e.charge(n, nowMs)
	if isNew && r.ResetAfter > 0 {
		sh.makeRoom(nowMs)
		sh.entries[key] = e
	}
	return r, nil
}

// ValidateCharge checks a late charge's limit and cost, as every Charger does.
func ValidateCharge(lim Limit, n int64) error {
	if n < 1 {
		return fmt.Errorf("%w: cost %d is below 1", ErrInvalidLimit, n)
	}
	if err := lim.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidLimit, err)
	}
	if !lim.LateChargeable() {
		return fmt.Errorf("%w: %s takes no late charges (only FixedWindow and TokenBucket)", ErrInvalidLimit, lim.Algorithm)
	}
	return nil
}
