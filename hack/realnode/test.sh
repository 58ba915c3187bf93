#!/usr/bin/env bash
# `make test-realnode`: Sluice on a real single-node Kubernetes. Brings the node up with node.sh,
# runs the Go test in test/realnode against it and takes everything down again, on success,
# failure or interrupt, then checks that nothing of the node is left on the machine.
#
# It runs docs/quickstart.md as printed first (test/realnode/quickstart_test.go), then the suite.
# Arguments go to the suite's `go test` after its own, e.g. one case of the suite:
#   hack/realnode/test.sh -ginkgo.focus='control plane'
#
# Where this machine cannot run a node it prints one SKIP line saying what is missing and exits
# 0; with CI=true it fails instead, so that CI cannot pass without running the test.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
node="$here/node.sh"

if ! missing=$("$node" preflight 2>&1); then
  reason=$(echo "$missing" | sed -n 's/^realnode: missing: //p' | awk 'NR > 1 {printf "; "} {printf "%s", $0}')
  if [ "${CI:-}" = true ]; then
    echo "FAIL: test-realnode cannot run a Kubernetes node on this machine (CI=true, so this is an error): missing ${reason:-$missing}"
    exit 1
  fi
  echo "SKIP: test-realnode needs a machine that can run a Kubernetes node; missing: ${reason:-$missing}"
  exit 0
fi

t0=$SECONDS
phase() { echo "realnode: $1 took $(($SECONDS - $2))s" >&2; }

t=$SECONDS
"$node" provision
phase provision $t
t=$SECONDS
"$node" images
phase images $t

status=0
finish() {
  local t=$SECONDS left
  if [ $status != 0 ] && [ -d /var/tmp/sluice-realnode.logs ]; then
    echo "realnode: last lines of the node's logs (all in /var/tmp/sluice-realnode.logs):" >&2
    for f in /var/tmp/sluice-realnode.logs/*.log; do
      echo "--- $f" >&2
      tail -n 15 "$f" >&2
    done
  fi
  "$node" down
  phase down $t
  left=$("$node" leftovers)
  if [ -n "$left" ]; then
    echo "realnode: left on the machine after down:" >&2
    echo "$left" >&2
    status=1
  fi
  echo "realnode: total $(($SECONDS - t0))s" >&2
  exit $status
}
trap 'status=$?; finish' EXIT
trap 'exit 130' INT TERM HUP

t=$SECONDS
"$node" up
phase up $t

set -a
eval "$("$node" env)"
set +a
cd "$root"

# First what a user does on a cluster without Sluice: docs/quickstart.md, run as printed; its
# last step uninstalls everything it installed.
t=$SECONDS
go test -tags realnode -count=1 -timeout 40m -v ./test/realnode/ -run '^TestQuickstart$'
phase quickstart $t

# Then the suite, on Sluice installed its own way (config/local-node).
t=$SECONDS
"$node" sluice
phase "install (config/local-node)" $t
t=$SECONDS
go test -tags realnode -count=1 -timeout 15m -v ./test/realnode/ -run '^TestRealNode$' -ginkgo.v "$@"
phase test $t
