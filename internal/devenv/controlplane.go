// Package devenv runs a whole Sluice system on loopback, with no cluster and no container
// runtime: an envtest control plane (kube-apiserver and etcd), the manager, a redis-server, and
// a stand-in for the kubelet that runs each injected pod's sidecar as a local process with the
// arguments, environment, labels and ConfigMap content its pod spec asks for. `make demo` and
// the end-to-end test both use it.
package devenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/sluice-dev/sluice/internal/testutil/envtestassets"
)

// ControlPlane is a running kube-apiserver and etcd with Sluice's CRDs and webhook
// configuration installed.
type ControlPlane struct {
	Env    *envtest.Environment
	Config *rest.Config
	// Kubeconfig is the path of a kubeconfig file for an admin user of the control plane.
	Kubeconfig string
}

// Root returns the repository's top directory.
func Root() (string, error) { return envtestassets.Root() }

// StartControlPlane starts kube-apiserver and etcd from assets, installs the CRDs from
// config/crd/bases and the webhook configurations from config/webhook (pointed at a local
// serving address with a generated certificate), and writes an admin kubeconfig into dir.
func StartControlPlane(root, assets, dir string) (*ControlPlane, error) {
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(root, "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: assets,
		WebhookInstallOptions: envtest.WebhookInstallOptions{Paths: []string{filepath.Join(root, "config", "webhook")}},
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("starting kube-apiserver and etcd: %w", err)
	}
	cp := &ControlPlane{Env: env, Config: cfg}
	user, err := env.ControlPlane.AddUser(envtest.User{Name: "sluice-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		_ = env.Stop()
		return nil, err
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		_ = env.Stop()
		return nil, err
	}
	cp.Kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(cp.Kubeconfig, kubeconfig, 0o600); err != nil {
		_ = env.Stop()
		return nil, err
	}
	return cp, nil
}

// Kubectl returns the kubectl of the envtest assets, or the one on PATH.
func (cp *ControlPlane) Kubectl() string {
	if p := filepath.Join(cp.Env.BinaryAssetsDirectory, "kubectl"); fileExists(p) {
		return p
	}
	if p, err := exec.LookPath("kubectl"); err == nil {
		return p
	}
	return "kubectl"
}

// Stop stops the API server and etcd.
func (cp *ControlPlane) Stop() error { return cp.Env.Stop() }

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
