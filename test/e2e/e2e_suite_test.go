// Package e2e runs the whole system on loopback, as `make demo` does, and checks what a user
// would: a policy applied with kubectl is rendered, pods are injected, their sidecars enforce
// the limits through the shared Redis, follow policy edits, and keep traffic flowing on the
// local share when Redis goes away.
package e2e

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/sluice-dev/sluice/internal/devenv"
)

var sys *devenv.System

func TestE2E(t *testing.T) {
	RegisterFailHandler(Fail)
	SetDefaultEventuallyTimeout(2 * time.Minute) // bounds a hang; a loaded machine can take seconds
	SetDefaultEventuallyPollingInterval(100 * time.Millisecond)
	RunSpecs(t, "End-to-end Suite")
}

var _ = BeforeSuite(func(ctx context.Context) {
	logf.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	var err error
	sys, err = devenv.Start(ctx, devenv.Options{
		Progress:   func(format string, args ...any) { GinkgoWriter.Printf(format+"\n", args...) },
		ProcessLog: GinkgoWriter,
	})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(sys.Stop)
}, NodeTimeout(10*time.Minute))
