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
		if _, hook := o.GetAnnotations()["helm.sh/hook"]; hook {
			continue // the helm test pod: Helm's, not an installed object
		}
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
		"ratelimit.replicas=4", "ratelimit.image.repository=registry.example/sluice-ratelimit", "ratelimit.image.tag=v1.2.3",
		"imagePullSecrets[0].name=regcred", "manager.nodeSelector.disk=ssd", "ratelimit.nodeSelector.disk=ssd",
		"manager.priorityClassName=sluice-critical", "ratelimit.priorityClassName=sluice-critical",
		"manager.tolerations[0].key=dedicated", "manager.tolerations[0].operator=Exists",
		"ratelimit.tolerations[0].key=dedicated", "ratelimit.tolerations[0].operator=Exists")
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
	for _, want := range []string{"Certificate", "Issuer", "PodMonitor", "PrometheusRule", "ServiceMonitor", "Service", "PodDisruptionBudget"} {
		if !slices.Contains(kinds(objs), want) {
			t.Errorf("no %s rendered: %v", want, kinds(objs))
		}
	}
	rlsMonitor := false
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
		case "PodMonitor":
			if o.GetName() == "sluice-ratelimit" {
				sel, _, _ := unstructured.NestedStringMap(o.Object, "spec", "selector", "matchLabels")
				if sel["app.kubernetes.io/name"] != "sluice-ratelimit" {
					t.Errorf("the RLS PodMonitor selects %v", sel)
				}
				rlsMonitor = true
			}
		case "Deployment":
			spec, _, _ := unstructured.NestedMap(o.Object, "spec", "template", "spec")
			if got := fmt.Sprintf("%v %v %v %v", spec["imagePullSecrets"], spec["nodeSelector"], spec["priorityClassName"], spec["tolerations"]); got != "[map[name:regcred]] map[disk:ssd] sluice-critical [map[key:dedicated operator:Exists]]" {
				t.Errorf("%s: pull secrets, node selector, priority class, tolerations: %s", o.GetName(), got)
			}
			want := "3"
			if o.GetName() == "sluice-ratelimit" {
				want = "4"
				containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
				c, _ := containers[0].(map[string]any)
				if img := fmt.Sprint(c["image"]); img != "registry.example/sluice-ratelimit:v1.2.3" {
					t.Errorf("RLS image %s", img)
				}
				checkRLSRedis(t, c)
			}
			if r, _, _ := unstructured.NestedFieldNoCopy(o.Object, "spec", "replicas"); fmt.Sprint(r) != want {
				t.Errorf("%s replicas %v, want %s", o.GetName(), r, want)
			}
		}
	}
	if !rlsMonitor {
		t.Error("no PodMonitor for the RLS server's pods")
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

// checkRLSRedis checks that the RLS server's container c gets the Redis settings the sidecars
// get, in the form the webhook injects them: the URL with rediss for TLS, the password from
// the Secret (never in the spec), the call budget.
func checkRLSRedis(t *testing.T, c map[string]any) {
	t.Helper()
	env := map[string]string{}
	list, _, _ := unstructured.NestedSlice(c, "env")
	for _, e := range list {
		e := e.(map[string]any)
		if v, ok := e["value"]; ok {
			env[fmt.Sprint(e["name"])] = fmt.Sprint(v)
		} else {
			ref, _, _ := unstructured.NestedStringMap(e, "valueFrom", "secretKeyRef")
			env[fmt.Sprint(e["name"])] = "secret " + ref["name"] + "/" + ref["key"]
		}
	}
	for name, want := range map[string]string{
		"SLUICE_REDIS_URL":      "rediss://redis.cache:6379/0",
		"SLUICE_REDIS_PASSWORD": "secret redis-auth/password",
		"SLUICE_REDIS_TIMEOUT":  "50ms",
	} {
		if env[name] != want {
			t.Errorf("the RLS server's %s is %q, want %q (env %v)", name, env[name], want, env)
		}
	}
}

// TestChartDefaultImages: without tags, every image is the chart's appVersion, the tag make
// images gives by default.
func TestChartDefaultImages(t *testing.T) {
	var chart struct {
		AppVersion string `json:"appVersion"`
	}
	data, err := os.ReadFile(filepath.Join(root(t), "dist", "chart", "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &chart); err != nil || chart.AppVersion == "" {
		t.Fatalf("Chart.yaml appVersion: %v", err)
	}
	var images []string
	for _, o := range helmTemplate(t) {
		if o.GetKind() != "Deployment" && o.GetKind() != "Pod" {
			continue
		}
		path := []string{"spec", "template", "spec", "containers"}
		if o.GetKind() == "Pod" {
			path = []string{"spec", "containers"}
		}
		cs, _, _ := unstructured.NestedSlice(o.Object, path...)
		for _, c := range cs {
			c := c.(map[string]any)
			images = append(images, fmt.Sprint(c["image"]))
			list, _, _ := unstructured.NestedSlice(c, "env")
			for _, e := range list {
				if e := e.(map[string]any); e["name"] == "SLUICE_SIDECAR_IMAGE" {
					images = append(images, fmt.Sprint(e["value"]))
				}
			}
		}
	}
	if len(images) != 4 { // manager, sidecar, RLS server, helm test
		t.Fatalf("images %v", images)
	}
	for _, img := range images {
		if !strings.HasSuffix(img, ":"+chart.AppVersion) {
			t.Errorf("image %s is not tagged with appVersion %s", img, chart.AppVersion)
		}
	}
}

// TestChartRefusesBadValues: values.schema.json refuses a wrong value with a message naming
// it, in helm template (and so helm install and helm lint).
func TestChartRefusesBadValues(t *testing.T) {
	for set, want := range map[string]string{
		"manager.replicas=0":                 "/manager/replicas",
		"redis.timeout=fast":                 "/redis/timeout",
		"redis.url=http://redis:6379":        "/redis/url",
		"webhook.certificateMode=manual":     "/webhook/certificateMode",
		"manager.imagePullSecrets[0]=x":      "imagePullSecrets",
		"ratelimit.replica=3":                "replica",
		"sidecar.image.pullPolicy=Sometimes": "/sidecar/image/pullPolicy",
	} {
		cmd := exec.Command(helmBin(t), "template", release, "dist/chart", "--namespace", namespace, "--set", set)
		cmd.Dir = root(t)
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Errorf("--set %s: helm template succeeded", set)
			continue
		}
		if !strings.Contains(string(out), want) {
			t.Errorf("--set %s: the message does not name %s:\n%s", set, want, out)
		}
	}
}
