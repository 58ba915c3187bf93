package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/sluice-dev/sluice/internal/limiter"
)

var _ limiter.Lessor = (*Store)(nil)

// Issue implements limiter.Lessor: one call of the request script (coalesced with the others
// waiting, as Take) with a lease of k units, which lua/request.lua decides as k takes of cost 1
// at one instant and charges as one take; the take is committed whether or not units are
// issued, as Take's. now and the errors are as for Take.
func (s *Store) Issue(ctx context.Context, key string, lim limiter.Limit, k int64, now time.Time) (limiter.Grant, error) {
	nowArg, err := s.nowArg(now)
	if err != nil {
		return limiter.Grant{}, err
	}
	if err := limiter.ValidateIssue(lim, k); err != nil {
		return limiter.Grant{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	start := time.Now()
	vals, err := s.run(ctx, nowArg, s.Keys(key, lim), s.alone(key, lim, k, now, kindLease, flagState))
	if err != nil {
		return limiter.Grant{}, s.wrap(ctx, err, time.Since(start))
	}
	units := vals[4] // the lease's 5th field: the units issued
	vals[4] = 0
	return limiter.Grant{Units: units, Result: resultFrom(vals, lim.Capacity()), At: vals[6], Content: vals[7]}, nil
}

// Return implements limiter.Lessor with lua/refund.lua, in a round trip of its own within
// Options.Timeout. A return that fails leaves the units charged, erring towards denial.
func (s *Store) Return(ctx context.Context, key string, lim limiter.Limit, g limiter.Grant, unused int64) (int64, error) {
	if unused < 0 || unused > g.Units {
		return 0, fmt.Errorf("%w: returning %d units of a lease of %d", limiter.ErrInvalidLimit, unused, g.Units)
	}
	if unused == 0 {
		return 0, nil
	}
	if err := limiter.ValidateIssue(lim, 1); err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	start := time.Now()
	back, err := refundScript.Run(ctx, s.client, s.Keys(key, lim), s.minTTL, algCode(&lim), lim.Limit,
		lim.WindowMs(), lim.Capacity(), unused, g.At, g.Content).Int64()
	if err != nil {
		return 0, s.wrap(ctx, err, time.Since(start))
	}
	if lim.Algorithm == limiter.TokenBucket || lim.Algorithm == limiter.LeakyBucket {
		back /= lim.WindowMs() // scaled units
	}
	return back, nil
}
