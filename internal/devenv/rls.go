package devenv

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"text/tabwriter"

	rlsv3common "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-dev/sluice/internal/dataplane/cmdline"
	"github.com/sluice-dev/sluice/internal/dataplane/config"
	"github.com/sluice-dev/sluice/internal/dataplane/engine"
	"github.com/sluice-dev/sluice/internal/dataplane/metrics"
	"github.com/sluice-dev/sluice/internal/inject"
	"github.com/sluice-dev/sluice/internal/rls"
)

// StartRLS runs the RLS server as cmd/ratelimit wires it (its flags' defaults with --config
// file and --redis-url redisURL, the loader reloading the file, the engine of engine.Open) on a
// loopback port until ctx is done, and returns its address.
func StartRLS(ctx context.Context, file, redisURL string) (string, error) {
	o, err := cmdline.ParseRLS([]string{"--" + inject.FlagConfig, file, "--" + inject.FlagRedisURL, redisURL},
		flag.ContinueOnError, func(string) (string, bool) { return "", false })
	if err != nil {
		return "", err
	}
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	m := metrics.New()
	loader := config.NewLoader(o.Config, "", nil, m, log)
	loader.Domains = true
	if err := loader.Load(); err != nil {
		return "", err
	}
	eng, err := engine.Open(engine.Options{Flags: &o.Options, Metrics: m, Log: log})
	if err != nil {
		return "", err
	}
	srv := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(srv, rls.New(rls.Options{Config: loader.Current, Decider: eng.Decider, Metrics: m}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		eng.Close()
		return "", err
	}
	go func() { _ = loader.Run(ctx) }()
	eng.Start(ctx)
	go func() { _ = srv.Serve(ln) }()
	go func() {
		<-ctx.Done()
		srv.Stop()
		eng.Close()
	}()
	return ln.Addr().String(), nil
}

// ShowRLS asks the RLS server at addr n times for one descriptor of domain and prints each
// answer: the overall code, the descriptor's numbers and the headers for Envoy to add.
func ShowRLS(out io.Writer, addr, domain string, entries [][2]string, n int) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	c := rlsv3.NewRateLimitServiceClient(conn)
	d := &rlsv3common.RateLimitDescriptor{}
	for _, e := range entries {
		d.Entries = append(d.Entries, &rlsv3common.RateLimitDescriptor_Entry{Key: e[0], Value: e[1]})
	}
	w := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(w, "  #\toverall_code\tcurrent_limit\tlimit_remaining\tduration_until_reset\tresponse_headers_to_add")
	for i := range n {
		resp, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*rlsv3common.RateLimitDescriptor{d}})
		if err != nil {
			return err
		}
		st := resp.GetStatuses()[0]
		var hs []string
		for _, h := range resp.GetResponseHeadersToAdd() {
			if h.GetKey() == "Ratelimit" || h.GetKey() == "Retry-After" {
				hs = append(hs, h.GetKey()+": "+h.GetValue())
			}
		}
		cl := st.GetCurrentLimit()
		fmt.Fprintf(w, "  %d\t%s\t%d/%s\t%d\t%s\t%s\n", i+1, resp.GetOverallCode(), cl.GetRequestsPerUnit(), cl.GetUnit(),
			st.GetLimitRemaining(), st.GetDurationUntilReset().AsDuration(), strings.Join(hs, "  "))
	}
	return w.Flush()
}
