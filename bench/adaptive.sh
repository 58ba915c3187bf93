#!/usr/bin/env bash
# The sidecar's adaptive concurrency limit against an application with a knee, beside a sweep
# of fixed limits, in one run: requests per second, shed per second, the application's p50 and
# p99 service time and its peak in flight under the same closed-loop load.
#
# bench/knee serves the application (a floor of FLOOR up to KNEE requests in flight, then
# FLOOR × in flight / KNEE: no more throughput past the knee, only latency) and drives CLIENTS
# closed-loop clients through the built sidecar (./sidecar), a shed client waiting 10 ms before
# its next request. Each configuration restarts the sidecar with its own policies.json: the
# fixed limits 4, 8, 16, 32 and 64 (an adaptive rule pinned: minLimit = limit), then the
# adaptive rule from 4 up to 1000. Each sends WARMUP of load, not measured (the adaptive limit
# starts at its minLimit and learns the floor), then DURATION measured. The sidecar wants a
# Redis: a redis-server of its own, which the limits do not use.
# Writes $OUT/adaptive.tsv and $OUT/adaptive.md. No figure is checked: this is a benchmark.
#
# Usage: bench/adaptive.sh  (OUT=bench/out DURATION=10s WARMUP=$DURATION CLIENTS=64 FLOOR=20ms KNEE=8)
set -euo pipefail

OUT=${OUT:-bench/out}
DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-$DURATION}
CLIENTS=${CLIENTS:-64}
FLOOR=${FLOOR:-20ms}
KNEE=${KNEE:-8}
FIXED=(4 8 16 32 64)

cd "$(dirname "$0")/.."
for bin in go redis-server curl python3; do
  command -v "$bin" >/dev/null || { echo "missing $bin (apt-get install -y redis-server curl python3)" >&2; exit 1; }
done
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
# shellcheck source=bench/lib.sh
. bench/lib.sh

# The limit's form in policies.json and its series on /metrics, in one place. $1 is the limit,
# $2 the minLimit (equal: a fixed limit). A Concurrency rule with no key and adaptive is each
# sidecar's own limit on every request in flight, not shared through Redis.
policies() {
  cat <<JSON
{"version":1,"namespace":"bench","policies":[{"name":"knee","selector":{},"replicas":1,"failureMode":"Local",
 "response":{"statusCode":429,"headers":"Both"},
 "rules":[{"name":"guard","key":[],"algorithm":"Concurrency","limit":$1,"windowMs":30000,"cost":1,"adaptive":{"minLimit":$2,"tolerancePct":125},"mode":"Enforce"}]}]}
JSON
}
LIMIT_SERIES='sluice_adaptive_limit{policy="knee",rule="guard"}'

go build -o "$WORK/sluice-sidecar" ./sidecar
go build -o "$WORK/knee" ./bench/knee
P=$(freeport)
redis-server --port "$P" --bind 127.0.0.1 --save "" --appendonly no --daemonize no --loglevel warning \
  --dir "$WORK" > "$WORK/redis.log" 2>&1 &
RPID=$!; PIDS+=("$RPID")
waitport "$P"

# run NAME LIMIT MINLIMIT: one configuration's row, through a sidecar of its own.
run() {
  policies "$2" "$3" > "$WORK/policies.json"
  local up sp sm spid
  up=$(freeport); sp=$(freeport); sm=$(freeport)
  "$WORK/sluice-sidecar" --listen "127.0.0.1:$sp" --upstream "http://127.0.0.1:$up" --config "$WORK/policies.json" \
    --pod-labels-file "" --metrics-listen "127.0.0.1:$sm" --redis-url "redis://127.0.0.1:$P/0" > "$WORK/sidecar.log" 2>&1 &
  spid=$!; PIDS=("$RPID" "$spid")
  echo "# $1: limit $2, minLimit $3, $WARMUP + $DURATION (load average $(cut -d' ' -f1 /proc/loadavg))" >&2
  # knee serves the upstream, then waits for the sidecar's /readyz (the configuration loaded,
  # the upstream reachable: a limit that was not loaded would measure no limit at all).
  "$WORK/knee" -label "$1" -listen "127.0.0.1:$up" -target "http://127.0.0.1:$sp/" -ready "http://127.0.0.1:$sm/readyz" \
    -metrics "http://127.0.0.1:$sm/metrics" -limit-series "$LIMIT_SERIES" \
    -floor "$FLOOR" -knee "$KNEE" -clients "$CLIENTS" -warmup "$WARMUP" -duration "$DURATION" >> "$TSV" ||
    { cat "$WORK/sidecar.log" >&2; exit 1; }
  kill "$spid"; wait "$spid" 2>/dev/null || true
  PIDS=("$RPID")
}

TSV="$OUT/adaptive.tsv"
"$WORK/knee" -header > "$TSV"
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
for l in "${FIXED[@]}"; do run "fixed $l" "$l" "$l"; done
run adaptive 1000 4
LOAD1=$(cut -d' ' -f1-3 /proc/loadavg)

python3 - "$TSV" "$LOAD0" "$LOAD1" "$(nproc)" "$CLIENTS" "$FLOOR" "$KNEE" "$WARMUP" "$DURATION" > "$OUT/adaptive.md" <<'PY'
import csv, sys
tsv, load0, load1, cpus, clients, floor, knee, warmup, duration = sys.argv[1:]
rows = list(csv.DictReader(open(tsv), delimiter="\t"))
print(f"{clients} closed-loop clients through one sidecar to bench/knee's application (floor {floor} up to "
      f"{knee} requests in flight, then floor × in flight / {knee}), {warmup} of warm-up then {duration} measured "
      f"per configuration; load average {load0} at the start, {load1} at the end, on {cpus} CPUs "
      f"(shared machine: noisy). Service times are the application's, from a request's arrival to its response; "
      f"the limit is sluice_adaptive_limit, at the end and its median [least, most] over the measured window.")
print()
print("| limit | req/s | 503/s | upstream p50 | upstream p99 | p99 ÷ floor | peak in flight | limit at end | limit median [min, max] | other answers |")
print("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
for r in rows:
    print(f"| {r['config']} | {float(r['ok_per_s']):.0f} | {float(r['shed_per_s']):.0f} | {r['p50_ms']} ms | {r['p99_ms']} ms | "
          f"{r['p99_over_floor']} | {r['peak_inflight']} | {r['limit_end']} | {r['limit_median']} [{r['limit_min']}, {r['limit_max']}] | {r['other']} |")
fixed = [r for r in rows if r["config"].startswith("fixed")]
ad = next(r for r in rows if r["config"] == "adaptive")
best = max(fixed, key=lambda r: float(r["ok_per_s"]))
print()
print(f"Adaptive: **{float(ad['ok_per_s']) / float(best['ok_per_s']):.2f}×** the throughput of the best fixed limit "
      f"({best['config']}, {float(best['ok_per_s']):.0f} req/s), upstream p99 **{ad['p99_over_floor']}×** the floor "
      f"({best['config']}: {best['p99_over_floor']}×), limit {ad['limit_end']} at the end "
      f"(median {ad['limit_median']} over the measured window; the knee is {knee}).")
PY
cat "$OUT/adaptive.md"
