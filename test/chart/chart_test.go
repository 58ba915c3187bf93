// Package chart_test checks the Helm chart in dist/chart: that with its default values it
// renders the objects of config/default apart from the differences documented in the README
// (below: ignoredLabels, ignoredAnnotations, the Namespace), that its values reach the manager's
// flags, and that the API server (envtest) accepts every object it renders (server-side dry
// run).
package chart_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-dev/sluice/internal/controller"
	"github.com/sluice-dev/sluice/internal/testutil/envtestassets"
)

const (
	release   = "sluice"
	namespace = "sluice-system" // config/default's
)

// The chart's additions to config/default's objects: Helm's bookkeeping labels, and the
// resource policy that keeps the CRD and the certificate Secret across uninstalls and upgrades.
var (
	ignoredLabels      = []string{"helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance"}
	ignoredAnnotations = []string{"helm.sh/resource-policy"}
)

func root(t *testing.T) string {
	t.Helper()
	r, err := envtestassets.Root()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func helmBin(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("HELM")
	if bin == "" {
		bin = filepath.Join(root(t), "bin", "helm")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("helm not found at %s: run make helm (or set HELM)", bin)
	}
	return bin
}

func run(t *testing.T, name string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = root(t)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, stderr.String())
	}
	return out
}

func helmTemplate(t *testing.T, set ...string) []*unstructured.Unstructured {
	t.Helper()
	args := []string{"template", release, "dist/chart", "--namespace", namespace}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	return decode(t, run(t, helmBin(t), args...))
}

func kustomize(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	assets, err := envtestassets.Dir()
	if err != nil {
		t.Fatal(err)
	}
	return decode(t, run(t, filepath.Join(assets, "kubectl"), "kustomize", "config/default"))
}

func decode(t *testing.T, manifests []byte) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	d := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifests), 4096)
	for {
		var m map[string]any
		err := d.Decode(&m)
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatalf("decoding: %v\n%s", err, manifests)
		}
		if m != nil {
			objs = append(objs, &unstructured.Unstructured{Object: m})
		}
	}
}

func key(o *unstructured.Unstructured) string {
	return fmt.Sprintf("%s %s/%s", o.GetKind(), o.GetNamespace(), o.GetName())
}

func withoutKeys(m map[string]string, keys []string) map[string]string {
	for _, k := range keys {
		delete(m, k)
	}
	return m
}

func TestChartRendersConfigDefault(t *testing.T) {
	chart := map[string]*unstructured.Unstructured{}
	for _, o := range helmTemplate(t) {
		o.SetLabels(withoutKeys(o.GetLabels(), ignoredLabels))
		if a := withoutKeys(o.GetAnnotations(), ignoredAnnotations); len(a) > 0 {
			o.SetAnnotations(a)
		} else {
			o.SetAnnotations(nil)
		}
		chart[key(o)] = o
	}
	kust := map[string]*unstructured.Unstructured{}
	for _, o := range kustomize(t) {
		// helm install --create-namespace creates the namespace; Helm does not label it.
		if o.GetKind() == "Namespace" {
			continue
		}
		kust[key(o)] = o
	}
	for k, want := range kust {
		got, ok := chart[k]
		if !ok {
			t.Errorf("the chart does not render %s", k)
			continue
		}
		if !reflect.DeepEqual(got.Object, want.Object) {
			g, _ := yaml.Marshal(got.Object)
			w, _ := yaml.Marshal(want.Object)
			t.Errorf("%s differs:\n--- chart\n%s\n--- config/default\n%s", k, g, w)
		}
	}
	for k := range chart {
		if _, ok := kust[k]; !ok {
			t.Errorf("the chart renders %s, which config/default does not", k)
		}
	}
	if len(kust) < 10 {
		t.Fatalf("config/default rendered %d objects", len(kust))
	}
}

func managerArgs(t *testing.T, objs []*unstructured.Unstructured) []string {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() != "Deployment" {
			continue
		}
		cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		c := cs[0].(map[string]any)
		args, _, _ := unstructured.NestedStringSlice(c, "args")
		env, _, _ := unstructured.NestedSlice(c, "env")
		for _, e := range env {
			e := e.(map[string]any)
			if e["name"] == "SLUICE_SIDECAR_IMAGE" {
				args = append(args, "image="+fmt.Sprint(e["value"]))
			}
		}
		image, _, _ := unstructured.NestedString(c, "image")
		return append(args, "manager="+image)
	}
	t.Fatal("no Deployment rendered")
	return nil
}

