package devenv

import (
	"context"
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

	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/limiter/redisstore"
	"github.com/sluice-dev/sluice/internal/rls"
	"github.com/sluice-dev/sluice/sidecar/breaker"
	"github.com/sluice-dev/sluice/sidecar/config"
	"github.com/sluice-dev/sluice/sidecar/decide"
	"github.com/sluice-dev/sluice/sidecar/metrics"
)

// StartRLS runs the RLS server as cmd/ratelimit wires it (the loader reloading file, Redis at
// redisURL with the breaker, a local store) on a loopback port until ctx is done, and returns
// its address.
func StartRLS(ctx context.Context, file, redisURL string) (string, error) {
	m := metrics.New()
	loader := config.NewLoader(file, "", nil, m, slog.New(slog.NewJSONHandler(io.Discard, nil)))
	loader.Domains = true
	if err := loader.Load(); err != nil {
		return "", err
	}
	go func() { _ = loader.Run(ctx) }()
	client, err := redisstore.NewClientFromURL(redisURL)
	if err != nil {
		return "", err
	}
	store := redisstore.New(client, redisstore.Options{})
	d := decide.New(decide.Options{Remote: store, Breaker: breaker.New(breaker.Options{}), Local: limiter.NewMemoryStore(limiter.MemoryStoreOptions{}), Metrics: m})
	srv := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(srv, rls.New(rls.Options{Config: loader.Current, Decider: d, Metrics: m}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	go func() { _ = srv.Serve(ln) }()
	go func() {
		<-ctx.Done()
		srv.Stop()
		_ = store.Close()
		_ = client.Close()
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
