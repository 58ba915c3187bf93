package controller_test

import (
	"context"
	"io"
	"log/slog"
	"net"

	rlsv3common "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/controller"
	"github.com/sluice-dev/sluice/internal/dataplane/breaker"
	"github.com/sluice-dev/sluice/internal/dataplane/config"
	"github.com/sluice-dev/sluice/internal/dataplane/decide"
	"github.com/sluice-dev/sluice/internal/dataplane/metrics"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/limiter/redisstore"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/rls"
	"github.com/sluice-dev/sluice/internal/testutil/kubeletdir"
	"github.com/sluice-dev/sluice/internal/testutil/redisserver"
)

var _ = Describe("RLS rendering", func() {
	It("renders a domain policy into the RLS ConfigMap, which a running RLS server serves, edits included", func(ctx context.Context) {
		ns := newNamespace(ctx)
		p := newPolicy(ns, "checkout", func(p *v1alpha1.RateLimitPolicy) {
			domainOnly(p)
			p.Spec.Domain = "edge-" + ns // domains are cluster-wide: one per spec
			p.Spec.Rules[0].Algorithm, p.Spec.Rules[0].Limit, p.Spec.Rules[0].Window = v1alpha1.FixedWindow, 2, "1h"
		})
		Expect(k8sClient.Create(ctx, p)).To(Succeed())

		// The ConfigMap the sluice-ratelimit Deployment mounts; kubelet's projection of it is
		// played by kubeletdir, which swaps ..data as kubelet does.
		dir := kubeletdir.New(GinkgoT().TempDir())
		project := func(g Gomega, wantLimit int64) {
			var cm corev1.ConfigMap
			g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: rlsNamespace, Name: controller.RLSConfigMapName}, &cm)).To(Succeed())
			doc, err := policy.Decode([]byte(cm.Data[policy.DataKey]), cm.BinaryData[policy.CompressedKey])
			g.Expect(err).NotTo(HaveOccurred())
			var found *policy.Policy
			for i := range doc.Policies {
				if doc.Policies[i].Name == ns+"/checkout" {
					found = &doc.Policies[i]
				}
			}
			g.Expect(found).NotTo(BeNil())
			g.Expect(found.Domain).To(Equal("edge-" + ns))
			g.Expect(found.Rules[0].Limit).To(Equal(wantLimit))
			g.Expect(dir.Write(map[string][]byte{policy.DataKey: []byte(cm.Data[policy.DataKey])})).To(Succeed())
		}
		Eventually(func(g Gomega) { project(g, 2) }).Should(Succeed())

		redis, err := redisserver.Start()
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(redis.Close)
		rc, err := redisstore.NewClientFromURL(redis.URL())
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(rc.Close)
		store := redisstore.New(rc, redisstore.Options{})
		DeferCleanup(store.Close)
		m := metrics.New()
		loader := config.NewLoader(dir.Path(policy.DataKey), "", nil, m, slog.New(slog.NewJSONHandler(io.Discard, nil)))
		loader.Domains = true
		lctx, stop := context.WithCancel(context.Background())
		DeferCleanup(stop)
		go func() { _ = loader.Run(lctx) }()
		srv := grpc.NewServer()
		rlsv3.RegisterRateLimitServiceServer(srv, rls.New(rls.Options{Config: loader.Current, Metrics: m,
			Decider: decide.New(decide.Options{Remote: store, Breaker: breaker.New(breaker.Options{}), Local: limiter.NewMemoryStore(limiter.MemoryStoreOptions{}), Metrics: m})}))
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		Expect(err).NotTo(HaveOccurred())
		go func() { _ = srv.Serve(ln) }()
		DeferCleanup(srv.Stop)
		conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(conn.Close)
		rlsClient := rlsv3.NewRateLimitServiceClient(conn)
		ask := func(addr string) *rlsv3.RateLimitResponse {
			resp, err := rlsClient.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge-" + ns, Descriptors: []*rlsv3common.RateLimitDescriptor{{
				Entries: []*rlsv3common.RateLimitDescriptor_Entry{{Key: "generic_key", Value: "checkout"}, {Key: "remote_address", Value: addr}}}}})
			Expect(err).NotTo(HaveOccurred())
			return resp
		}
		Eventually(func() uint32 { return ask("probe").Statuses[0].GetCurrentLimit().GetRequestsPerUnit() }).Should(Equal(uint32(2)))
		Expect(ask("10.0.0.1").OverallCode).To(Equal(rlsv3.RateLimitResponse_OK))
		Expect(ask("10.0.0.1").OverallCode).To(Equal(rlsv3.RateLimitResponse_OK))
		Expect(ask("10.0.0.1").OverallCode).To(Equal(rlsv3.RateLimitResponse_OVER_LIMIT))

		// An edit reaches the running server: the limit goes to 5.
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
		p.Spec.Rules[0].Limit = 5
		Expect(k8sClient.Update(ctx, p)).To(Succeed())
		Eventually(func(g Gomega) { project(g, 5) }).Should(Succeed())
		Eventually(func() uint32 { return ask("probe2").Statuses[0].GetCurrentLimit().GetRequestsPerUnit() }).Should(Equal(uint32(5)))
		Expect(loader.Current().Generation).To(BeNumerically(">=", 2))
	})
})