func kinds(objs []*unstructured.Unstructured) []string {
	var out []string
	for _, o := range objs {
		out = append(out, o.GetKind())
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func TestChartValues(t *testing.T) {
	objs := helmTemplate(t,
		"manager.image.repository=registry.example/sluice-manager", "manager.image.tag=v1.2.3",
		"sidecar.image.repository=registry.example/sluice-sidecar", "sidecar.image.tag=v1.2.3",
		"redis.url=redis://redis.cache:6379/0", "redis.tls=true", "redis.passwordSecret.name=redis-auth",
		"redis.timeout=50ms", "sidecar.resources.requests.cpu=25m", "sidecar.resources.limits.memory=96Mi",
		"webhook.certificateMode=cert-manager", "prometheus.serviceMonitor.enable=true",
		"prometheus.podMonitor.enable=true", "prometheus.rules.enable=true", "manager.replicas=3",
		"ratelimit.replicas=4", "ratelimit.image.repository=registry.example/sluice-ratelimit", "ratelimit.image.tag=v1.2.3")
	args := managerArgs(t, objs)
	for _, want := range []string{
		"manager=registry.example/sluice-manager:v1.2.3", "image=registry.example/sluice-sidecar:v1.2.3",
		"--sidecar-redis-url=redis://redis.cache:6379/0", "--sidecar-redis-tls",
		"--sidecar-redis-password-secret=redis-auth", "--sidecar-redis-password-key=password",
		"--sidecar-redis-timeout=50ms", "--sidecar-cpu-request=25m", "--sidecar-memory-limit=96Mi",
		"--webhook-cert-rotation=false",
	} {
		if !slices.Contains(args, want) {
			t.Errorf("manager args lack %q: %v", want, args)
		}
	}
	for _, want := range []string{"Certificate", "Issuer", "PodMonitor", "PrometheusRule", "ServiceMonitor", "Service"} {
		if !slices.Contains(kinds(objs), want) {
			t.Errorf("no %s rendered: %v", want, kinds(objs))
		}
	}
	for _, o := range objs {
		switch o.GetKind() {
		case "MutatingWebhookConfiguration":
			if got := o.GetAnnotations()["cert-manager.io/inject-ca-from"]; got != namespace+"/sluice-serving-cert" {
				t.Errorf("webhook configuration's inject-ca-from is %q", got)
			}
		case "PrometheusRule":
			groups, _, _ := unstructured.NestedSlice(o.Object, "spec", "groups")
			if len(groups) != 2 {
				t.Errorf("PrometheusRule has %d groups, want the 2 of config/prometheus", len(groups))
			}
		case "Deployment":
			want := "3"
			if o.GetName() == "sluice-ratelimit" {
				want = "4"
				containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
				c, _ := containers[0].(map[string]any)
				if img := fmt.Sprint(c["image"]); img != "registry.example/sluice-ratelimit:v1.2.3" {
					t.Errorf("RLS image %s", img)
				}
				if env := fmt.Sprint(c["env"]); !strings.Contains(env, "SLUICE_REDIS_URL value:redis://redis.cache:6379/0") {
					t.Errorf("the RLS server does not get redis.url: %s", env)
				}
			}
			if r, _, _ := unstructured.NestedFieldNoCopy(o.Object, "spec", "replicas"); fmt.Sprint(r) != want {
				t.Errorf("%s replicas %v, want %s", o.GetName(), r, want)
			}
		}
	}
	if defaults := managerArgs(t, helmTemplate(t)); slices.ContainsFunc(defaults, func(a string) bool {
		return strings.HasPrefix(a, "--sidecar-redis") || strings.HasPrefix(a, "--webhook-cert-rotation")
	}) {
		t.Errorf("default values set Redis or certificate flags: %v", defaults)
	}
}

// TestChartDryRun applies what the chart renders, with defaults and with every optional
// object of the core API enabled, to a real API server as a server-side dry run. The
// cert-manager and Prometheus Operator kinds are left out: envtest has not their CRDs.
func TestChartDryRun(t *testing.T) {
	assets, err := envtestassets.Dir()
	if err != nil {
		t.Fatal(err)
	}
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(root(t), "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: assets,
	}
	cfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	c, err := client.New(cfg, client.Options{Scheme: controller.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil {
		t.Fatal(err)
	}
	for name, set := range map[string][]string{
		"defaults": nil,
		"everything": {"redis.url=redis://redis:6379/0", "redis.tls=true", "redis.passwordSecret.name=redis-auth",
			"sidecar.resources.requests.cpu=25m", "webhook.certificateMode=cert-manager", "metrics.enable=true"},
	} {
		t.Run(name, func(t *testing.T) {
			applied := 0
			for _, o := range helmTemplate(t, set...) {
				if g := o.GroupVersionKind().Group; g == "cert-manager.io" || g == "monitoring.coreos.com" {
					continue
				}
				if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(o), client.ForceOwnership, client.FieldOwner("chart-test"), client.DryRunAll); err != nil {
					t.Errorf("%s: %v", key(o), err)
				}
				applied++
			}
			if applied < 10 {
				t.Errorf("applied %d objects", applied)
			}
		})
	}
}
