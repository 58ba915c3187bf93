package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/sluice-dev/sluice/internal/limiter"
)

// AddUsage adds n units of usage decided elsewhere to key's state under lim, without deciding
// anything: the units a sidecar admitted on its local share while Redis was unreachable, so
// that a client that spent its share then does not find a fresh budget when Redis is back. It
// is a take of the request script (kind kindUsage, lua/request.lua's usage), coalesced like
// Take, and returns the units charged: n, or fewer when the state could not hold more (it is
// then used up: a window's count or a log's sum at the limit, a token bucket empty, a leaky
// bucket full).
//
// The state is brought forward to the call's instant as a Take would, and the units are
// charged at that instant: for a bucket or a log that is no earlier than they were spent, so
// the state is never left more permissive than had they been charged as they were spent. now,
// lim, n, the budget and the errors are as for Take.
func (s *Store) AddUsage(ctx context.Context, key string, lim limiter.Limit, n int64, now time.Time) (int64, error) {
	nowArg, err := s.nowArg(now)
	if err != nil {
		return 0, err
	}
	if n < 1 {
		return 0, fmt.Errorf("%w: cost %d is below 1", limiter.ErrInvalidLimit, n)
	}
	if err := lim.Validate(); err != nil {
		return 0, fmt.Errorf("%w: %w", limiter.ErrInvalidLimit, err)
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	start := time.Now()
	vals, err := s.run(ctx, nowArg, s.Keys(key, lim), s.alone(key, lim, n, now, kindUsage, 0))
	if err != nil {
		return 0, s.wrap(ctx, err, time.Since(start))
	}
	return vals[4], nil // the take's delay: the units charged
}
