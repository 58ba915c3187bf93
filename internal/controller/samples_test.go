package controller_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/sluice-dev/sluice/internal/inject"
	"github.com/sluice-dev/sluice/internal/policy"
)

var _ = Describe("The samples", func() {
	It("apply with kubectl apply -f config/samples/, reach Ready, and render exactly as sluicectl render prints", func(ctx context.Context) {
		ns := newNamespace(ctx)
		samples, err := filepath.Glob(filepath.Join("..", "..", "config", "samples", "*.yaml"))
		Expect(err).NotTo(HaveOccurred())
		var policyFiles []string
		for _, f := range samples {
			data, err := os.ReadFile(f)
			Expect(err).NotTo(HaveOccurred())
			if bytes.Contains(data, []byte("kind: RateLimitPolicy")) {
				policyFiles = append(policyFiles, f)
			}
		}
		Expect(policyFiles).NotTo(BeEmpty())

		user, err := testEnv.ControlPlane.AddUser(envtest.User{Name: "sample-admin", Groups: []string{"system:masters"}}, nil)
		Expect(err).NotTo(HaveOccurred())
		kubectl, err := user.Kubectl()
		Expect(err).NotTo(HaveOccurred())
		stdout, stderr, err := kubectl.Run("apply", "-n", ns, "-f", filepath.Join("..", "..", "config", "samples")+"/")
		Expect(err).NotTo(HaveOccurred(), "kubectl apply: %s", readAll(stderr))
		GinkgoWriter.Print(readAll(stdout))

		By("admitting traffic to the checkout pods only on the sidecar's ports")
		var np networkingv1.NetworkPolicy
		Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "checkout-only-through-sluice"}, &np)).To(Succeed())
		var ports []string
		for _, rule := range np.Spec.Ingress {
			for _, p := range rule.Ports {
				ports = append(ports, p.Port.String())
			}
		}
		Expect(ports).To(ConsistOf(inject.PortName, inject.MetricsPortName))
		Expect(np.Spec.PodSelector.MatchLabels).To(Equal(map[string]string{"app": "checkout"}))

		var cmData string
		Eventually(func(g Gomega) {
			stdout, stderr, err := kubectl.Run("get", "rlp", "-n", ns, "-o", "jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type==\"Ready\")].status} {end}")
			g.Expect(err).NotTo(HaveOccurred(), readAll(stderr))
			g.Expect(readAll(stdout)).To(MatchRegexp(`^(\S+=True )+$`))
			var cm corev1.ConfigMap
			g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: policy.ConfigMapName}, &cm)).To(Succeed())
			doc, err := policy.Parse([]byte(cm.Data[policy.DataKey]))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(doc.Policies).To(HaveLen(len(policyFiles)))
			cmData = cm.Data[policy.DataKey]
		}).Should(Succeed())

		By("rendering the same files offline")
		bin := filepath.Join(GinkgoT().TempDir(), "sluicectl")
		build := exec.Command("go", "build", "-o", bin, "../../cmd/sluicectl")
		build.Stderr = GinkgoWriter
		Expect(build.Run()).To(Succeed())
		// No pod runs in envtest: the controller renders an empty list of ready pods.
		render := []string{"render", "--namespace", ns, "--pods="}
		for _, f := range policyFiles {
			render = append(render, "-f", f)
		}
		out, err := exec.Command(bin, render...).Output()
		Expect(err).NotTo(HaveOccurred())
		Expect(string(out)).To(Equal(cmData))
	})
})

func readAll(r io.Reader) string {
	if r == nil {
		return ""
	}
	b, _ := io.ReadAll(r)
	return string(b)
}
