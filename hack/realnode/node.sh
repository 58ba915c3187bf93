#!/usr/bin/env bash
# A real single-node Kubernetes made of processes, for `make test-realnode`: etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, kubelet, kube-proxy, containerd + runc + CNI bridge,
# CoreDNS as the cluster's DNS, a container registry, and a redis-server for the sidecars.
# Everything it starts, mounts or creates is undone by `down`.
#
#   node.sh preflight     exit 0 when this machine can run a node; else print what is missing, exit 2
#   node.sh provision     install Debian packages when missing, build (once, cached) the node binaries
#   node.sh images        build the project's images as docker-save tarballs
#   node.sh up            start the node and import the images (Sluice is not installed)
#   node.sh sluice        install Sluice the test suite's way (kubectl apply of config/local-node)
#   node.sh down          stop and remove everything `up` made (safe to run at any time)
#   node.sh redis stop|start
#   node.sh apiserver stop|start   stop kube-apiserver (etcd, controllers, kubelet and pods keep running), start it again
#   node.sh env           print the variables the Go test reads
#
# Network: everything lives in 198.18.0.0/15 (RFC 2544's benchmarking range, used by no real
# network): the bridge sluice0 holds 198.18.1.1, which is also the API server's advertise
# address and Redis' address; pods get 198.18.1.16-250 with no default route, only one to the
# Service range 198.19.0.0/24 through the host, so they can reach the host's 198.18.1.1, each
# other and Services, and nothing else. kube-proxy (iptables mode, masquerading all Service
# traffic so that replies come back through the host) routes Services; `down` runs its cleanup.
# The cluster DNS (CoreDNS, kube-dns at 198.19.0.10) answers for cluster.local only. The
# registry (Debian's docker-registry, the CNCF distribution server) listens on localhost at a
# free port, which containerd pulls from over plain HTTP as it does for any localhost registry.
#
# Images the quickstart names but this node cannot pull (it has no internet) are stand-ins
# imported under those names: agnhost's netexec (hack/realnode/agnhost) and Redis (Debian's
# redis-server with the libraries it loads).
#
# Versions are pinned: Kubernetes v1.37.2 (built from the Go module proxy), etcd v3.6.8, and
# Debian bookworm's containerd 1.6, runc 1.1 and containernetworking-plugins 1.1.
set -euo pipefail

K8S_VERSION=1.37.2
root=$(cd "$(dirname "$0")/../.." && pwd)
cache_root=${SLUICE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice}
bin="$cache_root/realnode/k8s-$K8S_VERSION-linux-amd64"
# State lives at a fixed place so that `down` finds what an interrupted run left behind.
D=${SLUICE_REALNODE_DIR:-/var/tmp/sluice-realnode}
LOGS="$D.logs"

BRIDGE=sluice0
HOST_IP=198.18.1.1
POD_CIDR=198.18.1.0/24
SERVICE_CIDR=198.19.0.0/24
KUBE_SERVICE_IP=198.19.0.1
NODE=sluice-realnode
# The sidecars' redis-server listens on the bridge address at a port chosen free when the node
# comes up (free_port), kept in $D/redis-port for the later calls of this script.
REDIS_PORT=$(cat "$D/redis-port" 2>/dev/null || echo 0)
# The registry's port on localhost, chosen free by `up` like Redis' (registry_start).
REGISTRY_PORT=$(cat "$D/registry-port" 2>/dev/null || echo 0)
DNS_IP=198.19.0.10
APISERVER=https://$HOST_IP:6443
# Ports the node binds; each must be free (the node's components have fixed ones).
PORTS=(2379 2380 6443 10248 10249 10250 10256 10257 10259)
# Host settings kubelet or the node changes, restored by `down`.
SYSCTLS=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
  kernel.keys.root_maxkeys kernel.keys.root_maxbytes net.ipv4.ip_forward net.ipv4.conf.all.route_localnet)
# Host directories that containerd 1.6, CNI and kubelet use whatever they are told; `down`
# removes what appeared in them during the run.
HOST_DIRS=(/run/containerd /var/lib/cni /var/log/containers /run/netns /var/run/netns)
IMAGES=(pause upstream coredns agnhost redis sluice-manager sluice-sidecar sluice-ratelimit)
# The third-party images of docs/quickstart.md, whose stand-ins `images` builds under these names.
quickstart_image() { sed -n 's/^ *image: *//p' "$root/config/quickstart/$1.yaml" | head -n 1; }

say() { echo "realnode: $*" >&2; }
die() { say "$*"; exit 1; }

kubectl() { "$bin/kubectl" --kubeconfig "$D/pki/admin.kubeconfig" "$@"; }
ctr_() { ctr --address "$D/containerd/containerd.sock" -n k8s.io "$@"; }

