package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/controller"
	"github.com/sluice-dev/sluice/internal/inject"
	"github.com/sluice-dev/sluice/internal/testutil/envtestassets"
)

// TestStatusThroughTheAPIServer runs sluicectl status against a real API server (envtest)
// with a kubeconfig: it lists the policies and the injected pods they select and asks the
// API server's pod proxy for each sidecar's /metrics. envtest has no kubelet and no pod
// network, and the API server refuses to proxy to the loopback addresses a test could serve
// metrics on, so the scrape fails here by design: the test checks that the command reaches the
// proxy of the right pod and port (the API server resolved the pod's address and refused to dial it) and
// still prints every policy's rules. The rates themselves are tested on real sidecars in
// test/prometheus and from recorded scrapes in internal/status.
func TestStatusThroughTheAPIServer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an API server")
	}
	root, err := envtestassets.Root()
	if err != nil {
		t.Fatal(err)
	}
	assets, err := envtestassets.Dir()
	if err != nil {
		t.Fatal(err)
	}
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(root, "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: assets,
	}
	cfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	user, err := env.ControlPlane.AddUser(envtest.User{Name: "operator", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	kubeconfigFile := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfigFile, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: controller.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const ns = "shop"
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	p := &v1alpha1.RateLimitPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "api"},
		Spec: v1alpha1.RateLimitPolicySpec{
			PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Rules: []v1alpha1.Rule{{Name: "per-client", Key: []v1alpha1.KeyPart{{ClientIP: &v1alpha1.ClientIPKey{}}},
				Algorithm: v1alpha1.TokenBucket, Limit: 10, Window: "1s"}},
		},
	}
	if err := c.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	// A pod as the webhook leaves it, running at a loopback address as the stand-in kubelet of
	// internal/devenv would report it.
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-0", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: inject.ContainerName, Image: "sluice-sidecar", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
				Ports: []corev1.ContainerPort{{Name: inject.MetricsPortName, ContainerPort: 9191}}}},
			Containers: []corev1.Container{{Name: "app", Image: "app"}},
		},
	}
	if err := c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.2.250", PodIPs: []corev1.PodIP{{IP: "127.0.2.250"}}}
	if err := c.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}

	var stdout, stderr strings.Builder
	code := run([]string{"status", "-n", ns, "--kubeconfig", kubeconfigFile, "--interval", "100ms"}, nil, &stdout, &stderr)
	t.Logf("stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	if code != 0 {
		t.Fatalf("exit code %d", code)
	}
	out := stdout.String()
	if !regexp.MustCompile(`(?m)^api\s+per-client\s+0\.0\s+0\.0\s+0\.0\s+0/1\s+0\s+0\s+Local$`).MatchString(out) {
		t.Errorf("no row for api/per-client with 0 of 1 pods scraped:\n%s", out)
	}
	// The API server resolved web-0 to its pod IP and refused to dial a loopback address.
	if !regexp.MustCompile(`(?m)^pod web-0: not scraped: .*\(get pods http:web-0:9191\): address not allowed$`).MatchString(out) {
		t.Errorf("the pod proxy of web-0:9191 did not refuse its loopback address:\n%s", out)
	}

	stdout.Reset()
	if code := run([]string{"status", "-n", "empty", "--kubeconfig", kubeconfigFile}, nil, &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), "No RateLimitPolicies in namespace empty.") {
		t.Errorf("empty namespace: exit %d, %q", code, stdout.String())
	}
	if code := run([]string{"status", "--interval", "1ms"}, nil, &stdout, &stderr); code != 2 {
		t.Errorf("an interval of 1ms: exit %d, want 2", code)
	}
}
