package inject_test

import (
	"flag"
	"os/exec"
	"path"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-dev/sluice/internal/dataplane/cmdline"
	"github.com/sluice-dev/sluice/internal/inject"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/webhook"
)

// TestInjectedContainerParsesWithTheSidecarsFlags injects a pod through the webhook's own code
// and parses the sidecar container's arguments and environment with the sidecar's own flag
// set: a flag or variable one side renames without the other fails here, as does a path, a
// port or a volume the two disagree on.
func TestInjectedContainerParsesWithTheSidecarsFlags(t *testing.T) {
	cfg := webhook.Config{
		Image:        "example.invalid/sluice-sidecar:1",
		RedisURL:     "redis+cluster://redis-0.redis:6379?addr=redis-1.redis:6379",
		RedisTLS:     true,
		RedisTimeout: 50 * time.Millisecond,
		// 90s, not the sidecar's default, so that the argument is seen to arrive.
		RedisIdleTimeout: 90 * time.Second,
		RedisPasswordSecret: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "redis"}, Key: "password",
		},
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Annotations: map[string]string{
			inject.AnnotationInject: "true", inject.AnnotationListenPort: "8000", inject.AnnotationMetricsPort: "9100",
		}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app", Ports: []corev1.ContainerPort{{ContainerPort: 3000}}}}},
	}
	if changed, err := cfg.Mutate(pod); err != nil || !changed {
		t.Fatalf("Mutate = %v, %v", changed, err)
	}
	var c *corev1.Container
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == inject.ContainerName {
			c = &pod.Spec.InitContainers[i]
		}
	}
	if c == nil {
		t.Fatalf("no init container named %s: %+v", inject.ContainerName, pod.Spec.InitContainers)
	}

	// The kubelet's view of the environment: literal values, and the Secret's value.
	secrets := map[string]string{"redis/password": "s3cret"}
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.SecretKeyRef != nil:
			v, ok := secrets[e.ValueFrom.SecretKeyRef.Name+"/"+e.ValueFrom.SecretKeyRef.Key]
			if !ok {
				t.Fatalf("%s comes from an unexpected Secret key %+v", e.Name, e.ValueFrom.SecretKeyRef)
			}
			env[e.Name] = v
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == inject.PodNameFieldPath:
			env[e.Name] = pod.Name
		default:
			t.Fatalf("%s comes from %+v", e.Name, e.ValueFrom)
		}
	}
	read := map[string]bool{}
	lookup := func(name string) (string, bool) {
		read[name] = true
		v, ok := env[name]
		return v, ok
	}
	got, err := cmdline.Parse(c.Args, flag.ContinueOnError, lookup)
	if err != nil {
		t.Fatalf("the sidecar rejects the injected arguments %q: %v", c.Args, err)
	}
	for name := range env {
		if !read[name] {
			t.Errorf("the webhook sets %s, which the sidecar never reads", name)
		}
	}

	// What the sidecar runs with: the injected settings, and its defaults for the rest.
	want, err := cmdline.Parse(nil, flag.ContinueOnError, func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	want.Listen, want.MetricsListen, want.Upstream = ":8000", ":9100", "http://127.0.0.1:3000"
	want.PodName = "web" // from the downward API: the pod's own name
	want.RedisURL, want.RedisTimeout, want.RedisPassword = "rediss+cluster://redis-0.redis:6379?addr=redis-1.redis:6379", 50*time.Millisecond, "s3cret"
	want.RedisIdleTimeout = 90 * time.Second
	if !reflect.DeepEqual(got, want) {
		t.Errorf("the sidecar parses the injected container as\n%+v\nwant\n%+v", got, want)
	}

	// The files it reads are in the volumes mounted for it, under the names the volumes give them.
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Spec.Volumes {
		volumes[v.Name] = v
	}
	policies, podInfo := volumes[inject.PoliciesVolume], volumes[inject.PodInfoVolume]
	if policies.ConfigMap == nil || policies.ConfigMap.Name != policy.ConfigMapName ||
		got.Config != path.Join(mounts[inject.PoliciesVolume], policy.DataKey) {
		t.Errorf("--%s=%s is not key %s of ConfigMap %s mounted at %q: %+v", inject.FlagConfig, got.Config,
			policy.DataKey, policy.ConfigMapName, mounts[inject.PoliciesVolume], policies)
	}
	if podInfo.DownwardAPI == nil || len(podInfo.DownwardAPI.Items) != 1 || podInfo.DownwardAPI.Items[0].FieldRef.FieldPath != "metadata.labels" ||
		got.PodLabelsFile != path.Join(mounts[inject.PodInfoVolume], podInfo.DownwardAPI.Items[0].Path) {
		t.Errorf("--%s=%s is not the labels file of the downward API volume mounted at %q: %+v", inject.FlagPodLabelsFile,
			got.PodLabelsFile, mounts[inject.PodInfoVolume], podInfo)
	}
	// Without annotations, the webhook's paths and ports are the sidecar's defaults.
	if want.Config != got.Config || want.PodLabelsFile != got.PodLabelsFile {
		t.Errorf("the sidecar's default files %s, %s differ from the injected ones", want.Config, want.PodLabelsFile)
	}

	// The ports it listens on are the container's named ports, which the probes use.
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if ports[inject.PortName] != 8000 || ports[inject.MetricsPortName] != 9100 {
		t.Errorf("ports %v, want %s 8000 and %s 9100", ports, inject.PortName, inject.MetricsPortName)
	}
	for _, p := range []*corev1.Probe{c.StartupProbe, c.ReadinessProbe, c.LivenessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Port.IntVal != 9100 {
			t.Errorf("probe %+v does not ask the metrics listener", p)
		}
	}
}

// TestDefaultPortsAreTheSidecars: a pod without port annotations gets the ports the sidecar
// listens on by default.
func TestDefaultPortsAreTheSidecars(t *testing.T) {
	defaults, err := cmdline.Parse(nil, flag.ContinueOnError, func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Annotations: map[string]string{inject.AnnotationInject: "true"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app", Ports: []corev1.ContainerPort{{ContainerPort: 3000}}}}},
	}
	cfg := webhook.Config{Image: "example.invalid/sluice-sidecar:1"}
	if _, err := cfg.Mutate(pod); err != nil {
		t.Fatal(err)
	}
	got, err := cmdline.Parse(pod.Spec.InitContainers[0].Args, flag.ContinueOnError, func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	if got.Listen != defaults.Listen || got.MetricsListen != defaults.MetricsListen || got.RedisURL != "" || got.RedisTimeout != defaults.RedisTimeout || got.RedisIdleTimeout != defaults.RedisIdleTimeout {
		t.Errorf("injected %+v; the sidecar's defaults are %+v", got, defaults)
	}
}

// TestStandardLibraryOnly: every binary imports the contract, so it must not bring anything in.
func TestStandardLibraryOnly(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	if got := strings.Fields(string(out)); !reflect.DeepEqual(got, []string{"github.com/sluice-dev/sluice/internal/inject"}) {
		t.Fatalf("package inject depends on %q beyond the standard library", got)
	}
}
