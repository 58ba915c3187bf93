// Package envtestassets finds the envtest binaries (kube-apiserver, etcd, kubectl) for tests,
// the demo and tools: $KUBEBUILDER_ASSETS when set, else whatever hack/envtest-assets.sh
// provides (its cache, a setup-envtest download, or a build from source on first use).
package envtestassets

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Root returns the repository's top directory, found from the working directory upwards.
func Root() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "PROJECT")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no PROJECT file above the working directory: run from the repository")
		}
		dir = parent
	}
}

// Dir returns the directory of the envtest binaries. The script's progress (a first build
// takes minutes) goes to stderr.
func Dir() (string, error) {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir, nil
	}
	root, err := Root()
	if err != nil {
		return "", err
	}
	cmd := exec.Command(filepath.Join(root, "hack", "envtest-assets.sh"))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("hack/envtest-assets.sh could not provide envtest binaries: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}
