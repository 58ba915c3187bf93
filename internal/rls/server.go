// Package rls serves Envoy's rate limit service protocol (envoy.service.ratelimit.v3,
// ShouldRateLimit) with Sluice's rendered policies: the descriptor rules of the policies that
// declare a domain, decided with the sidecar's stores, breaker, failure modes, local shares and
// metrics (packages internal/dataplane/config, decide and metrics).
//
// Semantics, after envoyproxy/ratelimit where it documents them:
//   - A descriptor is matched by every descriptor rule of the request's domain whose entries
//     it has exactly, in order (see config.Rule.MatchesDescriptor); all of them apply. A
//     descriptor no rule matches is OK, without current_limit: unlimited.
//   - The cost of a descriptor is its hits_addend when set, else the request's hits_addend,
//     and 1 when that is 0.
//   - Every matching rule of every descriptor is decided as one unit
//     (limiter.RequestStore): when one enforced rule is over, nothing is charged.
//   - A descriptor's status is OVER_LIMIT when an enforced rule of it denies; a shadow rule
//     answers OK whatever it decides, and its would-be denial is counted in
//     sluice_requests_total{decision="shadow_denied"}. The overall code is OVER_LIMIT when any
//     descriptor is.
//   - current_limit, limit_remaining and duration_until_reset are those of the descriptor's
//     deciding rule (the denying rule with the longest retry, else the rule with the least
//     remaining), as decide.Verdict reports them: limit_remaining is 0 when the rule denied;
//     duration_until_reset is how long until the next request can pass (decide.Verdict's
//     ResetAfter), absent when no wait lets the denied descriptor pass (its cost exceeds the
//     capacity, or this replica holds no share of the limit while Redis cannot decide:
//     current_limit then has requests_per_unit 0).
//   - response_headers_to_add carries the sidecar's RateLimit headers of the request's
//     deciding rule, and Retry-After (when the request passes if nothing else arrives) when
//     the request is over the limit.
//   - A descriptor's limit override (RateLimitDescriptor.limit) replaces the limit and window
//     of each rule it matches (config.Rule.WithOverride), over the rule's tenant table; one no
//     rule can take (a year, more than a day) leaves the tenant's or the rule's own limit.
//   - Without Redis each policy's failure mode applies: Local decides with this replica's
//     share, Open answers OK, Closed answers the RPC with codes.Unavailable, so that Envoy's
//     failure_mode_deny decides.
package rls

import (
	"context"
	"math"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3common "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"k8s.io/utils/clock"

	"github.com/sluice-dev/sluice/internal/dataplane/config"
	"github.com/sluice-dev/sluice/internal/dataplane/decide"
	"github.com/sluice-dev/sluice/internal/dataplane/metrics"
	"github.com/sluice-dev/sluice/internal/limiter"
)

// Options configure a Server.
type Options struct {
	// Config returns the configuration in use (a config.Loader with Domains set); called once
	// per request.
	Config func() *config.Config
	// Decider decides the takes (Redis, breaker, failure modes).
	Decider *decide.Decider
	Metrics *metrics.Metrics
	// Clock gives each request its decision time; nil is the real clock.
	Clock clock.PassiveClock
}

// Server implements RateLimitServiceServer. Safe for concurrent use.
type Server struct {
	rlsv3.UnimplementedRateLimitServiceServer
	opts Options
}

// New returns a Server.
func New(opts Options) *Server {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return &Server{opts: opts}
}

// scratch is one call's list of the descriptor each added rule matched, in the order they
// were added to the decide.Request.
type scratch struct {
	descs []int
	rules []*config.Rule
}

var pool = sync.Pool{New: func() any { return new(scratch) }}

// maxCost bounds a hits_addend to what the limiter's exact arithmetic takes; a larger cost is
// denied as exceeding capacity anyway.
const maxCost = limiter.MaxLimit + 1

