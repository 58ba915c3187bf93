package webhook_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/sluice-dev/sluice/internal/controller"
	"github.com/sluice-dev/sluice/internal/testutil/envtestassets"
	"github.com/sluice-dev/sluice/internal/webhook"
)

var (
	cfg       *rest.Config
	k8sClient client.Client // uncached: assertions read what the API server holds
	testEnv   *envtest.Environment
	cancel    context.CancelFunc
	seen      = &requestLog{byNamespace: map[string]int{}}
)

// managerNamespace is where the tested configuration says the manager runs.
const managerNamespace = "sluice-system"

// injectorConfig is the manager configuration the suite's webhook server injects with.
var injectorConfig = webhook.Config{
	Image:               "example.invalid/sluice-sidecar:test",
	RedisURL:            "redis://redis.sluice-system.svc:6379/0",
	RedisTLS:            true,
	RedisPasswordSecret: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "sluice-redis"}, Key: "password"},
	RedisTimeout:        50 * time.Millisecond,
	ExcludedNamespaces:  append([]string{managerNamespace}, webhook.ProtectedNamespaces...),
}

func TestWebhook(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Webhook Suite")
}

// requestLog counts the admission requests the webhook server received, by namespace, so a
// spec can tell "the API server did not call the webhook" from "the webhook did nothing".
type requestLog struct {
	mu          sync.Mutex
	byNamespace map[string]int
}

func (l *requestLog) count(ns string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.byNamespace[ns]
}

type counting struct{ admission.Handler }

func (c counting) Handle(ctx context.Context, req admission.Request) admission.Response {
	seen.mu.Lock()
	seen.byNamespace[req.Namespace]++
	seen.mu.Unlock()
	return c.Handler.Handle(ctx, req)
}

var _ = BeforeSuite(func() {
	logf.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	var ctx context.Context
	ctx, cancel = context.WithCancel(context.Background())

	// The generated configuration, as `make manifests` wrote it: envtest points its
	// clientConfig at the local server below and keeps everything else.
	assets, err := envtestassets.Dir()
	Expect(err).NotTo(HaveOccurred())
	testEnv = &envtest.Environment{
		WebhookInstallOptions: envtest.WebhookInstallOptions{Paths: []string{filepath.Join("..", "..", "config", "webhook", "manifests.yaml")}},
		BinaryAssetsDirectory: assets,
	}
	cfg, err = testEnv.Start()
	Expect(err).NotTo(HaveOccurred())

	k8sClient, err = client.New(cfg, client.Options{Scheme: controller.NewScheme()})
	Expect(err).NotTo(HaveOccurred())

	o := &testEnv.WebhookInstallOptions
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 controller.NewScheme(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		WebhookServer: ctrlwebhook.NewServer(ctrlwebhook.Options{
			Host: o.LocalServingHost, Port: o.LocalServingPort, CertDir: o.LocalServingCertDir,
		}),
	})
	Expect(err).NotTo(HaveOccurred())
	Expect(injectorConfig.Validate()).To(Succeed())
	mgr.GetWebhookServer().Register(webhook.Path, &admission.Webhook{
		Handler: counting{webhook.NewInjector(injectorConfig, mgr.GetScheme())},
	})
	go func() {
		defer GinkgoRecover()
		Expect(mgr.Start(ctx)).To(Succeed())
	}()
	Eventually(func() error { return mgr.GetWebhookServer().StartedChecker()(nil) }).Should(Succeed())
})

var _ = AfterSuite(func() {
	if cancel != nil {
		cancel()
	}
	if testEnv != nil {
		Expect(testEnv.Stop()).To(Succeed())
	}
})
