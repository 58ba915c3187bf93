//go:build realnode

package realnode

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/controller"
	"github.com/sluice-dev/sluice/internal/inject"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/webhook"
)

// Helpers of the control-plane-down case (the last spec of realnode_test.go).

// The manager as config/default installs it.
const (
	managerNamespace  = "sluice-system"
	managerDeployment = "sluice-controller-manager"
	// managerMetricsPort is its --metrics-bind-address (HTTPS, token authn and authz).
	managerMetricsPort = 8443
	// managerLease is the manager's leader election lock (cmd/manager's LeaderElectionID).
	managerLease = "sluice-manager.sluice.dev"
	// metricsReaderRole is config/rbac/metrics_reader_role.yaml after kustomize's name prefix.
	metricsReaderRole = "sluice-metrics-reader"
)

var managerLabels = client.MatchingLabels{"app.kubernetes.io/name": "sluice", "app.kubernetes.io/component": "manager"}

// add sums the answers of tallies.
func add(total, counts map[int]int) {
	for code, n := range counts {
		total[code] += n
	}
}

// sidecarGet fetches a path of a sidecar's metrics port and returns the status code.
func sidecarGet(podIP, path string) (int, error) {
	resp, err := httpClient.Get(fmt.Sprintf("http://%s:%d%s", podIP, inject.DefaultMetricsPort, path))
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

// metricSum adds up every sample of a sidecar's metric name, whatever its labels; 0 when it
// has none yet.
func metricSum(podIP, name string) (float64, error) {
	body, err := sidecarMetrics(podIP)
	if err != nil {
		return 0, err
	}
	sum := 0.0
	for _, m := range regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(name)+`(?:\{[^}]*\})? (\S+)$`).FindAllSubmatch(body, -1) {
		v, err := strconv.ParseFloat(string(m[1]), 64)
		if err != nil {
			return 0, err
		}
		sum += v
	}
	return sum, nil
}

// sidecarState is what a sidecar's /metrics says about the configuration it uses.
type sidecarState struct {
	Generation, Policies, Reloads, Failures, Started float64
}

func readSidecarState(g Gomega, podIP string) sidecarState {
	var s sidecarState
	for name, v := range map[string]*float64{
		"sluice_config_generation":            &s.Generation,
		"sluice_config_policies":              &s.Policies,
		"sluice_config_reloads_total":         &s.Reloads,
		"sluice_config_reload_failures_total": &s.Failures,
		"process_start_time_seconds":          &s.Started,
	} {
		f, err := metric(podIP, name)
		g.Expect(err).NotTo(HaveOccurred())
		*v = f
	}
	return s
}

// policiesDir is the directory of a pod's policies volume on the host, as kubelet lays it out:
// policies.json is a symlink into ..data, itself a symlink to a timestamped directory.
func policiesDir(pod *corev1.Pod) string {
	return filepath.Dir(volumeFile(pod, "kubernetes.io~configmap", inject.PoliciesVolume, policy.DataKey))
}

// swapData points a volume's ..data at target the way kubelet's atomic writer does: a new
// symlink renamed over the old one, so the sidecar sees one complete change.
func swapData(dir, target string) {
	GinkgoHelper()
	tmp := filepath.Join(dir, "..data_tmp")
	_ = os.Remove(tmp)
	Expect(os.Symlink(target, tmp)).To(Succeed())
	Expect(os.Rename(tmp, filepath.Join(dir, "..data"))).To(Succeed())
}

// containerPIDs returns the host processes of a container: those whose cgroup path names its
// ID (kubelet's cgroupfs driver puts each container in a cgroup named by it).
func containerPIDs(containerID string) []int {
	GinkgoHelper()
	_, id, ok := strings.Cut(containerID, "://")
	Expect(ok).To(BeTrue(), "container ID %q", containerID)
	paths, err := filepath.Glob("/proc/[0-9]*/cgroup")
	Expect(err).NotTo(HaveOccurred())
	var pids []int
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil || !strings.Contains(string(b), id) {
			continue // gone meanwhile, or another container's
		}
		pid, err := strconv.Atoi(strings.Split(p, "/")[2])
		Expect(err).NotTo(HaveOccurred())
		pids = append(pids, pid)
	}
	return pids
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue && p.DeletionTimestamp == nil
		}
	}
	return false
}

func managerPods(g Gomega, ctx context.Context) []corev1.Pod {
	var list corev1.PodList
	g.Expect(k8s.List(ctx, &list, client.InNamespace(managerNamespace), managerLabels)).To(Succeed())
	return list.Items
}

