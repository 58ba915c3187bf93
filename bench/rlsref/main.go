// Command rlsref is the reference decision service of bench/rlspeer: a small gRPC rate limit
// service (envoy.service.ratelimit.v3) that decides as envoyproxy/ratelimit's Redis driver does
// with its defaults (fixed windows, no local cache, no per-second Redis): for each descriptor of
// a request, one INCRBY of the hits on the key of the descriptor's current window and one EXPIRE
// of that key for the window's length, all of a request's commands in one pipeline (one round
// trip); a descriptor is OVER_LIMIT when its count after the increment exceeds the limit. The
// window is the server's clock divided by the unit, as the peer's.
//
// It has one limit (-limit per -unit) for every descriptor of every domain: the benchmark sends
// one descriptor, and what is measured is the cost of a decision, not the lookup of a
// configuration. It is not a rate limiter to deploy.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

func main() {
	listen := flag.String("grpc-listen", "127.0.0.1:0", "address of the gRPC service")
	redisAddr := flag.String("redis-addr", "", "Redis host:port")
	pool := flag.Int("redis-pool-size", 10, "Redis connections (envoyproxy/ratelimit's REDIS_POOL_SIZE default)")
	limit := flag.Uint("limit", 100, "requests per unit, for every descriptor")
	unit := flag.String("unit", "second", "second, minute, hour or day")
	flag.Parse()
	if err := run(*listen, *redisAddr, *pool, uint32(min(*limit, math.MaxUint32)), *unit); err != nil {
		fmt.Fprintln(os.Stderr, "rlsref:", err)
		os.Exit(1)
	}
}

func run(listen, addr string, pool int, limit uint32, unit string) error {
	u, ok := units[unit]
	if !ok || addr == "" {
		return errors.New("usage: rlsref -redis-addr host:port [-grpc-listen addr] [-limit N] [-unit second|minute|hour|day]")
	}
	client := redis.NewClient(&redis.Options{Addr: addr, PoolSize: pool, MinIdleConns: pool})
	defer func() { _ = client.Close() }()
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	srv := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(srv, &service{client: client, limit: limit, unit: u, now: time.Now})
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() { <-ctx.Done(); srv.Stop() }()
	fmt.Println("listening", ln.Addr()) // bench/rlspeer reads the address from this line
	return srv.Serve(ln)
}

type unitSpec struct {
	seconds int64
	enum    rlsv3.RateLimitResponse_RateLimit_Unit
}

var units = map[string]unitSpec{
	"second": {1, rlsv3.RateLimitResponse_RateLimit_SECOND},
	"minute": {60, rlsv3.RateLimitResponse_RateLimit_MINUTE},
	"hour":   {3600, rlsv3.RateLimitResponse_RateLimit_HOUR},
	"day":    {86400, rlsv3.RateLimitResponse_RateLimit_DAY},
}

type service struct {
	rlsv3.UnimplementedRateLimitServiceServer
	client *redis.Client
	limit  uint32
	unit   unitSpec
	now    func() time.Time // the server's clock, as the peer's windows are
}

// ShouldRateLimit charges each descriptor's window key in one pipeline and answers from the
// counts.
func (s *service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	hits := max(req.GetHitsAddend(), 1)
	now := s.now().Unix()
	window := now / s.unit.seconds * s.unit.seconds
	descs := req.GetDescriptors()
	incrs := make([]*redis.IntCmd, len(descs))
	_, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, d := range descs {
			var key strings.Builder
			key.WriteString(req.GetDomain())
			for _, e := range d.GetEntries() {
				key.WriteByte('_')
				key.WriteString(e.GetKey())
				key.WriteByte('_')
				key.WriteString(e.GetValue())
			}
			key.WriteByte('_')
			key.WriteString(strconv.FormatInt(window, 10))
			incrs[i] = p.IncrBy(ctx, key.String(), int64(hits))
			p.Expire(ctx, key.String(), time.Duration(s.unit.seconds)*time.Second)
		}
		return nil
	})
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}
	reset := durationpb.New(time.Duration(window+s.unit.seconds-now) * time.Second)
	for _, incr := range incrs {
		after := incr.Val()
		st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK,
			CurrentLimit:       &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: s.limit, Unit: s.unit.enum},
			DurationUntilReset: reset}
		if after > int64(s.limit) {
			st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		} else {
			st.LimitRemaining = s.limit - uint32(after)
		}
		resp.Statuses = append(resp.Statuses, st)
	}
	return resp, nil
}