// ShouldRateLimit decides one Envoy request.
func (s *Server) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	now := s.opts.Clock.Now()
	cfg := s.opts.Config()
	rules := cfg.Domains[req.GetDomain()]
	descs := req.GetDescriptors()
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK,
		Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(descs))}
	for i := range descs {
		resp.Statuses[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
	}
	if len(rules) == 0 || len(descs) == 0 {
		return resp, nil
	}
	sc := pool.Get().(*scratch)
	rq := decide.NewRequest()
	defer func() { rq.Release(); sc.reset(); pool.Put(sc) }()
	for i, d := range descs {
		entries := d.GetEntries()
		n, check := hits(req.GetHitsAddend(), d)
		if n == 0 {
			continue // a negative (refunding) descriptor: not supported, answered OK
		}
		for _, r := range rules {
			if !r.MatchesDescriptor(len(entries), func(j int) string { return entries[j].GetKey() }, func(j int) string { return entries[j].GetValue() }) {
				continue
			}
			start := len(rq.Key)
			rq.Key = r.Key.AppendDescriptor(rq.Key, func(k string) string { return entryValue(entries, k) })
			key := string(rq.Key[start:])
			rule := r.ForKey(key) // the key's tenant's limit, when the rule has a table
			if o := d.GetLimit(); o != nil {
				if v, ok := r.WithOverride(override(o)); ok {
					rule = v // over the tenant's: Envoy sent it for this request
				}
			}
			rq.Add(r.Policy, rule, key, n, check)
			sc.descs = append(sc.descs, i)
			sc.rules = append(sc.rules, rule)
		}
	}
	if rq.Len() == 0 {
		return resp, nil
	}
	all := s.opts.Decider.Decide(ctx, rq, now)
	defer func() { s.opts.Metrics.DecisionSeconds.Observe(s.opts.Clock.Since(now).Seconds()) }()
	switch all.Outcome {
	case decide.Unavailable:
		return nil, status.Error(codes.Unavailable, "sluice: Redis cannot decide and a matching policy has failureMode Closed")
	case decide.Canceled:
		return nil, status.FromContextError(ctx.Err()).Err()
	case decide.Skipped:
		return resp, nil
	}
	// Decide keeps the decided rules in order and drops the Open ones: match them back to
	// their descriptors by walking both lists.
	decided, takes, res := rq.Decided()
	per := make([]decide.Verdict, len(descs))
	j := 0
	for k, rule := range sc.rules {
		if j == len(decided) || decided[j] != rule {
			continue // an Open policy's rule, dropped while Redis is down
		}
		r := res[j]
		if r.Allowed && (all.Denied || takes[j].Check) {
			// Not charged (another descriptor denied the request, or a check): its status
			// tells the state the request left, not the one a charge would have.
			r.Remaining = min(r.Remaining+takes[j].N, r.Limit)
		}
		per[sc.descs[k]].Add(rule, takes[j].Limit, r)
		j++
	}
	for i, v := range per {
		if v.Show == nil {
			continue
		}
		st := resp.Statuses[i]
		if v.Denied {
			st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		st.CurrentLimit = currentLimit(v.Show, v.Res)
		st.LimitRemaining = uint32(min(v.Res.Remaining, math.MaxUint32))
		if d, ok := v.ResetAfter(); ok {
			st.DurationUntilReset = durationpb.New(d)
		}
	}
	all.Headers(func(name, value string) {
		resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd, &corev3.HeaderValue{Key: name, Value: value})
	})
	return resp, nil
}

// hits is a descriptor's cost and whether it only checks: its hits_addend when set, else the
// request's (1 for 0). A descriptor's own hits_addend of 0 asks whether the limit still has
// room, charging nothing: it is decided as a check of one unit (OVER_LIMIT when not even one
// more hit would pass). n is 0 for a descriptor of negative hits.
func hits(request uint32, d *rlsv3common.RateLimitDescriptor) (n int64, check bool) {
	if d.GetIsNegativeHits() {
		return 0, false
	}
	u := uint64(request)
	if h := d.GetHitsAddend(); h != nil {
		if h.GetValue() == 0 {
			return 1, true
		}
		u = h.GetValue()
	}
	return int64(min(max(u, 1), uint64(maxCost))), false
}

