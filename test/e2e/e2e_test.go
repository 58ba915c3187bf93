package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/devenv"
	"github.com/sluice-dev/sluice/internal/inject"
	"github.com/sluice-dev/sluice/internal/policy"
)

const policyTemplate = `apiVersion: sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata:
  name: shop
spec:
  podSelector:
    matchLabels: {app: web}
  failureMode: Local
  rules:
  - name: per-client
    key: [{clientIP: {}}]
    algorithm: TokenBucket
    limit: %d
    window: 1h
  - name: per-key
    match: {pathPrefix: /keyed}
    key: [{header: {name: X-API-Key}}]
    algorithm: FixedWindow
    limit: 3
    window: 24h
`

// clientNo numbers the loopback addresses clients send from, so that every step of the spec
// is a client the limiter has not seen.
var clientNo atomic.Int32

func newClient() *http.Client {
	return devenv.ClientFrom(fmt.Sprintf("127.0.3.%d", clientNo.Add(1)))
}

// tally sends n requests to the pods in turn and counts the answers by status code.
func tally(c *http.Client, pods []*devenv.Pod, n int, path string, header http.Header) map[int]int {
	GinkgoHelper()
	rs, err := devenv.Send(c, pods, n, path, header)
	Expect(err).NotTo(HaveOccurred())
	return devenv.Count(rs)
}

func kubectl(args ...string) string {
	GinkgoHelper()
	cmd := exec.Command(sys.ControlPlane.Kubectl(), append([]string{"--kubeconfig", sys.ControlPlane.Kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), "kubectl %s: %s", strings.Join(args, " "), out)
	return string(out)
}

func applyPolicy(ns string, limit int) {
	GinkgoHelper()
	f := filepath.Join(GinkgoT().TempDir(), "policy.yaml")
	Expect(os.WriteFile(f, fmt.Appendf(nil, policyTemplate, limit), 0o600)).To(Succeed())
	kubectl("apply", "-n", ns, "-f", f)
}

var _ = Describe("Sluice on loopback", Ordered, func() {
	const ns = "shop"
	var pods []*devenv.Pod

	BeforeAll(func(ctx context.Context) {
		Expect(sys.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
		applyPolicy(ns, 5)
		for i := range 2 {
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{
					Namespace: ns, Name: fmt.Sprintf("web-%d", i),
					Labels:      map[string]string{"app": "web"},
					Annotations: map[string]string{inject.AnnotationInject: "true"},
				},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "app", Image: "sluice.local/upstream:dev",
					Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
				}}},
			}
			ip, err := devenv.FreePodIP(8080)
			Expect(err).NotTo(HaveOccurred())
			p, err := sys.RunPod(ctx, pod, ip)
			Expect(err).NotTo(HaveOccurred())
			pods = append(pods, p)
		}
	})

	It("renders the policy, counts the injected pods and hands the sidecars their share", func(ctx context.Context) {
		Eventually(func(g Gomega) {
			var p v1alpha1.RateLimitPolicy
			g.Expect(sys.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "shop"}, &p)).To(Succeed())
			g.Expect(p.Status.MatchedPods).To(Equal(int32(2)))
			var cm corev1.ConfigMap
			g.Expect(sys.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: policy.ConfigMapName}, &cm)).To(Succeed())
			doc, err := policy.Parse([]byte(cm.Data[policy.DataKey]))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(doc.Policies[0].Replicas).To(Equal(int32(2)))
		}).Should(Succeed())
		Expect(kubectl("get", "rlp", "-n", ns)).To(MatchRegexp(`shop\s+TokenBucket 5/1h, FixedWindow 3/24h\s+True\s+2`))
	})

	It("enforces each rule across both replicas through the shared Redis", func() {
		Eventually(func(g Gomega) {
			// Until the sidecars have loaded the policy, requests pass unlimited.
			g.Expect(tally(newClient(), pods, 8, "/", nil)).To(Equal(map[int]int{200: 5, 429: 3}))
		}).Should(Succeed())
		Expect(tally(newClient(), pods, 12, "/", nil)).To(Equal(map[int]int{200: 5, 429: 7}))

		By("keying per API key, with one shared key for requests without it")
		c := newClient() // 12 requests: within this client's 5 only for the first 5
		Expect(tally(c, pods, 5, "/keyed", http.Header{"X-Api-Key": {"alpha"}})).To(Equal(map[int]int{200: 3, 429: 2}))
		c = newClient()
		Expect(tally(c, pods, 4, "/keyed", http.Header{"X-Api-Key": {"beta"}})).To(Equal(map[int]int{200: 3, 429: 1}))
		c = newClient()
		Expect(tally(c, pods, 4, "/keyed", nil)).To(Equal(map[int]int{200: 3, 429: 1}))
	})

	It("applies an edited policy to the running sidecars", func() {
		start := time.Now()
		applyPolicy(ns, 9)
		Eventually(func(g Gomega) {
			g.Expect(tally(newClient(), pods, 12, "/", nil)).To(Equal(map[int]int{200: 9, 429: 3}))
		}).Should(Succeed())
		GinkgoWriter.Printf("policy edit enforced after %s\n", time.Since(start))
	})

	It("keeps serving on each pod's share while Redis is down, and returns to Redis", func() {
		Expect(sys.KillRedis()).To(Succeed())
		// limit 9 over 2 replicas: by their rank among the ready pods the controller lists, one
		// sidecar admits 5 of a client's requests and the other 4, exactly the limit together.
		for range 3 {
			c := newClient()
			first, second := tally(c, pods[:1], 10, "/", nil), tally(c, pods[1:], 10, "/", nil)
			Expect(first[200] + first[429]).To(Equal(10))
			Expect(second[200] + second[429]).To(Equal(10))
			Expect([]int{first[200], second[200]}).To(ConsistOf(5, 4))
		}

		By("restarting Redis")
		Expect(sys.RestartRedis()).To(Succeed())
		// Each pod alone admits the whole limit once it decides in Redis again: each has its
		// own breaker cooldown (jittered) and redial backoff, so each is waited for.
		for i := range pods {
			Eventually(func(g Gomega) {
				g.Expect(tally(newClient(), pods[i:i+1], 12, "/", nil)).To(Equal(map[int]int{200: 9, 429: 3}))
			}).Should(Succeed(), "pod %d", i)
		}
		c := newClient()
		Expect(tally(c, pods, 12, "/", nil)).To(Equal(map[int]int{200: 9, 429: 3}))
	})
})
