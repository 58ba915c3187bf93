//go:build realnode

package realnode

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/inject"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/webhook"
)

const ns = "realnode-e2e"

// The policy keys on a header rather than the client's address: every request comes from the
// host's one bridge address, and a fresh X-Client value per step is a client the limiter has
// not seen.
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
    key: [{header: {name: X-Client}}]
    algorithm: TokenBucket
    limit: %d
    window: 1h
`

var clientNo atomic.Int32

// newClient is the header of a client no earlier step used.
func newClient() http.Header {
	return http.Header{"X-Client": {fmt.Sprintf("client-%d-%d", time.Now().UnixNano(), clientNo.Add(1))}}
}

var httpClient = &http.Client{Timeout: 5 * time.Second}

// tally sends n requests to the pods' sidecars in turn, as one client, and counts the answers
// by status code; a transport error counts as status 0, so it shows up in any comparison.
func tally(podIPs []string, n int, h http.Header) map[int]int {
	return tallyAt(n, h, false, func(i int) string {
		return fmt.Sprintf("http://%s:%d/", podIPs[i%len(podIPs)], inject.DefaultListenPort)
	})
}

// tallyAt sends n requests as the client h, the i-th to url(i), and counts the answers by
// status (0 for a transport error). With fresh, each request opens a new connection.
func tallyAt(n int, h http.Header, fresh bool, url func(i int) string) map[int]int {
	counts := map[int]int{}
	for i := range n {
		req, err := http.NewRequest(http.MethodGet, url(i), nil)
		Expect(err).NotTo(HaveOccurred())
		req.Header = h.Clone()
		req.Close = fresh
		resp, err := httpClient.Do(req)
		if err != nil {
			GinkgoWriter.Printf("request %d to %s: %v\n", i, url(i), err)
			counts[0]++
			continue
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		counts[resp.StatusCode]++
	}
	return counts
}

// scrape GETs a metrics endpoint (with a bearer token when token is not empty) and returns
// its body, or an error unless it answered 200.
func scrape(c *http.Client, url, token string) ([]byte, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s: %s", url, resp.Status, body)
	}
	return body, nil
}

// sidecarMetrics returns a sidecar's /metrics.
func sidecarMetrics(podIP string) ([]byte, error) {
	return scrape(httpClient, fmt.Sprintf("http://%s:%d/metrics", podIP, inject.DefaultMetricsPort), "")
}

// metric reads one unlabelled sample of a sidecar's /metrics.
func metric(podIP, name string) (float64, error) {
	body, err := sidecarMetrics(podIP)
	if err != nil {
		return 0, err
	}
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindSubmatch(body)
	if m == nil {
		return 0, fmt.Errorf("%s: no sample of %s", podIP, name)
	}
	return strconv.ParseFloat(string(m[1]), 64)
}

func kubectl(args ...string) string {
	GinkgoHelper()
	out, err := exec.Command(kubectlBin, append([]string{"--kubeconfig", kubeconfig}, args...)...).CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), "kubectl %s: %s", strings.Join(args, " "), out)
	return string(out)
}

func applyPolicy(limit int) {
	GinkgoHelper()
	f := filepath.Join(GinkgoT().TempDir(), "policy.yaml")
	Expect(os.WriteFile(f, fmt.Appendf(nil, policyTemplate, limit), 0o600)).To(Succeed())
	kubectl("apply", "-n", ns, "-f", f)
}

func node(args ...string) {
	GinkgoHelper()
	out, err := exec.Command(nodeScript, args...).CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), "node.sh %s: %s", strings.Join(args, " "), out)
}

// renderedPolicy is the namespace's rendered ConfigMap as g reads it now, parsed and as text;
// g fails unless it parses and holds the one policy.
func renderedPolicy(ctx context.Context, g Gomega) (*policy.Document, string) {
	var cm corev1.ConfigMap
	g.Expect(k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: policy.ConfigMapName}, &cm)).To(Succeed())
	doc, err := policy.Parse([]byte(cm.Data[policy.DataKey]))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(doc.Policies).To(HaveLen(1))
	return doc, cm.Data[policy.DataKey]
}

// volumeFile is a file of a pod's volume as kubelet wrote it on the host.
func volumeFile(pod *corev1.Pod, plugin, volume, file string) string {
	return filepath.Join(kubeletDir, "pods", string(pod.UID), "volumes", plugin, volume, file)
}

func web() *appsv1.Deployment {
	labels := map[string]string{"app": "web"}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{inject.AnnotationInject: "true"}},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: ptr.To[int64](2),
					Containers: []corev1.Container{{
						Name: "app", Image: "sluice.local/upstream:dev", ImagePullPolicy: corev1.PullNever,
						Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
					}},
				},
			},
		},
	}
}

var _ = Describe("Sluice on a real node", Ordered, func() {
	var (
		pods   []corev1.Pod
		podIPs []string
	)

	BeforeAll(func(ctx context.Context) {
		Expect(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
		applyPolicy(5)

		By("waiting until the webhook injects")
		waitForInjection(ctx, ns, web().Spec.Template)

		start := time.Now()
		Expect(k8s.Create(ctx, web())).To(Succeed())
		Eventually(func(g Gomega) {
			var list corev1.PodList
			g.Expect(k8s.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{"app": "web"})).To(Succeed())
			ready := 0
			for _, p := range list.Items {
				for _, c := range p.Status.Conditions {
					if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue && p.DeletionTimestamp == nil {
						ready++
					}
				}
			}
			g.Expect(ready).To(Equal(2), "ready pods of %d", len(list.Items))
			pods = list.Items
		}, 3*time.Minute).Should(Succeed())
		AddReportEntry("deployment ready", time.Since(start).Round(time.Second).String())
		for _, p := range pods {
			podIPs = append(podIPs, p.Status.PodIP)
		}
		GinkgoWriter.Printf("pods %s %s at %v\n", pods[0].Name, pods[1].Name, podIPs)
	})

	It("runs the sidecar as a native sidecar, before the application, under its securityContext", func() {
		for _, p := range pods {
			Expect(p.Status.Phase).To(Equal(corev1.PodRunning))
			Expect(p.Status.PodIP).To(HavePrefix("198.18.1."))
			Expect(p.Spec.InitContainers).To(HaveLen(1))
			sc := p.Spec.InitContainers[0]
			Expect(sc.Name).To(Equal(inject.ContainerName))
			Expect(sc.RestartPolicy).To(HaveValue(Equal(corev1.ContainerRestartPolicyAlways)))
			Expect(sc.SecurityContext.ReadOnlyRootFilesystem).To(HaveValue(BeTrue()))
			Expect(sc.SecurityContext.RunAsUser).To(HaveValue(Equal(webhook.UID)))

			Expect(p.Status.InitContainerStatuses).To(HaveLen(1))
			side := p.Status.InitContainerStatuses[0]
			Expect(side.Name).To(Equal(inject.ContainerName))
			// Started: its startup probe passed; Ready: its readiness probe passes.
			Expect(side.Started).To(HaveValue(BeTrue()))
			Expect(side.Ready).To(BeTrue())
			Expect(side.RestartCount).To(BeZero(), "the sidecar restarted: it cannot run as injected")
			Expect(side.State.Running).NotTo(BeNil())

			Expect(p.Status.ContainerStatuses).To(HaveLen(1))
			app := p.Status.ContainerStatuses[0]
			Expect(app.State.Running).NotTo(BeNil())
			// kubelet starts the application only once the sidecar's startup probe passed.
			Expect(app.State.Running.StartedAt.Time).NotTo(BeTemporally("<", side.State.Running.StartedAt.Time))
		}
	})

	It("mounts the rendered policies and the pod's labels where the sidecar reads them", func(ctx context.Context) {
		var cm corev1.ConfigMap
		Expect(k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: policy.ConfigMapName}, &cm)).To(Succeed())
		for i, p := range pods {
			Eventually(func(g Gomega) {
				data, err := os.ReadFile(volumeFile(&p, "kubernetes.io~configmap", inject.PoliciesVolume, policy.DataKey))
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: policy.ConfigMapName}, &cm)).To(Succeed())
				g.Expect(string(data)).To(Equal(cm.Data[policy.DataKey]))
			}).Should(Succeed())
			labels, err := os.ReadFile(volumeFile(&p, "kubernetes.io~downward-api", inject.PodInfoVolume, "labels"))
			Expect(err).NotTo(HaveOccurred())
			Expect(string(labels)).To(ContainSubstring(`app="web"`))
			// The sidecar loaded them: one policy selected by its labels.
			Eventually(func() (float64, error) { return metric(podIPs[i], "sluice_config_policies") }).Should(Equal(1.0))
		}
	})

	It("shows the policy Ready with both pods matched", func(ctx context.Context) {
		Eventually(func(g Gomega) {
			var p v1alpha1.RateLimitPolicy
			g.Expect(k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: "shop"}, &p)).To(Succeed())
			g.Expect(p.Status.MatchedPods).To(Equal(int32(2)))
		}).Should(Succeed())
		out := kubectl("get", "rlp", "-n", ns)
		GinkgoWriter.Print(out)
		Expect(out).To(MatchRegexp(`(?m)^shop\s+TokenBucket 5/1h\s+True\s+2\s`))
	})

	It("enforces the limit across both replicas through the shared Redis, exactly", func() {
		Eventually(func() map[int]int { return tally(podIPs, 8, newClient()) }).Should(Equal(map[int]int{200: 5, 429: 3}))
		for range 3 {
			Expect(tally(podIPs, 12, newClient())).To(Equal(map[int]int{200: 5, 429: 7}))
		}
	})

	It("brings a policy edit to the running sidecars through kubelet's ConfigMap update", func(ctx context.Context) {
		var before []float64
		for _, ip := range podIPs {
			v, err := metric(ip, "sluice_config_generation")
			Expect(err).NotTo(HaveOccurred())
			before = append(before, v)
		}
		start := time.Now()
		applyPolicy(9)

		var rendered string
		Eventually(func(g Gomega) {
			var doc *policy.Document
			doc, rendered = renderedPolicy(ctx, g)
			g.Expect(doc.Policies[0].Rules[0].Limit).To(Equal(int64(9)))
		}).WithPolling(50 * time.Millisecond).Should(Succeed())
		inAPI := time.Since(start)

		// kubelet swaps the volume's ..data symlink at a pod sync: watch the files it wrote.
		Eventually(func(g Gomega) {
			for _, p := range pods {
				data, err := os.ReadFile(volumeFile(&p, "kubernetes.io~configmap", inject.PoliciesVolume, policy.DataKey))
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(string(data)).To(Equal(rendered))
			}
		}, 150*time.Second, 50*time.Millisecond).Should(Succeed())
		inVolumes := time.Since(start)

		Eventually(func(g Gomega) {
			for i, ip := range podIPs {
				v, err := metric(ip, "sluice_config_generation")
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(v).To(BeNumerically(">", before[i]))
			}
		}).WithPolling(50 * time.Millisecond).Should(Succeed())
		reloaded := time.Since(start)

		Eventually(func() map[int]int { return tally(podIPs, 12, newClient()) }).Should(Equal(map[int]int{200: 9, 429: 3}))
		enforced := time.Since(start)
		report := fmt.Sprintf("ConfigMap rendered %s, in both pods' volumes (kubelet) %s, reloaded by both sidecars %s, enforced %s after kubectl apply",
			inAPI.Round(time.Millisecond), inVolumes.Round(time.Millisecond), reloaded.Round(time.Millisecond), enforced.Round(time.Millisecond))
		AddReportEntry("policy edit propagation", report)
		GinkgoWriter.Println(report)
		fmt.Fprintln(os.Stderr, "realnode: policy edit propagation:", report)
	})

	It("keeps serving on each pod's share while Redis is down, and shares again when it is back", func() {
		node("redis", "stop")
		// limit 9 over 2 replicas: by their rank among the ready pods the controller lists, one
		// sidecar admits 5 of a client's requests and the other 4, 9 together, exactly the
		// limit; no request fails.
		for range 3 {
			h := newClient()
			first, second := tally(podIPs[:1], 10, h), tally(podIPs[1:], 10, h)
			Expect(first[200] + first[429]).To(Equal(10))
			Expect(second[200] + second[429]).To(Equal(10))
			Expect([]int{first[200], second[200]}).To(ConsistOf(5, 4))
		}

		By("starting Redis again")
		node("redis", "start")
		// Each pod alone admits the whole limit once it decides in Redis again: each has its
		// own breaker cooldown (jittered) and redial backoff, so each is waited for.
		for i := range podIPs {
			Eventually(func() map[int]int {
				return tally(podIPs[i:i+1], 12, newClient())
			}).Should(Equal(map[int]int{200: 9, 429: 3}), "pod %d", i)
		}
		Expect(tally(podIPs, 12, newClient())).To(Equal(map[int]int{200: 9, 429: 3}))
	})

	// The control-plane-down case of issue 15's fault matrix (controlplane_test.go). Last: it
	// stops and restarts kube-apiserver and the manager, scales web up and back down.
	It("keeps enforcing the last good file with the control plane down, and reports the pods created meanwhile as uninjected", func(ctx context.Context) {
		controlPlaneDown(ctx, pods, podIPs)
	})
})