func scale(namespace, deployment string, replicas int32) {
	GinkgoHelper()
	kubectl("-n", namespace, "scale", "deployment/"+deployment, fmt.Sprintf("--replicas=%d", replicas))
}

func shopStatus(g Gomega, ctx context.Context) v1alpha1.RateLimitPolicyStatus {
	var p v1alpha1.RateLimitPolicy
	g.Expect(k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: "shop"}, &p)).To(Succeed())
	return p.Status
}

// sidecarMissingEvent returns the manager's Warning event on the policy shop naming pod.
func sidecarMissingEvent(g Gomega, ctx context.Context, pod string) *eventsv1.Event {
	var list eventsv1.EventList
	g.Expect(k8s.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
	for i, e := range list.Items {
		if e.Reason == controller.ReasonSidecarMissing && e.Regarding.Name == "shop" && e.Related != nil && e.Related.Name == pod {
			return &list.Items[i]
		}
	}
	return nil
}

// metricsToken returns a bearer token the manager's metrics endpoint admits: a ServiceAccount
// bound to the metrics-reader ClusterRole, as a Prometheus would be.
func metricsToken() string {
	GinkgoHelper()
	kubectl("-n", ns, "create", "serviceaccount", "metrics-scraper")
	kubectl("create", "clusterrolebinding", "realnode-metrics-scraper", "--clusterrole", metricsReaderRole,
		"--serviceaccount", ns+":metrics-scraper")
	DeferCleanup(func() { kubectl("delete", "clusterrolebinding", "realnode-metrics-scraper", "--ignore-not-found") })
	return strings.TrimSpace(kubectl("-n", ns, "create", "token", "metrics-scraper"))
}

// managerMetric reads the sample of name for the policy shop from a manager pod's metrics.
func managerMetric(podIP, token, name string) (float64, error) {
	// The endpoint's certificate is self-signed (no --metrics-cert-dir); the token is what
	// this test checks, not the certificate.
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // see above
	body, err := scrape(c, fmt.Sprintf("https://%s:%d/metrics", podIP, managerMetricsPort), token)
	if err != nil {
		return 0, err
	}
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `\{namespace="` + ns + `",policy="shop"\} (\S+)$`).FindSubmatch(body)
	if m == nil {
		return 0, fmt.Errorf("%s: no sample of %s for %s/shop", podIP, name, ns)
	}
	return strconv.ParseFloat(string(m[1]), 64)
}

// controlPlaneReport logs the figures and, when SLUICE_CONTROLPLANE_REPORT names a file
// (`make chaos`), writes them there for bench/chaos.md.
func controlPlaneReport(lines ...string) {
	GinkgoHelper()
	text := strings.Join(lines, "\n") + "\n"
	AddReportEntry("control plane down", text)
	GinkgoWriter.Print(text)
	fmt.Fprint(os.Stderr, "realnode: control plane down:\n"+text)
	if path := os.Getenv("SLUICE_CONTROLPLANE_REPORT"); path != "" {
		Expect(os.WriteFile(path, []byte(text), 0o644)).To(Succeed())
	}
}

func secs(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }

