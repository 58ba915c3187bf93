package controller_test

import (
	"time"

	"context"
	"path/filepath"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/sluice-dev/sluice/internal/controller"
	"github.com/sluice-dev/sluice/internal/testutil/envtestassets"
)

// rlsNamespace is the manager's namespace in the suite: the RLS ConfigMap's.
const rlsNamespace = "sluice-system"

var (
	cfg       *rest.Config
	k8sClient client.Client // uncached: assertions read what the API server holds
	testEnv   *envtest.Environment
	cancel    context.CancelFunc
)

func TestControllers(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Controller Suite")
}

var _ = BeforeSuite(func() {
	logf.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	// A change within --render-interval of the last one waits for it (1 s), and the race
	// detector on a busy machine slows every render: 10 s, not Gomega's 1 s.
	SetDefaultEventuallyTimeout(2 * time.Minute) // bounds a hang; a loaded machine can take seconds
	var ctx context.Context
	ctx, cancel = context.WithCancel(context.Background())

	assets, err := envtestassets.Dir()
	Expect(err).NotTo(HaveOccurred())
	testEnv = &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "..", "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: assets,
	}
	cfg, err = testEnv.Start()
	Expect(err).NotTo(HaveOccurred())

	k8sClient, err = client.New(cfg, client.Options{Scheme: controller.NewScheme()})
	Expect(err).NotTo(HaveOccurred())

	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 controller.NewScheme(),
		Cache:                  controller.CacheOptions(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	Expect(err).NotTo(HaveOccurred())
	Expect(controller.Setup(mgr, controller.Options{RenderInterval: controller.DefaultRenderInterval})).To(Succeed())
	Expect(k8sClient.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: rlsNamespace}})).To(Succeed())
	Expect(controller.SetupRateLimitService(mgr, rlsNamespace)).To(Succeed())
	go func() {
		defer GinkgoRecover()
		Expect(mgr.Start(ctx)).To(Succeed())
	}()
})

var _ = AfterSuite(func() {
	if cancel != nil {
		cancel()
	}
	if testEnv != nil {
		Expect(testEnv.Stop()).To(Succeed())
	}
})
