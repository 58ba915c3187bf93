# Shared by bench/proxy.sh and bench/store.sh (source it after `set -euo pipefail`): a work
# directory and the background processes listed in PIDS, both removed on exit, and loopback
# port helpers.
WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
# freeclusterport: a free loopback port for a cluster node, whose bus port (port + 10000, which
# Redis derives) is free too and below 65536; an ephemeral port from freeport may be above 55535.
freeclusterport() {
  python3 -c '
import random, socket
for _ in range(100):
    p = random.randint(20000, 55535)
    try:
        for q in (p, p + 10000):
            s = socket.socket(); s.bind(("127.0.0.1", q)); s.close()
    except OSError:
        continue
    print(p)
    break
else:
    raise SystemExit("no free cluster port after 100 tries")'
}
waitport() { for _ in $(seq 200); do (echo >/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0; sleep 0.05; done; echo "port $1 never opened" >&2; exit 1; }
