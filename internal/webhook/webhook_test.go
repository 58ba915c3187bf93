package webhook_test

import (
	"context"
	"fmt"
	"sync/atomic"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

var nsCounter atomic.Int64

// newNamespace creates a namespace for one spec; envtest never deletes namespaces.
func newNamespace(ctx context.Context) string {
	name := fmt.Sprintf("spec-%d", nsCounter.Add(1))
	Expect(k8sClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})).To(Succeed())
	return name
}

// ensureNamespace creates a namespace unless it exists (the system ones do).
func ensureNamespace(ctx context.Context, name string) {
	err := k8sClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if !apierrors.IsAlreadyExists(err) {
		Expect(err).NotTo(HaveOccurred())
	}
}

// appPod is a pod with one application container listening on 8080 and one volume, changed by
// the mutators.
func appPod(ns, name string, annotations map[string]string, mutate ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": "checkout"}, Annotations: annotations},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: "app", Image: "example.invalid/app:1",
				Ports:        []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
			}},
			Volumes:                       []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
			TerminationGracePeriodSeconds: ptr.To[int64](0),
		},
	}
	for _, m := range mutate {
		m(p)
	}
	return p
}

// restricted makes the pod meet Pod Security "restricted", which config/default's namespace
// enforces.
func restricted(p *corev1.Pod) {
	p.Spec.SecurityContext = &corev1.PodSecurityContext{
		RunAsNonRoot: ptr.To(true), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	for i := range p.Spec.Containers {
		p.Spec.Containers[i].SecurityContext = &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptr.To(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		}
	}
}

var inject = map[string]string{"sluice.dev/inject": "true"}

// with returns inject plus more annotations.
func with(kv ...string) map[string]string {
	out := map[string]string{"sluice.dev/inject": "true"}
	for i := 0; i < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

// create creates the pod and returns it as the API server stored it.
func create(ctx context.Context, pod *corev1.Pod) *corev1.Pod {
	Expect(k8sClient.Create(ctx, pod)).To(Succeed())
	var stored corev1.Pod
	Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}, &stored)).To(Succeed())
	return &stored
}

// storedWithoutWebhook is what the API server stores for pod when nothing mutates it: the
// same pod created through a dry run in a namespace the webhook never sees.
func storedWithoutWebhook(ctx context.Context, pod *corev1.Pod) corev1.PodSpec {
	p := pod.DeepCopy()
	p.Namespace = "kube-public"
	ensureNamespace(ctx, p.Namespace)
	Expect(k8sClient.Create(ctx, p, &client.CreateOptions{DryRun: []string{metav1.DryRunAll}})).To(Succeed())
	return p.Spec
}

func httpProbe(path string, period, failures int32) *corev1.Probe {
	return &corev1.Probe{
		ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
			Path: path, Port: intstr.FromInt32(9090), Scheme: corev1.URISchemeHTTP,
		}},
		TimeoutSeconds: 1, PeriodSeconds: period, SuccessThreshold: 1, FailureThreshold: failures,
	}
}

// expectedSidecar is the container the suite's configuration injects with default
// annotations, written out in full: what the pod spec must hold, field by field.
func expectedSidecar() corev1.Container {
	return corev1.Container{
		Name:  "sluice-sidecar",
		Image: "example.invalid/sluice-sidecar:test",
		Args: []string{
			"--listen=:8081",
			"--upstream=http://127.0.0.1:8080",
			"--config=/etc/sluice/policies.json",
			"--pod-labels-file=/etc/podinfo/labels",
			"--metrics-listen=:9090",
			"--redis-url=rediss://redis.sluice-system.svc:6379/0",
			"--redis-timeout=50ms",
		},
		Ports: []corev1.ContainerPort{
			{Name: "sluice-http", ContainerPort: 8081, Protocol: corev1.ProtocolTCP},
			{Name: "sluice-metrics", ContainerPort: 9090, Protocol: corev1.ProtocolTCP},
		},
		Env: []corev1.EnvVar{{Name: "SLUICE_POD_NAME", ValueFrom: &corev1.EnvVarSource{
			FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.name"},
		}}, {Name: "SLUICE_REDIS_PASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "sluice-redis"}, Key: "password", Optional: ptr.To(false),
		}}}},
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")},
		},
		RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
		VolumeMounts: []corev1.VolumeMount{
			{Name: "sluice-policies", MountPath: "/etc/sluice", ReadOnly: true},
			{Name: "sluice-podinfo", MountPath: "/etc/podinfo", ReadOnly: true},
		},
		StartupProbe:             httpProbe("/healthz", 1, 30),
		ReadinessProbe:           httpProbe("/readyz", 5, 3),
		LivenessProbe:            httpProbe("/healthz", 10, 3),
		TerminationMessagePath:   "/dev/termination-log",
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		ImagePullPolicy:          corev1.PullIfNotPresent,
		SecurityContext: &corev1.SecurityContext{
			RunAsNonRoot:             ptr.To(true),
			RunAsUser:                ptr.To[int64](65532),
			RunAsGroup:               ptr.To[int64](65532),
			ReadOnlyRootFilesystem:   ptr.To(true),
			AllowPrivilegeEscalation: ptr.To(false),
			Privileged:               ptr.To(false),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
	}
}