// override is a descriptor's limit override as a rule takes it: requests_per_unit per
// unit_multiplier (1 when unset) units of SECOND, MINUTE, HOUR or DAY, or per calendar month
// (MONTH, multiplier 1). Any other unit (UNKNOWN, YEAR, several months) or a multiplier of 0
// gives a window no rule takes (0, or beyond a day), which config.Rule.WithOverride ignores.
func override(o *rlsv3common.RateLimitDescriptor_RateLimitOverride) config.Override {
	m := int64(1)
	if w := o.GetUnitMultiplier(); w != nil {
		m = int64(w.GetValue())
	}
	ov := config.Override{Limit: int64(o.GetRequestsPerUnit())}
	switch o.GetUnit() {
	case typev3.RateLimitUnit_SECOND:
		ov.WindowMs = m * time.Second.Milliseconds()
	case typev3.RateLimitUnit_MINUTE:
		ov.WindowMs = m * time.Minute.Milliseconds()
	case typev3.RateLimitUnit_HOUR:
		ov.WindowMs = m * time.Hour.Milliseconds()
	case typev3.RateLimitUnit_DAY:
		ov.WindowMs = m * 24 * time.Hour.Milliseconds()
	case typev3.RateLimitUnit_MONTH:
		ov.Month = m == 1
	}
	return ov
}

func entryValue(entries []*rlsv3common.RateLimitDescriptor_Entry, key string) string {
	for _, e := range entries {
		if e.GetKey() == key {
			return e.GetValue()
		}
	}
	return ""
}

// currentLimit is the rule's limit as Envoy reports it: requests_per_unit the capacity that
// decided (the shared limit, or this replica's share without Redis) per window, in the
// largest unit that divides the window (with unit_multiplier when it is several), or the
// calendar period's unit (DAY, WEEK, MONTH); UNKNOWN for a window that is not a whole number of
// seconds.
func currentLimit(rule *config.Rule, res limiter.Result) *rlsv3.RateLimitResponse_RateLimit {
	cl := &rlsv3.RateLimitResponse_RateLimit{Name: rule.Policy.Name + "/" + rule.Name,
		RequestsPerUnit: uint32(min(res.Limit, math.MaxUint32))}
	if u, ok := calendarUnits[rule.Limit.Period]; ok {
		cl.Unit = u
		return cl
	}
	w := rule.Limit.Window
	for _, u := range []struct {
		d    time.Duration
		unit rlsv3.RateLimitResponse_RateLimit_Unit
	}{{24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_DAY}, {time.Hour, rlsv3.RateLimitResponse_RateLimit_HOUR},
		{time.Minute, rlsv3.RateLimitResponse_RateLimit_MINUTE}, {time.Second, rlsv3.RateLimitResponse_RateLimit_SECOND}} {
		if w%u.d == 0 {
			cl.Unit = u.unit
			if m := w / u.d; m > 1 {
				cl.UnitMultiplier = wrapUint32(uint32(m))
			}
			return cl
		}
	}
	cl.Unit = rlsv3.RateLimitResponse_RateLimit_UNKNOWN
	return cl
}

// calendarUnits are the units of a calendar rule's periods.
var calendarUnits = map[limiter.Period]rlsv3.RateLimitResponse_RateLimit_Unit{
	limiter.Day: rlsv3.RateLimitResponse_RateLimit_DAY, limiter.Week: rlsv3.RateLimitResponse_RateLimit_WEEK,
	limiter.Month: rlsv3.RateLimitResponse_RateLimit_MONTH,
}

func (sc *scratch) reset() {
	clear(sc.rules)
	sc.descs, sc.rules = sc.descs[:0], sc.rules[:0]
}

func wrapUint32(v uint32) *wrapperspb.UInt32Value { return wrapperspb.UInt32(v) }
