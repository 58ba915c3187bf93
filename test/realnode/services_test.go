//go:build realnode

package realnode

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/inject"
	"github.com/sluice-dev/sluice/internal/webhook"
)

const servicesNS = "realnode-services"

// Through Services, as clients reach pods: kube-proxy sends a Service's traffic to the port
// its targetPort names, so whether the sidecar sees it is the Service's business. The pods
// take over their port named http (sluice.dev/take-over-port), so a Service that targets
// http reaches the sidecar with no edit; one that targets 8080 goes around it, and the policy
// says so.
var _ = Describe("Services in front of injected pods", Ordered, func() {
	const limit = 3
	var named, numeric string // the two Services' cluster IPs

	BeforeAll(func(ctx context.Context) {
		Expect(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: servicesNS}})).To(Succeed())
		f := filepath.Join(GinkgoT().TempDir(), "policy.yaml")
		Expect(os.WriteFile(f, fmt.Appendf(nil, `apiVersion: sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata:
  name: api
spec:
  podSelector:
    matchLabels: {app: api}
  rules:
  - name: per-client
    key: [{header: {name: X-Client}}]
    algorithm: TokenBucket
    limit: %d
    window: 1h
`, limit), 0o600)).To(Succeed())
		kubectl("apply", "-n", servicesNS, "-f", f)

		labels := map[string]string{"app": "api"}
		deployment := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: servicesNS, Name: "api"},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To[int32](2),
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{
						inject.AnnotationInject: "true", inject.AnnotationTakeOverPort: "http",
					}},
					Spec: corev1.PodSpec{
						TerminationGracePeriodSeconds: ptr.To[int64](2),
						Containers: []corev1.Container{{
							Name: "app", Image: "sluice.local/upstream:dev", ImagePullPolicy: corev1.PullNever,
							Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
							// A probe that names the port: it must still reach the application.
							ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{
								HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromString("http")},
							}},
						}},
					},
				},
			},
		}
		waitForInjection(ctx, servicesNS, deployment.Spec.Template)
		Expect(k8s.Create(ctx, deployment)).To(Succeed())
		for name, target := range map[string]intstr.IntOrString{"api": intstr.FromString("http"), "api-direct": intstr.FromInt32(8080)} {
			Expect(k8s.Create(ctx, &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Namespace: servicesNS, Name: name},
				Spec: corev1.ServiceSpec{
					Selector: labels,
					Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: target}},
				},
			})).To(Succeed())
		}
		Eventually(func(g Gomega) {
			var d appsv1.Deployment
			g.Expect(k8s.Get(ctx, types.NamespacedName{Namespace: servicesNS, Name: "api"}, &d)).To(Succeed())
			g.Expect(d.Status.ReadyReplicas).To(Equal(int32(2)))
			g.Expect(d.Status.UpdatedReplicas).To(Equal(int32(2)))
		}).Should(Succeed())
		named, numeric = clusterIP(ctx, "api"), clusterIP(ctx, "api-direct")
	})

	It("limits a Service that targets the port by name once the sidecar takes it over, with no edit to the Service", func(ctx context.Context) {
		var svc corev1.Service
		Expect(k8s.Get(ctx, types.NamespacedName{Namespace: servicesNS, Name: "api"}, &svc)).To(Succeed())
		Expect(svc.Spec.Ports[0].TargetPort).To(Equal(intstr.FromString("http")), "the Service is as created")
		var pods corev1.PodList
		Expect(k8s.List(ctx, &pods, client.InNamespace(servicesNS), client.MatchingLabels{"app": "api"})).To(Succeed())
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil {
				continue
			}
			Expect(webhook.HasSidecar(&p)).To(BeTrue())
			Expect(p.Spec.InitContainers[0].Ports).To(ContainElement(HaveField("Name", "http")), "the sidecar's port took the name")
		}
		// Through kube-proxy: the limit holds whichever replica each request lands on.
		Eventually(func() map[int]int { return tallyService(named, 2*limit) }).Should(Equal(map[int]int{200: limit, 429: limit}))
	})

	It("reports a Service that targets the port by number as going around the sidecar, which it does", func(ctx context.Context) {
		Eventually(func(g Gomega) {
			var p v1alpha1.RateLimitPolicy
			g.Expect(k8s.Get(ctx, types.NamespacedName{Namespace: servicesNS, Name: "api"}, &p)).To(Succeed())
			g.Expect(p.Status.BypassingServices).To(Equal([]string{"api-direct"}))
			c := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionSidecarBypassed)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(c.Message).To(ContainSubstring("api-direct"))
		}).Should(Succeed())
		out := kubectl("get", "rlp", "-n", servicesNS, "-o", "wide")
		GinkgoWriter.Print(out)
		Expect(out).To(MatchRegexp(`(?m)^api\s.*\["?api-direct"?\]`))
		// The report is true: what goes through that Service is not limited.
		Expect(tallyService(numeric, 2*limit)).To(Equal(map[int]int{200: 2 * limit}))
	})
})

// waitForInjection waits until the webhook injects a pod of template in ns (a server-side dry
// run goes through it): the manager may still be starting.
func waitForInjection(ctx context.Context, ns string, template corev1.PodTemplateSpec) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		probe := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "probe-", Annotations: template.Annotations},
			Spec:       *template.Spec.DeepCopy(),
		}
		g.Expect(k8s.Create(ctx, probe, client.DryRunAll)).To(Succeed())
		g.Expect(webhook.HasSidecar(probe)).To(BeTrue(), "the webhook did not inject yet")
	}, 2*time.Minute).Should(Succeed())
}

func clusterIP(ctx context.Context, name string) string {
	GinkgoHelper()
	var svc corev1.Service
	Expect(k8s.Get(ctx, types.NamespacedName{Namespace: servicesNS, Name: name}, &svc)).To(Succeed())
	Expect(svc.Spec.ClusterIP).To(HavePrefix("198.19.0."))
	return svc.Spec.ClusterIP
}

// tallyService sends n requests, as one new client, to a Service's port 80 and counts the
// answers by status (0 for a transport error), each on a new connection so that kube-proxy
// picks a replica for each.
func tallyService(ip string, n int) map[int]int {
	return tallyAt(n, newClient(), true, func(int) string { return fmt.Sprintf("http://%s/", ip) })
}
