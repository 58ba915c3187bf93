#!/usr/bin/env bash
# Prints a directory that holds kube-apiserver, etcd and kubectl for envtest, providing them on the way.
#
# Order: $KUBEBUILDER_ASSETS when it holds both binaries; the cache (outside the clone, so CI and
# later runs reuse it); a setup-envtest download; a build from source through the Go module proxy
# (about 17 minutes on a fresh 2-core machine and 3 GB of build cache, once). Progress goes to
# stderr, the path to stdout.
set -euo pipefail

K8S_VERSION=${ENVTEST_K8S_VERSION:-1.37.2}
ETCD_VERSION=${ENVTEST_ETCD_VERSION:-3.6.8}
SETUP_ENVTEST_VERSION=${SETUP_ENVTEST_VERSION:-v0.25.1}
root=$(cd "$(dirname "$0")/.." && pwd)
cache_root=${SLUICE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice}
platform="$(go env GOOS)-$(go env GOARCH)"
cache="$cache_root/envtest/k8s-$K8S_VERSION-$platform"

say() { echo "envtest: $*" >&2; }
complete() { [ -x "$1/kube-apiserver" ] && [ -x "$1/etcd" ] && [ -x "$1/kubectl" ]; }

if [ -n "${KUBEBUILDER_ASSETS:-}" ] && complete "$KUBEBUILDER_ASSETS"; then
  echo "$KUBEBUILDER_ASSETS"; exit 0
fi
if complete "$cache"; then
  echo "$cache"; exit 0
fi

# setup-envtest keeps its own cache; ask it for the version first without downloading.
setup="$root/bin/setup-envtest"
if [ ! -x "$setup" ]; then
  say "installing setup-envtest $SETUP_ENVTEST_VERSION into ./bin"
  GOBIN="$root/bin" go install "sigs.k8s.io/controller-runtime/tools/setup-envtest@$SETUP_ENVTEST_VERSION" >&2 || true
fi
if [ -x "$setup" ]; then
  if dir=$("$setup" use "$K8S_VERSION" -i -p path 2>/dev/null) && complete "$dir"; then
    echo "$dir"; exit 0
  fi
  say "downloading $K8S_VERSION with setup-envtest"
  if dir=$(timeout 120 "$setup" use "$K8S_VERSION" -p path 2>/dev/null) && complete "$dir"; then
    echo "$dir"; exit 0
  fi
  say "download failed; building from source instead"
fi

mkdir -p "$cache_root/envtest"
exec 9>"$cache_root/envtest/.lock"
flock 9
if complete "$cache"; then  # another run built it while we waited
  echo "$cache"; exit 0
fi
say "building kube-apiserver, kubectl v$K8S_VERSION and etcd v$ETCD_VERSION from source (once; ~5 min, cached in $cache)"
src="$cache_root/envtest/src"
mkdir -p "$src/kube" "$src/etcd" "$cache.tmp"

(
  cd "$src/kube"
  if [ ! -f go.mod ]; then
    go mod init sluice.local/envtest-kube >/dev/null 2>&1
    go mod edit -require="k8s.io/kubernetes@v$K8S_VERSION"
    gomod=$(GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",*/\1/p')
    # Every staging module that kubernetes replaces with a local path is published as v0.X.Y.
    staging="v0.${K8S_VERSION#1.}"
    for m in $(awk '$2 == "=>" && $3 ~ /^\.\/staging/ {print $1}' "$gomod"); do
      go mod edit -replace="$m=$m@$staging"
    done
  fi
  cat > tools.go <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
GO
  GOFLAGS=-mod=mod go mod tidy >&2 2>&1 || true
  say "go build kube-apiserver"
  GOFLAGS=-mod=mod go build -ldflags "-X k8s.io/component-base/version.gitVersion=v$K8S_VERSION" \
    -o "$cache.tmp/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver >&2
  say "go build kubectl"
  GOFLAGS=-mod=mod go build -ldflags "-X k8s.io/component-base/version.gitVersion=v$K8S_VERSION" \
    -o "$cache.tmp/kubectl" k8s.io/kubernetes/cmd/kubectl >&2
)
(
  cd "$src/etcd"
  if [ ! -f go.mod ]; then
    go mod init sluice.local/envtest-etcd >/dev/null 2>&1
    go mod edit -require="go.etcd.io/etcd/server/v3@v$ETCD_VERSION"
    cat > tools.go <<'GO'
//go:build tools

package tools

import _ "go.etcd.io/etcd/server/v3"
GO
  fi
  GOFLAGS=-mod=mod go mod tidy >&2 2>&1 || true
  say "go build etcd"
  GOFLAGS=-mod=mod go build -o "$cache.tmp/etcd" go.etcd.io/etcd/server/v3 >&2
)
rm -rf "$cache" && mv "$cache.tmp" "$cache"
say "ready: $cache"
echo "$cache"
