// Package envtestassets finds the envtest binaries (kube-apiserver, etcd, kubectl) for tests,
// the demo and tools: $KUBEBUILDER_ASSETS when set, else whatever hack/envtest-assets.sh
// provides (its cache, a setup-envtest download, or a build from source on first use).
package envtestassets

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
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
//
// Where setpriv(1) can set a parent-death signal (Linux), the directory returned holds
// wrappers that run kube-apiserver and etcd with SIGKILL as theirs: a test binary that is
// killed (a -timeout, a second Ctrl-C) takes its API server and etcd with it instead of leaving
// them running and holding their ports.
func Dir() (string, error) {
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
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
		dir = strings.TrimSpace(string(out))
	}
	return withDeathSignal(dir)
}

// withDeathSignal returns a directory of wrappers around dir's binaries that exec them under
// `setpriv --pdeathsig KILL`, or dir itself where setpriv is missing. The wrappers are written
// once per assets directory (a name derived from its path) and replaced atomically, so
// concurrent test binaries share them.
//
//nolint:gosec // paths of the caller's assets directory and of this package's own wrappers
func withDeathSignal(dir string) (string, error) {
	setpriv, err := exec.LookPath("setpriv")
	if err != nil || runtime.GOOS != "linux" {
		return dir, nil //nolint:nilerr // no setpriv: the binaries as they are
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(abs + "\x00" + setpriv))
	wrapped := filepath.Join(os.TempDir(), "sluice-envtest-"+hex.EncodeToString(sum[:8]))
	if err := os.MkdirAll(wrapped, 0o755); err != nil {
		return "", err
	}
	for _, name := range []string{"kube-apiserver", "etcd", "kubectl"} {
		real := filepath.Join(abs, name)
		if _, err := os.Stat(real); err != nil {
			continue
		}
		script := fmt.Sprintf("#!/bin/sh\nexec %s --pdeathsig KILL -- %s \"$@\"\n", setpriv, real)
		if name == "kubectl" { // short-lived, run by tests: as it is
			script = fmt.Sprintf("#!/bin/sh\nexec %s \"$@\"\n", real)
		}
		path := filepath.Join(wrapped, name)
		if b, err := os.ReadFile(path); err == nil && string(b) == script {
			continue
		}
		tmp, err := os.CreateTemp(wrapped, "."+name+"-")
		if err != nil {
			return "", err
		}
		_, werr := tmp.WriteString(script)
		cerr := tmp.Close()
		if err := errors.Join(werr, cerr, os.Chmod(tmp.Name(), 0o755)); err != nil {
			_ = os.Remove(tmp.Name())
			return "", err
		}
		if err := os.Rename(tmp.Name(), path); err != nil {
			return "", err
		}
	}
	return wrapped, nil
}
