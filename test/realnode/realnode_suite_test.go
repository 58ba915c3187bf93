//go:build realnode

// Package realnode checks what only a kubelet can: that injected pods really run. It talks to
// the single-node cluster hack/realnode/node.sh brings up (`make test-realnode` runs both): the
// native sidecar starts before the application under its restrictive securityContext and
// passes its probes, reads the policies and labels kubelet mounts, follows a policy edit
// through kubelet's ConfigMap update, and shares limits through Redis, or splits them while
// Redis is away; with kube-apiserver and the manager stopped it keeps enforcing from the file
// kubelet keeps, and the pods created meanwhile are reported uninjected once the manager is back.
package realnode

import (
	"os"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/api/v1alpha1"
)

// The cluster, as `node.sh env` describes it.
var (
	kubeconfig = os.Getenv("SLUICE_REALNODE_KUBECONFIG")
	kubectlBin = os.Getenv("SLUICE_REALNODE_KUBECTL")
	nodeScript = os.Getenv("SLUICE_REALNODE_NODE_SCRIPT")
	kubeletDir = os.Getenv("SLUICE_REALNODE_KUBELET_DIR")
)

var k8s client.Client

func TestRealNode(t *testing.T) {
	if kubeconfig == "" || kubectlBin == "" || nodeScript == "" || kubeletDir == "" {
		t.Skip("no node: run `make test-realnode` (hack/realnode/test.sh), which brings one up and sets SLUICE_REALNODE_*")
	}
	RegisterFailHandler(Fail)
	SetDefaultEventuallyTimeout(3 * time.Minute) // bounds a hang; a loaded machine can take seconds
	SetDefaultEventuallyPollingInterval(250 * time.Millisecond)
	RunSpecs(t, "Real node Suite")
}

var _ = BeforeSuite(func() {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	Expect(err).NotTo(HaveOccurred())
	scheme := runtime.NewScheme()
	Expect(corev1.AddToScheme(scheme)).To(Succeed())
	Expect(appsv1.AddToScheme(scheme)).To(Succeed())
	Expect(coordinationv1.AddToScheme(scheme)).To(Succeed())
	Expect(eventsv1.AddToScheme(scheme)).To(Succeed())
	Expect(v1alpha1.AddToScheme(scheme)).To(Succeed())
	k8s, err = client.New(cfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
})