// controlPlaneDown is the fault-matrix case of issue 15: kube-apiserver and the manager
// stopped while the sidecars serve.
func controlPlaneDown(ctx context.Context, pods []corev1.Pod, podIPs []string) {
	var shop v1alpha1.RateLimitPolicy
	Expect(k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: "shop"}, &shop)).To(Succeed())
	limit := int(shop.Spec.Rules[0].Limit)
	over := map[int]int{200: limit, 429: 3} // limit+3 requests of one client
	// exact sends each pod alone limit+3 requests of a new client: decided in Redis, a pod
	// admits exactly the limit (its local share is smaller). A round in which the sidecar
	// decided some request locally (a Redis call over --redis-timeout on this loaded machine:
	// sluice_fallback_decisions_total grew) proves nothing about enforcement and is sent again,
	// up to 5 times; every answer of every round must be 200 or 429.
	noisy := 0
	exact := func(g Gomega, what string) map[int]int {
		total := map[int]int{}
		for i := range podIPs {
			inRedis := false
			for range 5 {
				before, err := metricSum(podIPs[i], "sluice_fallback_decisions_total")
				g.Expect(err).NotTo(HaveOccurred())
				got := tally(podIPs[i:i+1], limit+3, newClient())
				after, err := metricSum(podIPs[i], "sluice_fallback_decisions_total")
				g.Expect(err).NotTo(HaveOccurred())
				add(total, got)
				g.Expect(got[200]+got[429]).To(Equal(limit+3), "%s: pod %d answered other than 200 or 429: %v", what, i, got)
				if after == before {
					g.Expect(got).To(Equal(over), "%s: pod %d, decided in Redis", what, i)
					inRedis = true
					break
				}
				noisy++
			}
			g.Expect(inRedis).To(BeTrue(), "%s: pod %d decided locally in 5 rounds in a row", what, i)
		}
		return total
	}
	Eventually(func(g Gomega) { exact(g, "before") }).Should(Succeed())

	// Settled first: the ConfigMap rendered for both ready pods is in both volumes and loaded,
	// or kubelet could still write a render it fetched before the API server stopped.
	for i := range pods {
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(&pods[i]), &pods[i])).To(Succeed())
	}
	Eventually(func(g Gomega) {
		doc, rendered := renderedPolicy(ctx, g)
		g.Expect(doc.Policies[0].Pods).To(ConsistOf(pods[0].Name, pods[1].Name))
		for i := range pods {
			b, err := os.ReadFile(volumeFile(&pods[i], "kubernetes.io~configmap", inject.PoliciesVolume, policy.DataKey))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(string(b)).To(Equal(rendered), "pod %d's volume", i)
		}
	}, 150*time.Second).Should(Succeed())
	for i := range podIPs {
		gen := readSidecarState(Default, podIPs[i]).Generation
		Consistently(func(g Gomega) float64 { return readSidecarState(g, podIPs[i]).Generation }, 2*time.Second).Should(Equal(gen))
	}
	// What the sidecars use, and the files they read it from.
	good := make([]string, len(pods))
	before := make([]sidecarState, len(pods))
	for i := range pods {
		b, err := os.ReadFile(volumeFile(&pods[i], "kubernetes.io~configmap", inject.PoliciesVolume, policy.DataKey))
		Expect(err).NotTo(HaveOccurred())
		good[i] = string(b)
		before[i] = readSidecarState(Default, podIPs[i])
		Expect(before[i].Policies).To(Equal(1.0))
	}
	var web0 appsv1.Deployment
	Expect(k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: "web"}, &web0)).To(Succeed())
	var mgr0 appsv1.Deployment
	Expect(k8s.Get(ctx, types.NamespacedName{Namespace: managerNamespace, Name: managerDeployment}, &mgr0)).To(Succeed())
	managers := *mgr0.Spec.Replicas
	Expect(managers).To(BeNumerically(">", 0))

	By("stopping the manager, then kube-apiserver")
	// Undone in reverse on any failure, so that the suite's teardown finds a working cluster.
	DeferCleanup(func() { scale(managerNamespace, managerDeployment, managers) })
	DeferCleanup(func() { node("apiserver", "start") })
	scale(managerNamespace, managerDeployment, 0)
	Eventually(func(g Gomega) { g.Expect(managerPods(g, ctx)).To(BeEmpty()) }, 2*time.Minute).Should(Succeed())
	node("apiserver", "stop")
	down := time.Now()
	Expect(k8s.Get(ctx, client.ObjectKeyFromObject(&shop), &shop)).NotTo(Succeed(), "the API server still answers")

	outage := map[int]int{}
	By("enforcing exactly, in Redis, with no API server")
	add(outage, exact(Default, "API server down"))

	By("keeping the last good file when the volume changes to a broken one")
	dir := policiesDir(&pods[0])
	orig, err := os.Readlink(filepath.Join(dir, "..data"))
	Expect(err).NotTo(HaveOccurred())
	broken := filepath.Join(dir, "..sluice-test-broken")
	Expect(os.Mkdir(broken, 0o755)).To(Succeed())
	DeferCleanup(func() { _ = os.RemoveAll(broken) })
	Expect(os.WriteFile(filepath.Join(broken, policy.DataKey), []byte(`{"policies": [`), 0o644)).To(Succeed())
	swapData(dir, filepath.Base(broken))
	Eventually(func(g Gomega) {
		g.Expect(readSidecarState(g, podIPs[0]).Failures).To(Equal(before[0].Failures + 1))
	}).Should(Succeed())
	s := readSidecarState(Default, podIPs[0])
	Expect(s.Generation).To(Equal(before[0].Generation), "a broken file replaced the good one")
	Expect(s.Policies).To(Equal(1.0))
	Expect(sidecarGet(podIPs[0], "/readyz")).To(Equal(http.StatusOK))
	add(outage, exact(Default, "broken file"))
	swapData(dir, orig)
	Expect(os.RemoveAll(broken)).To(Succeed())

	By("keeping the volumes and the configuration in use through kubelet's pod syncs (every 10 s) without an API server")
	Consistently(func(g Gomega) {
		for i := range pods {
			b, err := os.ReadFile(volumeFile(&pods[i], "kubernetes.io~configmap", inject.PoliciesVolume, policy.DataKey))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(string(b)).To(Equal(good[i]), "pod %d's policies.json changed", i)
			s := readSidecarState(g, podIPs[i])
			g.Expect(s.Generation).To(Equal(before[i].Generation), "pod %d reloaded", i)
			g.Expect(s.Policies).To(Equal(1.0))
			g.Expect(sidecarGet(podIPs[i], "/readyz")).To(Equal(http.StatusOK))
		}
		add(outage, exact(g, "volumes"))
	}, 25*time.Second, 2500*time.Millisecond).Should(Succeed())

	By("restarting a sidecar, which loads the last good file again")
	pids := containerPIDs(pods[0].Status.InitContainerStatuses[0].ContainerID)
	Expect(pids).NotTo(BeEmpty(), "no process of pod 0's sidecar on the host")
	for _, pid := range pids {
		Expect(syscall.Kill(pid, syscall.SIGKILL)).To(Succeed())
	}
	killed := time.Now()
	var restarted sidecarState
	Eventually(func(g Gomega) {
		restarted = readSidecarState(g, podIPs[0])
		g.Expect(restarted.Started).To(BeNumerically(">", before[0].Started))
		g.Expect(sidecarGet(podIPs[0], "/readyz")).To(Equal(http.StatusOK))
	}, 2*time.Minute, 100*time.Millisecond).Should(Succeed())
	serving := time.Since(killed)
	// A new process: its first load is generation 1, from the file kubelet keeps.
	Expect(restarted).To(Equal(sidecarState{Generation: 1, Policies: 1, Reloads: 1, Failures: 0, Started: restarted.Started}))
	add(outage, exact(Default, "restarted sidecar"))
	Expect(outage).To(HaveKey(200))
	Expect(outage).To(HaveLen(2), "answers other than 200 and 429 while the API server was down: %v", outage)

	By("starting kube-apiserver again, the manager still stopped")
	node("apiserver", "start")
	upAgain := time.Now()
	Eventually(func(g Gomega) { g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(&shop), &shop)).To(Succeed()) }).Should(Succeed())

	By("scaling the application up: the webhook is unreachable, so the new pod starts without the sidecar")
	scale(ns, "web", *web0.Spec.Replicas+1)
	DeferCleanup(func() { scale(ns, "web", *web0.Spec.Replicas) })
	known := map[string]bool{}
	for _, p := range pods {
		known[p.Name] = true
	}
	var bare corev1.Pod
	Eventually(func(g Gomega) {
		var list corev1.PodList
		g.Expect(k8s.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{"app": "web"})).To(Succeed())
		var fresh []corev1.Pod
		for _, p := range list.Items {
			if !known[p.Name] {
				fresh = append(fresh, p)
			}
		}
		g.Expect(fresh).To(HaveLen(1), "no new pod of web: was its creation refused (the webhook failing closed)?")
		bare = fresh[0]
		g.Expect(podReady(&bare)).To(BeTrue(), "pod %s not ready", bare.Name)
	}, 3*time.Minute).Should(Succeed())
	Expect(bare.Annotations).To(HaveKeyWithValue(inject.AnnotationInject, "true"))
	Expect(webhook.HasSidecar(&bare)).To(BeFalse(), "the pod was injected: the webhook answered")
	// Not rate limited: the application answers every request itself.
	for range limit + 3 {
		resp, err := httpClient.Get(fmt.Sprintf("http://%s:8080/", bare.Status.PodIP))
		Expect(err).NotTo(HaveOccurred())
		_ = resp.Body.Close()
		Expect(resp.StatusCode).To(Equal(http.StatusOK))
	}
	// Nobody has said so yet: the status is the manager's to write.
	Expect(shopStatus(Default, ctx).UninjectedPods).To(BeZero())

	By("starting the manager: it reports the pod")
	scale(managerNamespace, managerDeployment, managers)
	back := time.Now()
	var managerReady, reported time.Duration
	Eventually(func(g Gomega) {
		if managerReady == 0 {
			for _, p := range managerPods(g, ctx) {
				if podReady(&p) {
					managerReady = time.Since(back)
				}
			}
		}
		g.Expect(shopStatus(g, ctx).UninjectedPods).To(Equal(int32(1)))
		reported = time.Since(back)
	}, 3*time.Minute, 100*time.Millisecond).Should(Succeed())
	// Only the leader reconciles: a new one waits for the old lease to expire unless its holder released it.
	var lease coordinationv1.Lease
	Expect(k8s.Get(ctx, types.NamespacedName{Namespace: managerNamespace, Name: managerLease}, &lease)).To(Succeed())
	Expect(lease.Spec.AcquireTime).NotTo(BeNil())
	leader := lease.Spec.AcquireTime.Sub(back)
	var event *eventsv1.Event
	Eventually(func(g Gomega) {
		event = sidecarMissingEvent(g, ctx, bare.Name)
		g.Expect(event).NotTo(BeNil(), "no %s event naming %s", controller.ReasonSidecarMissing, bare.Name)
	}).Should(Succeed())
	Expect(event.Type).To(Equal(corev1.EventTypeWarning))
	Expect(event.Note).To(ContainSubstring(bare.Name))
	GinkgoWriter.Print(kubectl("get", "rlp", "-n", ns, "-o", "wide"))

	token := metricsToken()
	Eventually(func(g Gomega) {
		mp := managerPods(g, ctx)
		g.Expect(mp).NotTo(BeEmpty())
		for _, p := range mp {
			g.Expect(p.Status.PodIP).NotTo(BeEmpty())
			g.Expect(managerMetric(p.Status.PodIP, token, controller.MetricPolicyUninjectedPods)).To(Equal(1.0), "manager pod %s", p.Name)
		}
	}).Should(Succeed())

	controlPlaneReport(
		fmt.Sprintf("- kube-apiserver stopped for %s, the manager (%d replicas scaled to 0) from before it stopped until %s after it was back: "+
			"%d requests to the two sidecars, %d admitted, %d denied, none failed; each pod alone admitted exactly the limit (%d of %d) in every round decided in Redis "+
			"(%d rounds, before and during the outage, had a Redis call time out on the loaded machine and were sent again)",
			secs(upAgain.Sub(down)), managers, secs(back.Sub(upAgain)), outage[200]+outage[429], outage[200], outage[429], limit, limit+3, noisy),
		fmt.Sprintf("- a broken policies.json swapped into a pod's volume by the test (a new ..data, as kubelet's atomic writer does): reload failure counted, generation %.0f kept, enforcement unchanged; "+
			"the volumes stayed byte-identical through 25 s of kubelet pod syncs (syncFrequency 10s) without an API server",
			before[0].Generation),
		fmt.Sprintf("- a sidecar killed (SIGKILL) during the outage: kubelet restarted it and it served the last good file (generation 1, 1 policy) %s after the kill",
			secs(serving)),
		fmt.Sprintf("- a pod created (Deployment scaled from %d to %d) with the API server back and the manager stopped: it runs without the sidecar (failurePolicy Ignore), unlimited",
			*web0.Spec.Replicas, *web0.Spec.Replicas+1),
		fmt.Sprintf("- manager scaled back to %d: first replica Ready %s later, leader lease acquired at %s, **status.uninjectedPods = 1 %s after the scale-up**; "+
			"then the Warning event %s naming the pod and %s = 1 on every replica",
			managers, secs(managerReady), secs(leader), secs(reported), controller.ReasonSidecarMissing, controller.MetricPolicyUninjectedPods),
	)

	By("scaling back down, removing the uninjected pod")
	// A ReplicaSet removes a pod that is not ready before the deletion cost counts.
	Eventually(func(g Gomega) {
		for _, p := range append(slices.Clone(pods), bare) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(&p), &p)).To(Succeed())
			g.Expect(podReady(&p)).To(BeTrue(), "pod %s not ready", p.Name)
		}
	}, 2*time.Minute).Should(Succeed())
	kubectl("-n", ns, "annotate", "pod", bare.Name, "controller.kubernetes.io/pod-deletion-cost=-1000")
	scale(ns, "web", *web0.Spec.Replicas)
	Eventually(func(g Gomega) {
		var list corev1.PodList
		g.Expect(k8s.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{"app": "web"})).To(Succeed())
		var names []string
		for _, p := range list.Items {
			names = append(names, p.Name)
		}
		g.Expect(names).To(ConsistOf(pods[0].Name, pods[1].Name))
		g.Expect(shopStatus(g, ctx).UninjectedPods).To(BeZero())
	}, 2*time.Minute).Should(Succeed())
}
