package webhook_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// kubectl runs the kubectl of the envtest assets as a cluster admin.
func kubectl(args ...string) (string, string, error) {
	user, err := testEnv.ControlPlane.AddUser(envtest.User{Name: "deploy-admin", Groups: []string{"system:masters"}}, nil)
	Expect(err).NotTo(HaveOccurred())
	k, err := user.Kubectl()
	Expect(err).NotTo(HaveOccurred())
	stdout, stderr, err := k.Run(args...)
	return readAll(stdout), readAll(stderr), err
}

// kustomize renders a kustomization with the kubectl of the envtest assets.
func kustomize(dir string) []byte {
	stdout, stderr, err := kubectl("kustomize", dir)
	Expect(err).NotTo(HaveOccurred(), "kubectl kustomize %s: %s", dir, stderr)
	return []byte(stdout)
}

// splitObjects decodes a multi-document YAML stream.
func splitObjects(data []byte) []*unstructured.Unstructured {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			Expect(err.Error()).To(Equal("EOF"))
			return out
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}

// apply runs `kubectl apply --server-side` on objects, for real or as a server-side dry run.
func apply(objects []*unstructured.Unstructured, dryRun bool) string {
	var buf bytes.Buffer
	for _, o := range objects {
		data, err := o.MarshalJSON()
		Expect(err).NotTo(HaveOccurred())
		buf.Write(data)
		buf.WriteString("\n")
	}
	file := filepath.Join(GinkgoT().TempDir(), "objects.json")
	Expect(os.WriteFile(file, buf.Bytes(), 0o600)).To(Succeed())
	args := []string{"apply", "--server-side", "--field-manager=sluice-test", "-f", file}
	if dryRun {
		args = append(args, "--dry-run=server")
	}
	stdout, stderr, err := kubectl(args...)
	Expect(err).NotTo(HaveOccurred(), "kubectl %s: %s", strings.Join(args, " "), stderr)
	return stdout
}

var _ = Describe("The deployment manifests", func() {
	It("build with kustomize and are accepted by the API server (server-side dry run)", func() {
		objects := splitObjects(kustomize(filepath.Join("..", "..", "config", "default")))

		kinds := map[string][]string{}
		var prerequisites []*unstructured.Unstructured
		for _, o := range objects {
			kinds[o.GetKind()] = append(kinds[o.GetKind()], o.GetName())
			if o.GetKind() == "CustomResourceDefinition" || o.GetKind() == "Namespace" {
				prerequisites = append(prerequisites, o)
			}
			if o.GetKind() != "Namespace" && o.GetKind() != "CustomResourceDefinition" && !strings.HasPrefix(o.GetKind(), "Cluster") &&
				o.GetKind() != "MutatingWebhookConfiguration" {
				Expect(o.GetNamespace()).To(Equal("sluice-system"), "%s %s", o.GetKind(), o.GetName())
			}
		}
		Expect(kinds).To(HaveKeyWithValue("Namespace", []string{"sluice-system"}))
		Expect(kinds).To(HaveKeyWithValue("CustomResourceDefinition", []string{"ratelimitpolicies.sluice.dev"}))
		Expect(kinds).To(HaveKeyWithValue("Deployment", ConsistOf("sluice-controller-manager", "sluice-ratelimit")))
		Expect(kinds).To(HaveKeyWithValue("Service", ConsistOf("sluice-webhook-service", "sluice-ratelimit")))
		Expect(kinds).To(HaveKeyWithValue("Secret", []string{"sluice-webhook-server-cert"}))
		Expect(kinds).To(HaveKeyWithValue("MutatingWebhookConfiguration", []string{"sluice-mutating-webhook-configuration"}))
		Expect(kinds).To(HaveKeyWithValue("ClusterRole", ConsistOf("sluice-manager-role", "sluice-metrics-reader")))
		Expect(kinds).To(HaveKeyWithValue("Role", ConsistOf("sluice-manager-role", "sluice-leader-election-role")))

		By("pointing the webhook at the Service and excluding the manager's namespace")
		for _, o := range objects {
			switch o.GetKind() {
			case "MutatingWebhookConfiguration":
				hooks, _, _ := unstructured.NestedSlice(o.Object, "webhooks")
				Expect(hooks).To(HaveLen(1))
				hook := hooks[0].(map[string]any)
				service, _, _ := unstructured.NestedStringMap(hook, "clientConfig", "service")
				Expect(service).To(Equal(map[string]string{
					"name": "sluice-webhook-service", "namespace": "sluice-system", "path": "/mutate-v1-pod",
				}))
				Expect(hook["failurePolicy"]).To(Equal("Ignore"))
				values, _, _ := unstructured.NestedSlice(hook, "namespaceSelector", "matchExpressions")
				Expect(values).To(ConsistOf(map[string]any{"key": "kubernetes.io/metadata.name", "operator": "NotIn",
					"values": []any{"sluice-system", "kube-system", "kube-public", "kube-node-lease"}}))
			case "Deployment":
				replicas, _, _ := unstructured.NestedFieldNoCopy(o.Object, "spec", "replicas")
				Expect(replicas).To(BeEquivalentTo(2))
				if o.GetName() != "sluice-controller-manager" {
					continue // sluice-ratelimit: two replicas too, no webhook
				}
				containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
				env, _, _ := unstructured.NestedSlice(containers[0].(map[string]any), "env")
				Expect(env).To(ContainElements(
					map[string]any{"name": "WEBHOOK_SERVICE", "value": "sluice-webhook-service"},
					map[string]any{"name": "WEBHOOK_CERT_SECRET", "value": "sluice-webhook-server-cert"},
				))
			}
		}

		By("applying the namespace and CRD for real, then everything as a dry run")
		apply(prerequisites, false)
		out := apply(objects, true)
		Expect(out).To(ContainSubstring("deployment.apps/sluice-controller-manager serverside-applied (server dry run)"))
		Expect(out).To(ContainSubstring("mutatingwebhookconfiguration.admissionregistration.k8s.io/sluice-mutating-webhook-configuration serverside-applied (server dry run)"))
	})
})

func readAll(r interface{ Read([]byte) (int, error) }) string {
	if r == nil {
		return ""
	}
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(r)
	return buf.String()
}