func expectedVolumes() []corev1.Volume {
	return []corev1.Volume{
		{Name: "sluice-policies", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: "sluice-policies"},
			Optional:             ptr.To(true),
			DefaultMode:          ptr.To[int32](0o444),
		}}},
		{Name: "sluice-podinfo", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{
			Items:       []corev1.DownwardAPIVolumeFile{{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.labels"}}},
			DefaultMode: ptr.To[int32](0o444),
		}}},
	}
}

var _ = Describe("Sidecar injection", func() {
	var ns string
	BeforeEach(func(ctx context.Context) { ns = newNamespace(ctx) })

	It("injects an annotated pod with exactly the native sidecar and its volumes", func(ctx context.Context) {
		pod := appPod(ns, "web", inject)
		plain := storedWithoutWebhook(ctx, pod)
		got := create(ctx, pod)

		Expect(got.Spec.InitContainers).To(HaveLen(1))
		Expect(got.Spec.InitContainers[0]).To(Equal(expectedSidecar()))
		Expect(got.Spec.Volumes).To(Equal(append(plain.Volumes, expectedVolumes()...)))

		By("leaving everything else as it was")
		got.Spec.InitContainers = nil
		got.Spec.Volumes = plain.Volumes
		Expect(got.Spec).To(Equal(plain))
		Expect(got.Annotations).To(Equal(inject))
		Expect(got.Labels).To(Equal(map[string]string{"app": "checkout"}))
	})

	It("injects a sidecar that meets Pod Security \"restricted\" on its own", func(ctx context.Context) {
		Expect(k8sClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns + "-restricted",
			Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}}})).To(Succeed())
		got := create(ctx, appPod(ns+"-restricted", "web", inject, restricted))
		Expect(got.Spec.InitContainers).To(Equal([]corev1.Container{expectedSidecar()}))
	})

	It("places the sidecar after the pod's own init containers", func(ctx context.Context) {
		got := create(ctx, appPod(ns, "web", inject, func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "migrate", Image: "example.invalid/migrate:1"}}
		}))
		Expect(got.Spec.InitContainers).To(HaveLen(2))
		Expect(got.Spec.InitContainers[0].Name).To(Equal("migrate"))
		Expect(got.Spec.InitContainers[1]).To(Equal(expectedSidecar()))
	})

	It("honours every override annotation", func(ctx context.Context) {
		got := create(ctx, appPod(ns, "web", with(
			"sluice.dev/upstream-port", "3000",
			"sluice.dev/listen-port", "8000",
			"sluice.dev/metrics-port", "9100",
			"sluice.dev/image", "registry.example/sluice-sidecar:v2",
			"sluice.dev/cpu-request", "100m",
			"sluice.dev/cpu-limit", "1",
			"sluice.dev/memory-request", "32Mi",
			"sluice.dev/memory-limit", "0",
			"sluice.dev/redis-timeout", "20ms",
		)))
		want := expectedSidecar()
		want.Image = "registry.example/sluice-sidecar:v2"
		want.Args = []string{
			"--listen=:8000",
			"--upstream=http://127.0.0.1:3000",
			"--config=/etc/sluice/policies.json",
			"--pod-labels-file=/etc/podinfo/labels",
			"--metrics-listen=:9100",
			"--redis-url=rediss://redis.sluice-system.svc:6379/0",
			"--redis-timeout=20ms",
		}
		want.Ports[0].ContainerPort, want.Ports[1].ContainerPort = 8000, 9100
		want.Resources = corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")},
		}
		for _, p := range []*corev1.Probe{want.StartupProbe, want.ReadinessProbe, want.LivenessProbe} {
			p.HTTPGet.Port = intstr.FromInt32(9100)
		}
		Expect(got.Spec.InitContainers).To(Equal([]corev1.Container{want}))
	})

	It("takes over the application's named port: Services targeting it by name reach the sidecar, probes naming it the application", func(ctx context.Context) {
		appProbe := func() *corev1.Probe {
			return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromString("http")}}}
		}
		withProbes := func(p *corev1.Pod) {
			c := &p.Spec.Containers[0]
			c.ReadinessProbe, c.LivenessProbe = appProbe(), appProbe()
			c.StartupProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString("http")}}}
			c.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/drain", Port: intstr.FromString("http")}}}
		}
		pod := appPod(ns, "web", with("sluice.dev/take-over-port", "http"), withProbes)
		plain := storedWithoutWebhook(ctx, pod)
		got := create(ctx, pod)

		want := expectedSidecar()
		want.Ports[0].Name = "http"
		Expect(got.Spec.InitContainers).To(Equal([]corev1.Container{want}), "the sidecar's port carries the name, and it forwards to 8080")

		By("leaving the application its port, unnamed, and probing it by number")
		app := plain.Containers[0].DeepCopy()
		app.Ports[0].Name = ""
		for _, pr := range []*corev1.Probe{app.ReadinessProbe, app.LivenessProbe} {
			pr.HTTPGet.Port = intstr.FromInt32(8080)
		}
		app.StartupProbe.TCPSocket.Port = intstr.FromInt32(8080)
		app.Lifecycle.PreStop.HTTPGet.Port = intstr.FromInt32(8080)
		Expect(got.Spec.Containers).To(Equal([]corev1.Container{*app}))
	})

	It("takes over a named port of a second container, forwarding to its number", func(ctx context.Context) {
		got := create(ctx, appPod(ns, "web", with("sluice.dev/take-over-port", "api"), func(p *corev1.Pod) {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "api", Image: "example.invalid/api:1",
				Ports: []corev1.ContainerPort{{Name: "api", ContainerPort: 3000, Protocol: corev1.ProtocolTCP}}})
		}))
		Expect(got.Spec.InitContainers).To(HaveLen(1))
		Expect(got.Spec.InitContainers[0].Args).To(ContainElement("--upstream=http://127.0.0.1:3000"))
		Expect(got.Spec.InitContainers[0].Ports[0].Name).To(Equal("api"))
		Expect(got.Spec.Containers[0].Ports[0].Name).To(Equal("http"), "the other container's port keeps its name")
		Expect(got.Spec.Containers[1].Ports[0].Name).To(BeEmpty())
	})

	DescribeTable("leaves pods that do not ask for the sidecar untouched",
		func(ctx context.Context, annotations map[string]string) {
			pod := appPod(ns, "web", annotations)
			plain := storedWithoutWebhook(ctx, pod)
			before := seen.count(ns)
			got := create(ctx, pod)
			Expect(got.Spec).To(Equal(plain))
			Expect(seen.count(ns)).To(Equal(before+1), "the webhook must have seen the pod and chosen to leave it")
		},
		Entry("no annotations", nil),
		Entry("other annotations", map[string]string{"example.com/team": "payments"}),
		Entry("inject: false", map[string]string{"sluice.dev/inject": "false"}),
		Entry("inject: True (only \"true\" asks)", map[string]string{"sluice.dev/inject": "True"}),
		Entry("overrides without inject", map[string]string{"sluice.dev/listen-port": "nope"}),
	)

	It("is idempotent: re-admitting an injected pod changes nothing", func(ctx context.Context) {
		first := create(ctx, appPod(ns, "first", inject))
		Expect(first.Spec.InitContainers).To(HaveLen(1))

		again := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "again", Labels: first.Labels, Annotations: first.Annotations},
			Spec: *first.Spec.DeepCopy()}
		second := create(ctx, again)
		Expect(second.Spec).To(Equal(first.Spec))
	})

	It("leaves a pod alone that already has a container named sluice-sidecar", func(ctx context.Context) {
		pod := appPod(ns, "own", inject, func(p *corev1.Pod) {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "sluice-sidecar", Image: "example.invalid/own:1"})
		})
		plain := storedWithoutWebhook(ctx, pod)
		Expect(create(ctx, pod).Spec).To(Equal(plain))
	})

	It("never sees pods of the manager's namespace or the system namespaces", func(ctx context.Context) {
		for i, excluded := range []string{managerNamespace, "kube-system", "kube-public", "kube-node-lease"} {
			ensureNamespace(ctx, excluded)
			pod := appPod(excluded, fmt.Sprintf("excluded-%d", i), inject, restricted)
			plain := storedWithoutWebhook(ctx, pod)
			Expect(create(ctx, pod).Spec).To(Equal(plain), excluded)
			Expect(k8sClient.Delete(ctx, pod)).To(Succeed())
			Expect(seen.count(excluded)).To(BeZero(), "the namespaceSelector must keep %s from the webhook", excluded)
		}
	})

	DescribeTable("denies a pod whose annotations cannot be honoured, naming the annotation",
		func(ctx context.Context, pod *corev1.Pod, message string) {
			pod.Namespace = ns
			err := k8sClient.Create(ctx, pod)
			Expect(err).To(HaveOccurred())
			Expect(apierrors.IsForbidden(err)).To(BeTrue(), err.Error())
			Expect(err.Error()).To(ContainSubstring(`admission webhook "inject.sluice.dev" denied the request`))
			Expect(err.Error()).To(ContainSubstring(message))
		},
		Entry("non-numeric upstream port", appPod("", "p", with("sluice.dev/upstream-port", "http")),
			`sluice.dev/upstream-port: "http" is not a port number from 1 to 65535`),
		Entry("upstream port 0", appPod("", "p", with("sluice.dev/upstream-port", "0")), `sluice.dev/upstream-port: "0" is not a port number`),
		Entry("listen port out of range", appPod("", "p", with("sluice.dev/listen-port", "65536")), `sluice.dev/listen-port: "65536" is not a port number`),
		Entry("negative metrics port", appPod("", "p", with("sluice.dev/metrics-port", "-1")), `sluice.dev/metrics-port: "-1" is not a port number`),
		Entry("no port to default the upstream to", appPod("", "p", inject, func(p *corev1.Pod) { p.Spec.Containers[0].Ports = nil }),
			"sluice.dev/upstream-port: not set, and the first container declares no port"),
		Entry("listen port taken by the application", appPod("", "p", with("sluice.dev/upstream-port", "3000", "sluice.dev/listen-port", "8080")),
			`sluice.dev/listen-port: port 8080 is taken by container "app"`),
		Entry("listen port equal to upstream", appPod("", "p", with("sluice.dev/upstream-port", "8081")),
			"sluice.dev/listen-port: 8081 is also the upstream port"),
		Entry("metrics port equal to listen port", appPod("", "p", with("sluice.dev/metrics-port", "8081")),
			"sluice.dev/metrics-port: 8081 is also the listen port"),
		Entry("bad cpu quantity", appPod("", "p", with("sluice.dev/cpu-request", "lots")), `sluice.dev/cpu-request: "lots" is not a non-negative quantity`),
		Entry("bad memory quantity", appPod("", "p", with("sluice.dev/memory-limit", "1Gx")), `sluice.dev/memory-limit: "1Gx" is not a non-negative quantity`),
		Entry("negative quantity", appPod("", "p", with("sluice.dev/cpu-limit", "-1")), `sluice.dev/cpu-limit: "-1" is not a non-negative quantity`),
		Entry("memory request above its limit", appPod("", "p", with("sluice.dev/memory-request", "1Gi")),
			"sluice.dev/memory-request, sluice.dev/memory-limit: the sidecar's memory request 1Gi exceeds its limit 128Mi"),
		Entry("redis timeout that is no duration", appPod("", "p", with("sluice.dev/redis-timeout", "soon")), `sluice.dev/redis-timeout: "soon" is not a duration from 1ms to 10s`),
		Entry("redis timeout too long", appPod("", "p", with("sluice.dev/redis-timeout", "1m")), `sluice.dev/redis-timeout: "1m" is not a duration`),
		Entry("take-over of a port no container names", appPod("", "p", with("sluice.dev/take-over-port", "web")),
			`sluice.dev/take-over-port: "web" names no port of the pod's containers`),
		Entry("take-over of the sidecar's own port", appPod("", "p", with("sluice.dev/take-over-port", "sluice-http")),
			`sluice.dev/take-over-port: "sluice-http" is the sidecar's own port`),
		Entry("take-over contradicting the upstream port", appPod("", "p", with("sluice.dev/take-over-port", "http", "sluice.dev/upstream-port", "3000")),
			`sluice.dev/take-over-port: "http" is port 8080, but sluice.dev/upstream-port says 3000`),
		Entry("image with a space", appPod("", "p", with("sluice.dev/image", "evil image")), `sluice.dev/image: "evil image" is not an image reference`),
		Entry("a volume name the sidecar needs", appPod("", "p", inject, func(p *corev1.Pod) {
			p.Spec.Volumes[0].Name = "sluice-policies"
			p.Spec.Containers[0].VolumeMounts[0].Name = "sluice-policies"
		}),
			`the pod already has a volume named "sluice-policies"`),
	)
})