# --- preflight ----------------------------------------------------------------------------------

# preflight prints one line per missing prerequisite and returns 2 when any is missing.
# Packages that apt-get can install are not missing here: `provision` installs them.
preflight() {
  local missing=()
  [ "$(uname -s)" = Linux ] || missing+=("Linux (this is $(uname -s))")
  [ "$(id -u)" = 0 ] || missing+=("root (kubelet, containerd and the bridge need it, running as uid $(id -u))")
  if [ ${#missing[@]} = 0 ]; then
    command -v go >/dev/null || missing+=("go on PATH")
    command -v ip >/dev/null || missing+=("ip (iproute2)")
    command -v openssl >/dev/null || missing+=("openssl")
    local pkg
    for pkg in containerd runc /usr/lib/cni/bridge redis-server; do
      if ! command -v "$pkg" >/dev/null && [ ! -x "$pkg" ] && ! command -v apt-get >/dev/null; then
        missing+=("$pkg, and no apt-get to install it")
      fi
    done
    grep -qw overlay /proc/filesystems || modprobe overlay 2>/dev/null || missing+=("overlay filesystem (containerd's snapshotter)")
    local c
    if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
      for c in cpu memory pids; do
        grep -qw "$c" /sys/fs/cgroup/cgroup.controllers || missing+=("cgroup v2 controller $c")
      done
    else
      for c in cpu cpuacct cpuset memory pids devices freezer; do
        [ -d "/sys/fs/cgroup/$c" ] || missing+=("cgroup v1 controller $c mounted at /sys/fs/cgroup/$c")
      done
    fi
    if ip link add sluice-probe0 type bridge 2>/dev/null; then
      ip link del sluice-probe0
    else
      missing+=("Linux bridges (ip link add type bridge failed)")
    fi
    if ip link add sluice-probe1 type veth peer name sluice-probe2 2>/dev/null; then
      ip link del sluice-probe1
    else
      missing+=("veth pairs (ip link add type veth failed)")
    fi
    unshare --net true 2>/dev/null || missing+=("network namespaces (unshare --net failed)")
    if [ ! -e "$D" ]; then # a leftover of an earlier run holds the ports and addresses; up removes it
      local p
      for p in "${PORTS[@]}"; do
        if ss -Hltn "sport = :$p" 2>/dev/null | grep -q .; then missing+=("free TCP port $p (in use)"); fi
      done
      if ip -4 addr show | grep -qE 'inet 198\.1[89]\.' || ip -4 route show | grep -qE '^198\.1[89]\.'; then
        missing+=("198.18.0.0/15 unused on this machine (an interface or route already has it)")
      fi
    fi
  fi
  if [ ${#missing[@]} -gt 0 ]; then
    printf 'realnode: missing: %s\n' "${missing[@]}" >&2
    return 2
  fi
}

# --- provision ----------------------------------------------------------------------------------

complete_bin() {
  local b
  for b in etcd kube-apiserver kubectl kube-controller-manager kube-scheduler kubelet kube-proxy coredns; do
    [ -x "$bin/$b" ] || return 1
  done
}

provision() {
  local need=()
  command -v containerd >/dev/null || need+=(containerd)
  command -v runc >/dev/null || need+=(runc)
  [ -x /usr/lib/cni/bridge ] && [ -x /usr/lib/cni/host-local ] && [ -x /usr/lib/cni/loopback ] || need+=(containernetworking-plugins)
  command -v iptables-restore >/dev/null || need+=(iptables)
  command -v conntrack >/dev/null || need+=(conntrack)
  command -v docker-registry >/dev/null || need+=(docker-registry)
  if [ ${#need[@]} -gt 0 ]; then
    say "installing ${need[*]} with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    apt-get install -y -qq --no-install-recommends "${need[@]}" >&2
  fi
  "$root/hack/ensure-redis.sh"
  complete_bin && return 0

  # kube-apiserver, kubectl and etcd are the envtest ones; the node's binaries are built next to
  # them from the same scratch-module recipe (a sibling module, so both caches stay valid).
  local envtest
  envtest=$("$root/hack/envtest-assets.sh")
  mkdir -p "$cache_root/realnode"
  exec 9>"$cache_root/realnode/.lock"
  flock 9
  complete_bin && return 0
  local src="$cache_root/realnode/src/kube"
  mkdir -p "$src" "$bin.tmp"
  if [ ! -f "$src/go.mod" ]; then
    cp "$cache_root/envtest/src/kube/go.mod" "$cache_root/envtest/src/kube/go.sum" "$src/"
    sed -i 's#^module .*#module sluice.local/realnode-kube#' "$src/go.mod"
  fi
  cat >"$src/tools.go" <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
GO
  say "building kubelet, kube-proxy, kube-controller-manager, kube-scheduler v$K8S_VERSION and CoreDNS (once; ~5-10 min, cached in $bin)"
  (
    cd "$src"
    GOFLAGS=-mod=mod go mod tidy >&2 2>&1 || true
    GOFLAGS=-mod=mod go build -ldflags "-X k8s.io/component-base/version.gitVersion=v$K8S_VERSION" -o "$bin.tmp/" \
      k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler >&2
  )
  # CoreDNS from its module of its own (versions pinned by its go.mod), static for its image.
  (cd "$root/hack/realnode/coredns" && CGO_ENABLED=0 go build -trimpath -o "$bin.tmp/coredns" . >&2)
  local b
  for b in etcd kube-apiserver kubectl; do ln -sf "$envtest/$b" "$bin.tmp/$b"; done
  rm -rf "$bin" && mv "$bin.tmp" "$bin"
  say "node binaries ready in $bin"
}

# --- images -------------------------------------------------------------------------------------

# images builds static binaries and wraps each in a one-layer image, into $D.images.
images() {
  local out="$D.images" b
  mkdir -p "$out/bin"
  (
    cd "$root"
    export CGO_ENABLED=0
    go build -o "$out/bin/mkimage" ./hack/realnode/mkimage
    go build -trimpath -o "$out/bin/pause" ./hack/realnode/pause
    go build -trimpath -o "$out/bin/upstream" ./cmd/upstream
    go build -trimpath -o "$out/bin/agnhost" ./hack/realnode/agnhost
    # Sluice's own images exactly as users build them (docs/install.md), named sluice.local/...:dev.
    make images VERSION=dev IMAGES_OUT="$out" IMAGES_NAME_PREFIX=sluice.local
  ) >&2
  "$out/bin/mkimage" -o "$out/pause.tar" -name sluice.local/pause:dev -entrypoint /pause "$out/bin/pause=/pause"
  "$out/bin/mkimage" -o "$out/upstream.tar" -name sluice.local/upstream:dev -entrypoint /upstream "$out/bin/upstream=/upstream"
  "$out/bin/mkimage" -o "$out/coredns.tar" -name sluice.local/coredns:dev -entrypoint /coredns "$bin/coredns=/coredns"
  "$out/bin/mkimage" -o "$out/agnhost.tar" -name "$(quickstart_image echo)" -entrypoint /agnhost "$out/bin/agnhost=/agnhost"
  # Debian's redis-server and every library it loads, at their paths, as the quickstart's Redis.
  local server libs
  server=$(readlink -f "$(command -v redis-server)")
  libs=$(ldd "$server" | grep -oE '/[^ ]+\.so[^ ]*' | sort -u | sed 's/.*/&=&/')
  # shellcheck disable=SC2086 # one argument per library
  "$out/bin/mkimage" -o "$out/redis.tar" -name "$(quickstart_image redis)" -user 999:999 \
    -entrypoint /usr/local/bin/redis-server "$server=/usr/local/bin/redis-server" $libs
  for b in "${IMAGES[@]}"; do [ -s "$out/$b.tar" ] || die "image $b was not built"; done
}

# --- processes ----------------------------------------------------------------------------------

# start NAME CMD... runs CMD in a session of its own, logging to $LOGS/NAME.log.
start() {
  local name=$1
  shift
  setsid "$@" >>"$LOGS/$name.log" 2>&1 </dev/null &
  echo $! >"$D/pids/$name"
}

# stop NAME [SECONDS] sends SIGTERM to the session of NAME, then SIGKILL after SECONDS.
stop() {
  local name=$1 wait=${2:-20} pid i
  [ -f "$D/pids/$name" ] || return 0
  pid=$(cat "$D/pids/$name")
  if alive "$pid"; then
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < wait * 10; i++)); do alive "$pid" || break; sleep 0.1; done
    if alive "$pid"; then
      say "$name did not stop in ${wait}s; killing it"
      kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  rm -f "$D/pids/$name"
}

# alive PID: the process exists and has not exited (a zombie waiting for its reaper has).
alive() { [ -r "/proc/$1/stat" ] && [ "$(sed -E 's/.*\) (.).*/\1/' "/proc/$1/stat" 2>/dev/null)" != Z ]; }

running() { [ -f "$D/pids/$1" ] && alive "$(cat "$D/pids/$1")"; }

# wait_for NAME SECONDS CMD... polls CMD until it succeeds, and gives up early when the process
# started as NAME has exited.
wait_for() {
  local what=$1 deadline=$((SECONDS + $2))
  shift 2
  while ((SECONDS < deadline)); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    if [ -f "$D/pids/$what" ] && ! running "$what"; then
      tail -n 5 "$LOGS/$what.log" >&2
      die "$what exited (log: $LOGS/$what.log)"
    fi
    sleep 0.25
  done
  die "$what not ready after $2s (logs in $LOGS)"
}

# --- certificates -------------------------------------------------------------------------------

# cert NAME SUBJECT [SANS] issues NAME.crt/NAME.key from the node's CA.
cert() {
  local name=$1 subj=$2 sans=${3:-} p="$D/pki"
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$p/$name.key" \
    -subj "$subj" -out "$p/$name.csr" 2>/dev/null
  {
    echo "basicConstraints=CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    if [ -n "$sans" ]; then
      echo "extendedKeyUsage=serverAuth,clientAuth"
      echo "subjectAltName=$sans"
    else
      echo "extendedKeyUsage=clientAuth"
    fi
  } >"$p/$name.ext"
  openssl x509 -req -in "$p/$name.csr" -CA "$p/ca.crt" -CAkey "$p/ca.key" -CAcreateserial -days 2 \
    -extfile "$p/$name.ext" -out "$p/$name.crt" 2>/dev/null
}

kubeconfig() {
  local name=$1 p="$D/pki"
  cat >"$p/$name.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: realnode
  cluster: {server: "$APISERVER", certificate-authority: "$p/ca.crt"}
users:
- name: $name
  user: {client-certificate: "$p/$name.crt", client-key: "$p/$name.key"}
contexts:
- name: realnode
  context: {cluster: realnode, user: $name}
current-context: realnode
EOF
}

pki() {
  local p="$D/pki"
  mkdir -p "$p"
  openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
    -subj "/CN=sluice-realnode-ca" -keyout "$p/ca.key" -out "$p/ca.crt" 2>/dev/null
  openssl genrsa -out "$p/sa.key" 2048 2>/dev/null
  openssl rsa -in "$p/sa.key" -pubout -out "$p/sa.pub" 2>/dev/null
  cert apiserver "/CN=kube-apiserver" \
    "IP:$HOST_IP,IP:$KUBE_SERVICE_IP,IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc"
  cert kubelet-server "/CN=$NODE" "IP:$HOST_IP,DNS:$NODE"
  cert apiserver-kubelet-client "/CN=kube-apiserver-kubelet-client/O=kubeadm:cluster-admins"
  cert admin "/CN=sluice-realnode-admin/O=system:masters"
  cert controller-manager "/CN=system:kube-controller-manager"
  cert scheduler "/CN=system:kube-scheduler"
  cert kubelet "/CN=system:node:$NODE/O=system:nodes"
  cert kube-proxy "/CN=system:kube-proxy"
  local n
  for n in admin controller-manager scheduler kubelet kube-proxy; do kubeconfig "$n"; done
}

# --- up -----------------------------------------------------------------------------------------

# snapshot records the host state `down` must return to.
snapshot() {
  local s
  mkdir -p "$D/before"
  for s in "${SYSCTLS[@]}"; do
    echo "$s=$(sysctl -n "$s")" >>"$D/before/sysctl"
  done
  for s in "${HOST_DIRS[@]}"; do
    if [ -d "$s" ]; then
      echo "$s" >>"$D/before/dirs"
      (cd "$s" && find . -mindepth 1 | sort) >"$D/before/$(echo "$s" | tr / _)"
    fi
  done
  # kube-proxy makes kubelet's KUBE-FIREWALL chain too and its cleanup leaves it: down removes
  # it unless the machine had it before.
  if iptables -t filter -S KUBE-FIREWALL >/dev/null 2>&1; then touch "$D/before/kube-firewall"; fi
}

network() {
  ip link add "$BRIDGE" type bridge
  ip addr add "$HOST_IP/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  # The host's own connections to Services (tests, port-forwards) route to the bridge before
  # kube-proxy translates them, never to the machine's default route.
  ip route add "$SERVICE_CIDR" dev "$BRIDGE" src "$HOST_IP"
  mkdir -p "$D/cni" "$D/cni-ipam"
  # isGateway=false and one route, to the Service range through the host (kube-proxy's rules):
  # pods reach 198.18.1.0/24 on the link, Services through the host, and nothing beyond.
  # ipMasq=false: the plugin adds no iptables rules of its own.
  sysctl -qw net.ipv4.ip_forward=1
  cat >"$D/cni/10-sluice-realnode.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "sluice-realnode",
  "plugins": [
    {"type": "bridge", "bridge": "$BRIDGE", "isGateway": false, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "dataDir": "$D/cni-ipam",
              "ranges": [[{"subnet": "$POD_CIDR", "rangeStart": "198.18.1.16", "rangeEnd": "198.18.1.250"}]],
              "routes": [{"dst": "$SERVICE_CIDR", "gw": "$HOST_IP"}]}},
    {"type": "loopback"}
  ]
}
EOF
}

containerd_up() {
  local c="$D/containerd"
  mkdir -p "$c"
  cat >"$c/config.toml" <<EOF
version = 2
root = "$c/root"
state = "$c/state"
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.aufs", "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "$c/containerd.sock"
[ttrpc]
  address = "$c/containerd.sock.ttrpc"
[metrics]
  address = ""
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "sluice.local/pause:dev"
  # Without CAP_SYS_RESOURCE (as in this VM) every sandbox fails in runc otherwise.
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$D/cni"
    max_conf_num = 1
EOF
  start containerd containerd --config "$c/config.toml"
  wait_for containerd 30 ctr_ version
  local i
  for i in "${IMAGES[@]}"; do
    ctr_ images import "$D.images/$i.tar" >/dev/null
  done
}

# apiserver_start starts kube-apiserver on the node's etcd and waits until it is ready; a no-op
# when it runs. `up` and `apiserver start` (after `apiserver stop`, the control-plane-down case
# of the fault matrix) share it, so the restarted one is the same.
apiserver_start() {
  local p="$D/pki"
  if running kube-apiserver; then return 0; fi
  # --enable-aggregator-routing: the API server calls webhooks at their endpoints' pod IPs,
  # since without kube-proxy a Service's cluster IP leads nowhere. InternalIP: it reaches the
  # kubelet (logs, exec) at the node's address; by default it tries the node's hostname first,
  # a DNS query to the machine's resolver.
  start kube-apiserver "$bin/kube-apiserver" \
    --etcd-servers http://127.0.0.1:2379 \
    --bind-address "$HOST_IP" --advertise-address "$HOST_IP" --secure-port 6443 \
    --tls-cert-file "$p/apiserver.crt" --tls-private-key-file "$p/apiserver.key" \
    --client-ca-file "$p/ca.crt" \
    --kubelet-client-certificate "$p/apiserver-kubelet-client.crt" --kubelet-client-key "$p/apiserver-kubelet-client.key" \
    --service-account-issuer https://kubernetes.default.svc \
    --service-account-key-file "$p/sa.pub" --service-account-signing-key-file "$p/sa.key" \
    --service-cluster-ip-range "$SERVICE_CIDR" \
    --authorization-mode Node,RBAC \
    --enable-aggregator-routing=true \
    --kubelet-preferred-address-types InternalIP \
    --profiling=false
  wait_for kube-apiserver 90 kubectl get --raw /readyz
}

control_plane_up() {
  local p="$D/pki"
  start etcd "$bin/etcd" --name realnode --data-dir "$D/etcd" \
    --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
    --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
    --initial-cluster realnode=http://127.0.0.1:2380 --unsafe-no-fsync --log-level warn
  wait_for etcd 30 curl -sf http://127.0.0.1:2379/health

  apiserver_start
  # What kubeadm grants the API server's client certificate at the kubelet: logs, exec and
  # port-forward (kubelet authorizes through the API server, webhook mode).
  kubectl create clusterrolebinding sluice-realnode:kubelet-api-admin \
    --clusterrole system:kubelet-api-admin --user kube-apiserver-kubelet-client >&2

  start kube-controller-manager "$bin/kube-controller-manager" \
    --kubeconfig "$p/controller-manager.kubeconfig" \
    --authentication-kubeconfig "$p/controller-manager.kubeconfig" \
    --authorization-kubeconfig "$p/controller-manager.kubeconfig" \
    --bind-address 127.0.0.1 \
    --controllers '*' --use-service-account-credentials \
    --service-account-private-key-file "$p/sa.key" --root-ca-file "$p/ca.crt" \
    --cluster-signing-cert-file "$p/ca.crt" --cluster-signing-key-file "$p/ca.key" \
    --allocate-node-cidrs --cluster-cidr "$POD_CIDR" --node-cidr-mask-size 24 \
    --service-cluster-ip-range "$SERVICE_CIDR" \
    --leader-elect=false --profiling=false
  start kube-scheduler "$bin/kube-scheduler" \
    --kubeconfig "$p/scheduler.kubeconfig" \
    --authentication-kubeconfig "$p/scheduler.kubeconfig" \
    --authorization-kubeconfig "$p/scheduler.kubeconfig" \
    --bind-address 127.0.0.1 --leader-elect=false --profiling=false
}

kubelet_up() {
  local p="$D/pki" k="$D/kubelet"
  mkdir -p "$k" "$D/pod-logs"
  : >"$D/resolv.conf" # pods get no nameserver of this machine, only the cluster's: nothing of theirs leaves it
  cat >"$D/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix://$D/containerd/containerd.sock
address: $HOST_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
tlsCertFile: $p/kubelet-server.crt
tlsPrivateKeyFile: $p/kubelet-server.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $p/ca.crt}
authorization: {mode: Webhook}
cgroupDriver: cgroupfs
# Every pod's cgroup lives under one name that down removes.
cgroupRoot: /sluice-realnode
failCgroupV1: false
failSwapOn: false
# No KUBE-* iptables chains: nothing here needs them, and down has none to remove.
makeIPTablesUtilChains: false
resolvConf: $D/resolv.conf
clusterDNS: [$DNS_IP]
clusterDomain: cluster.local
podLogsDir: $D/pod-logs
# The imported images cannot be pulled again: never collect them, never evict for disk.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", nodefs.inodesFree: "1%", imagefs.available: "1%"}
# Bounds how long a ConfigMap edit takes to reach a running pod's volume: kubelet rewrites
# volumes on each pod sync (default every 1m plus jitter); with Watch it has the new object
# at once and writes it at the next sync.
syncFrequency: 10s
configMapAndSecretChangeDetectionStrategy: Watch
rotateCertificates: false
serverTLSBootstrap: false
EOF
  # kubelet wants its cgroup root to exist in every hierarchy; cpuset's needs its parent's sets.
  local c
  if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
    mkdir -p /sys/fs/cgroup/sluice-realnode
  else
    for c in /sys/fs/cgroup/*/; do
      [ "$c" = /sys/fs/cgroup/unified/ ] && continue
      mkdir -p "$c/sluice-realnode"
    done
    cat /sys/fs/cgroup/cpuset/cpuset.cpus >/sys/fs/cgroup/cpuset/sluice-realnode/cpuset.cpus
    cat /sys/fs/cgroup/cpuset/cpuset.mems >/sys/fs/cgroup/cpuset/sluice-realnode/cpuset.mems
  fi
  start kubelet "$bin/kubelet" --config "$D/kubelet.yaml" --kubeconfig "$p/kubelet.kubeconfig" \
    --root-dir "$k" --cert-dir "$k/pki" --hostname-override "$NODE" --node-ip "$HOST_IP" -v 1
  wait_for kubelet 120 node_ready
}

node_ready() {
  [ "$(kubectl get node "$NODE" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = True ]
}

# kube_proxy_up routes Services: iptables mode, every Service connection masqueraded to the
# host's bridge address (pods share one bridge, so without it a reply would go straight back to
# the pod and miss the reverse translation), NodePorts only on the bridge address, and the
# host's conntrack and localnet settings left alone.
kube_proxy_up() {
  local p="$D/pki"
  cat >"$D/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $p/kube-proxy.kubeconfig}
mode: iptables
clusterCIDR: $POD_CIDR
hostnameOverride: $NODE
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
nodePortAddresses: [$HOST_IP/32]
iptables: {masqueradeAll: true, localhostNodePorts: false}
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
EOF
  start kube-proxy "$bin/kube-proxy" --config "$D/kube-proxy.yaml"
  wait_for kube-proxy 60 curl -sf http://127.0.0.1:10256/healthz
}

# dns_up runs CoreDNS as the cluster's kube-dns (hack/realnode/coredns.yaml).
dns_up() {
  sed "s/DNS_IP/$DNS_IP/" "$root/hack/realnode/coredns.yaml" | kubectl apply -f - >&2
  kubectl -n kube-system rollout status deployment/coredns --timeout 180s >&2
}

# free_port FROM prints a TCP port from FROM up that nothing on this machine listens on.
free_port() {
  local p
  for p in $(seq "$1" $(($1 + 600))); do
    ss -Hltn "sport = :$p" 2>/dev/null | grep -q . || { echo "$p"; return 0; }
  done
  die "no free TCP port in $1-$(($1 + 600))"
}

# registry_start runs the node's container registry on localhost: images pushed to
# localhost:PORT/... are pulled from there by containerd, as from any registry.
registry_start() {
  REGISTRY_PORT=$(free_port 15000)
  echo "$REGISTRY_PORT" >"$D/registry-port"
  mkdir -p "$D/registry"
  cat >"$D/registry.yaml" <<EOF
version: 0.1
log: {level: warn}
storage:
  filesystem: {rootdirectory: $D/registry}
http:
  addr: 127.0.0.1:$REGISTRY_PORT
EOF
  start registry docker-registry serve "$D/registry.yaml"
  wait_for registry 30 curl -sf "http://127.0.0.1:$REGISTRY_PORT/v2/"
}

redis_start() {
  if running redis; then return 0; fi
  if [ "$REDIS_PORT" = 0 ]; then
    REDIS_PORT=$(free_port 16379)
    echo "$REDIS_PORT" >"$D/redis-port"
  fi
  mkdir -p "$D/redis"
  start redis redis-server --bind "$HOST_IP" --port "$REDIS_PORT" --protected-mode no \
    --save '' --appendonly no --dir "$D/redis" --daemonize no
  wait_for redis 20 redis-cli -h "$HOST_IP" -p "$REDIS_PORT" ping
}

sluice_up() {
  say "installing Sluice: kubectl kustomize config/local-node | kubectl apply"
  # config/local-node names the node's Redis at the bridge address; its port is this run's.
  "$bin/kubectl" kustomize "$root/config/local-node" | sed "s|redis://$HOST_IP:16379|redis://$HOST_IP:$REDIS_PORT|" >"$D/sluice.yaml"
  kubectl apply --server-side -f "$D/sluice.yaml" >&2
  kubectl -n sluice-system rollout status deployment/sluice-controller-manager --timeout 180s >&2
}

up() {
  local t0=$SECONDS
  if [ -e "$D" ]; then
    say "state of an earlier run found in $D; taking it down first"
    down
  fi
  complete_bin || die "node binaries missing in $bin: run '$0 provision'"
  for i in "${IMAGES[@]}"; do [ -s "$D.images/$i.tar" ] || die "image $i missing: run '$0 images'"; done
  mkdir -p "$D/pids"
  rm -rf "$LOGS" && mkdir -p "$LOGS"
  snapshot
  network
  pki
  registry_start
  containerd_up
  control_plane_up
  kubelet_up
  kube_proxy_up
  dns_up
  redis_start
  say "node up in $((SECONDS - t0))s; kubectl --kubeconfig $D/pki/admin.kubeconfig"
}

# --- down ---------------------------------------------------------------------------------------

# pids_using prints the processes of this node: those whose command line names its state
# directory (containerd and its shims, which leave containerd's session) or that run one of its
# binaries. Other Kubernetes processes on the machine (envtest's) are not among them.
pids_using() {
  local f pid exe
  for f in /proc/[0-9]*/cmdline; do
    pid=${f#/proc/}
    pid=${pid%/cmdline}
    [ "$pid" = $$ ] && continue
    exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || continue
    case $exe in "$bin"/* | "$(readlink -f "$bin")"/*) echo "$pid"; continue ;; esac
    if tr '\0' ' ' <"$f" 2>/dev/null | grep -qF -- "$D/"; then echo "$pid"; fi
  done
}

down() {
  [ -e "$D" ] || return 0
  set +e
  local i
  # Pods first, through kubelet, so that the runtime tears their networks down itself.
  if running kube-apiserver && running kubelet && running containerd; then
    kubectl delete namespace --all --wait=false --ignore-not-found >/dev/null 2>&1
    kubectl delete pods --all -A --grace-period=2 --wait=false >/dev/null 2>&1
    local deadline=$((SECONDS + 60))
    while ((SECONDS < deadline)) && running kubelet; do
      [ -z "$(ctr_ tasks ls -q 2>/dev/null)" ] && break
      sleep 0.5
    done
  fi
  stop kubelet
  stop kube-proxy
  # kube-proxy's cleanup removes its iptables (and nftables) rules and chains.
  [ -x "$bin/kube-proxy" ] && "$bin/kube-proxy" --cleanup >/dev/null 2>&1
  stop registry 5
  if running containerd; then
    local t
    for t in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks kill -s SIGKILL "$t" >/dev/null 2>&1; done
    sleep 1
    for t in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks rm -f "$t" >/dev/null 2>&1; done
  fi
  stop redis 5
  stop kube-scheduler
  stop kube-controller-manager
  stop kube-apiserver 30
  stop etcd
  stop containerd
  # Shims of containers that outlived everything else.
  local pid
  for pid in $(pids_using); do kill -KILL "$pid" 2>/dev/null; done
  sleep 0.5

  # Mounts: the runtime's under $D and the pinned network namespaces of this run's pods.
  local m
  for ((i = 0; i < 3; i++)); do
    for m in $(awk -v d="$D" 'index($2, d) == 1 {print $2}' /proc/mounts | sort -r); do umount "$m" 2>/dev/null || umount -l "$m"; done
  done
  local netns
  for netns in $(new_entries /var/run/netns); do
    ip netns delete "$netns" 2>/dev/null || { umount "/var/run/netns/$netns" 2>/dev/null; rm -f "/var/run/netns/$netns"; }
  done
  # A pod's veth can outlive its network namespace's last process; with the bridge gone it
  # could no longer be told from the machine's own links.
  local link
  for link in $(ip -o link show master "$BRIDGE" 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1); do
    ip link del "$link" 2>/dev/null
  done
  ip link del "$BRIDGE" 2>/dev/null
  if [ -d "$D/before" ] && [ ! -e "$D/before/kube-firewall" ] && iptables -t filter -S KUBE-FIREWALL >/dev/null 2>&1; then
    while iptables -t filter -D INPUT -j KUBE-FIREWALL 2>/dev/null; do :; done
    while iptables -t filter -D OUTPUT -j KUBE-FIREWALL 2>/dev/null; do :; done
    iptables -t filter -F KUBE-FIREWALL && iptables -t filter -X KUBE-FIREWALL
  fi

  # Cgroups of the pods, deepest first.
  local c
  for c in /sys/fs/cgroup/*/sluice-realnode /sys/fs/cgroup/sluice-realnode; do
    [ -d "$c" ] && find "$c" -depth -type d -exec rmdir {} + 2>/dev/null
  done

  # Host settings and files kubelet, containerd and CNI wrote regardless of their directories.
  if [ -f "$D/before/sysctl" ]; then
    local kv
    while IFS= read -r kv; do
      [ "$(sysctl -n "${kv%%=*}")" = "${kv#*=}" ] || sysctl -qw "$kv"
    done <"$D/before/sysctl"
  fi
  local dir e
  if [ -d "$D/before" ]; then
    for dir in "${HOST_DIRS[@]}"; do
      [ -d "$dir" ] || continue
      [ "$dir" = /var/run/netns ] && [ /var/run -ef /run ] && continue
      if grep -qxF "$dir" "$D/before/dirs" 2>/dev/null; then
        for e in $(new_entries "$dir"); do rm -rf "${dir:?}/$e"; done
      else
        rm -rf "$dir"
      fi
    done
  fi
  rm -rf "$D"
  set -e
  say "down: stopped and removed"
}

# new_entries DIR prints the top-level entries of DIR that the snapshot did not have.
new_entries() {
  local dir=$1 snap="$D/before/$(echo "$1" | tr / _)"
  [ -d "$dir" ] || return 0
  if [ -f "$snap" ]; then
    (cd "$dir" && find . -mindepth 1 -maxdepth 1 | sort) | comm -23 - "$snap" | sed 's#^\./##'
  elif grep -qxF "$dir" "$D/before/dirs" 2>/dev/null; then
    return 0
  else
    (cd "$dir" && find . -mindepth 1 -maxdepth 1) | sed 's#^\./##'
  fi
}

# leftovers prints anything of a node still on the machine; empty means clean.
leftovers() {
  set +e +o pipefail # each check is a search that usually finds nothing
  local pid
  for pid in $(pids_using); do echo "process $pid: $(tr '\0' ' ' </proc/"$pid"/cmdline)"; done
  grep -E "$D|sluice-realnode|/run/netns/cni-" /proc/mounts | sed 's/^/mount /'
  ip -br link | grep -E "^$BRIDGE|^veth" | sed 's/^/link /'
  ip -4 addr show | grep -E 'inet 198\.1[89]\.' | sed 's/^/address /'
  ip netns list 2>/dev/null | grep -E '^cni-' | sed 's/^/netns /'
  if command -v iptables-save >/dev/null; then iptables-save 2>/dev/null | grep -E 'KUBE-|CNI-|198\.1[89]\.' | sed 's/^/iptables /'; fi
  ls -d /sys/fs/cgroup/*/sluice-realnode 2>/dev/null | sed 's/^/cgroup /'
  [ -e "$D" ] && echo "state $D"
  return 0
}

case ${1:-} in
preflight) preflight ;;
provision) provision ;;
images) images ;;
up) up ;;
sluice) sluice_up ;;
down) down ;;
leftovers) leftovers ;;
redis)
  case ${2:-} in
  stop) stop redis 5 ;;
  start) redis_start ;;
  *) die "usage: $0 redis stop|start" ;;
  esac
  ;;
apiserver)
  case ${2:-} in
  stop) stop kube-apiserver 30 ;;
  start) apiserver_start ;;
  *) die "usage: $0 apiserver stop|start" ;;
  esac
  ;;
env)
  echo "SLUICE_REALNODE_KUBECONFIG=$D/pki/admin.kubeconfig"
  echo "SLUICE_REALNODE_KUBECTL=$bin/kubectl"
  echo "SLUICE_REALNODE_NODE_SCRIPT=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
  echo "SLUICE_REALNODE_KUBELET_DIR=$D/kubelet"
  echo "SLUICE_REALNODE_HOST_IP=$HOST_IP"
  echo "SLUICE_REALNODE_REGISTRY=localhost:$REGISTRY_PORT"
  ;;
*)
  sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 64
  ;;
esac
