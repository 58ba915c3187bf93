#!/usr/bin/env bash
# Runs a make target N times with a CPU-bound load beside it, pinned to one core, and reports
# each run's outcome, time and failing tests: the proof that a suite passes on a busy machine.
#
#   hack/under-load.sh [-n N] [-j LOADS] [TARGET...]     (default: -n 5 -j 1 test)
#
# Each run's full output is kept in bin/under-load/TARGET-RUN.log. The load is LOADS shell busy
# loops on CPU 0 (taskset); it is stopped when the script ends, however it ends. Exits non-zero
# when any run failed.
set -uo pipefail
cd "$(dirname "$0")/.."

runs=5 loads=1
while getopts "n:j:" o; do
  case $o in
    n) runs=$OPTARG ;;
    j) loads=$OPTARG ;;
    *) echo "usage: $0 [-n RUNS] [-j LOADS] [TARGET...]" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
targets=("${@:-test}")
logs=bin/under-load
mkdir -p "$logs"

pids=()
stop_load() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait "${pids[@]}" 2>/dev/null; }
trap stop_load EXIT
trap 'exit 130' INT TERM
pin=() where="any CPU"
command -v taskset >/dev/null && pin=(taskset -c 0) where="CPU 0"
for _ in $(seq "$loads"); do
  "${pin[@]}" bash -c 'while :; do :; done' &
  pids+=($!)
done
echo "under-load: ${#pids[@]} CPU-bound loop(s) on $where; $(nproc) CPUs; $runs run(s) of: ${targets[*]}"

failed=0 passed=0
for target in "${targets[@]}"; do
  for i in $(seq "$runs"); do
    log="$logs/$target-$i.log"
    start=$SECONDS
    if make "$target" >"$log" 2>&1; then
      passed=$((passed + 1))
      echo "under-load: make $target run $i/$runs: pass in $((SECONDS - start)) s"
    else
      failed=$((failed + 1))
      echo "under-load: make $target run $i/$runs: FAIL in $((SECONDS - start)) s (log: $log)"
      # go test's failing tests (innermost names too) and packages, Ginkgo's failed specs.
      grep -E '^\s*--- FAIL: |^FAIL\s+\S+|^\s*\[FAIL\]|^make: \*\*\*' "$log" | sed 's/^/    /' | sort -u | head -40
    fi
  done
done
echo "under-load: $passed passed, $failed failed"
[ "$failed" = 0 ]
