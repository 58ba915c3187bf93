#!/usr/bin/env bash
# Leased limits (issue 14), two parts, each comparing modes side by side in the same run:
#  1. two sidecars' lease engines sharing one hot key through one redis-server on loopback,
#     closed-loop callers, the exact rule, the leased rule and local decisions
#     (bench/leasebench): store calls, Redis CPU per decision, worst interval and bound.
#  2. two sluice-sidecar binaries on one hot key (every request from 127.0.0.1), one wrk each
#     (closed loop, -t1 -c$SIDECAR_CONNS, $SIDECAR_DURATION s), in $ROUNDS rounds of: local (no
#     --redis-url: the local share), leased (the rule leased, lease maxAge $MAX_AGE, Redis) and
#     exact (the same rule unleased, Redis), then two rules on every request (client IP and
#     path) local and both leased (one all-or-nothing decision from two leases); the rules
#     never deny (1e8/s). Throughput and the sidecars' CPU per request (utime+stime from
#     /proc) as ratios to local (to two rules local for those), medians of the rounds; the
#     order of the modes rotates each round. Needs wrk.
# Writes $OUT/lease.tsv, $OUT/lease-sidecar.tsv and $OUT/lease.md.
#
# Usage: bench/lease.sh  (OUT=bench/out DURATION=2s PODS=2 CALLERS=8 MAX_AGE=100ms
#                         SIDECAR_DURATION=5 SIDECAR_CONNS=16 ROUNDS=3; SIDECAR=0 skips part 2)
set -euo pipefail

OUT=${OUT:-bench/out}
DURATION=${DURATION:-2s}
PODS=${PODS:-2}
CALLERS=${CALLERS:-8}
MAX_AGE=${MAX_AGE:-100ms}
SIDECAR=${SIDECAR:-1}
SIDECAR_DURATION=${SIDECAR_DURATION:-5}
SIDECAR_CONNS=${SIDECAR_CONNS:-16}
ROUNDS=${ROUNDS:-3}

cd "$(dirname "$0")/.."
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
# shellcheck source=bench/lib.sh
. bench/lib.sh
go build -o "$WORK/leasebench" ./bench/leasebench
P=$(freeport)
redis-server --port "$P" --bind 127.0.0.1 --save "" --appendonly no --daemonize no --loglevel warning \
  --dir "$WORK" > "$WORK/redis.log" 2>&1 &
PIDS+=($!)
waitport "$P"
"$WORK/leasebench" -redis-url "redis://127.0.0.1:$P/0" -pods "$PODS" -callers "$CALLERS" -duration "$DURATION" \
  -max-age "$MAX_AGE" | tee "$OUT/lease.tsv"
python3 - "$OUT/lease.tsv" "$PODS" "$CALLERS" "$DURATION" "$MAX_AGE" > "$OUT/lease.md" <<'PY'
import sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.startswith("leasebench")]
pods, callers, duration, age = sys.argv[2:]
by = {(r[1], r[2]): r for r in rows}
print(f"{pods} sidecars' lease engines, {callers} closed-loop callers each, one hot TokenBucket key, one "
      f"redis-server on loopback, {duration} per mode, lease maxAge {age}. `far`: limit 1e8/s, never "
      "denying; `near`: 5000/s, burst 500, saturated. Ratios to the exact rule (Redis CPU) and to "
      "local decisions (throughput) of the same case in the same run. The bound: at most "
      "burst + rate × (T + maxAge) in any interval of T ms; `worst` is the interval with the least slack.")
print()
print("| case | mode | decisions/s | vs local | store calls / decision | Redis CPU µs / decision | vs exact | admitted | worst interval | bound |")
print("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|")
for r in rows:
    case, mode = r[1], r[2]
    loc, ex = by.get((case, "local")), by.get((case, "exact"))
    vs_local = f"{float(r[4]) / float(loc[4]):.2f}×" if loc else "-"
    vs_exact = f"{float(r[6]) / float(ex[6]):.3f}×" if ex and float(ex[6]) > 0 and mode != "local" else "-"
    print(f"| {case} | {mode} | {float(r[4]):.0f} | {vs_local} | {r[5]} | {r[6]} | {vs_exact} | {r[7]} | {r[8]} | {r[9]} |")
PY
if [ "$SIDECAR" = 1 ]; then
  command -v wrk >/dev/null || { echo "missing wrk (apt-get install -y wrk)" >&2; exit 1; }
  go build -o "$WORK/sluice-sidecar" ./sidecar
  go build -o "$WORK/upstream" ./cmd/upstream
  UP=$(freeport)
  "$WORK/upstream" -listen "127.0.0.1:$UP" > /dev/null 2>&1 &
  PIDS+=($!)
  waitport "$UP"
  age_ms=$(awk -v a="$MAX_AGE" 'BEGIN { n = a + 0; if (a ~ /ms$/) print n; else if (a ~ /s$/) print n * 1000; else print n }')
  # rule NAME SOURCE LEASE: a never-denying rule keyed on SOURCE, LEASE its lease field.
  rule() {
    printf '{"name":"%s","key":[{"source":"%s"}],"algorithm":"TokenBucket","limit":100000000,"windowMs":1000,"burst":100000000,"cost":1,"mode":"Enforce"%s}' "$1" "$2" "$3"
  }
  # policy RULES: the rules (JSON, comma-separated) in a policy of two replicas.
  policy() {
    printf '%s\n' '{"version":1,"namespace":"bench","policies":[{"name":"bench","selector":{},"replicas":2,"failureMode":"Local",' \
      ' "response":{"statusCode":429,"headers":"Both"},' \
      ' "rules":['"$1"']}]}'
  }
  lease=",\"lease\":{\"maxAgeMs\":$age_ms}"
  policy "$(rule hot clientIP "$lease")" > "$WORK/leased.json"
  policy "$(rule hot clientIP "")" > "$WORK/exact.json"
  # Two leased rules on every request (one all-or-nothing decision, both from leases).
  policy "$(rule hot clientIP "$lease"),$(rule path path "$lease")" > "$WORK/leased2.json"
  # sidecar NAME CONFIG [flags...]: starts one, sets SC_PORT[NAME] and SC_PID[NAME].
  declare -A SC_PORT SC_PID
  sidecar() {
    local name=$1 config=$2; shift 2
    local port metrics; port=$(freeport); metrics=$(freeport)
    "$WORK/sluice-sidecar" --listen "127.0.0.1:$port" --upstream "http://127.0.0.1:$UP" --config "$config" \
      --pod-labels-file "" --metrics-listen "127.0.0.1:$metrics" "$@" > "$WORK/sidecar-$name.log" 2>&1 &
    SC_PID[$name]=$!; SC_PORT[$name]=$port; PIDS+=($!)
    waitport "$port"
    for _ in $(seq 100); do curl -sf "http://127.0.0.1:$metrics/readyz" >/dev/null && return 0; sleep 0.05; done
    echo "sidecar $name not ready" >&2; cat "$WORK/sidecar-$name.log" >&2; exit 1
  }
  MODES=(local leased exact local2 leased2)
  for i in 1 2; do
    sidecar "local$i" "$WORK/leased.json"
    sidecar "leased$i" "$WORK/leased.json" --redis-url "redis://127.0.0.1:$P/0"
    sidecar "exact$i" "$WORK/exact.json" --redis-url "redis://127.0.0.1:$P/0"
    sidecar "local2$i" "$WORK/leased2.json"
    sidecar "leased2$i" "$WORK/leased2.json" --redis-url "redis://127.0.0.1:$P/0"
  done
  ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
  HZ=$(getconf CLK_TCK)
  : > "$OUT/lease-sidecar.tsv"
  for round in $(seq "$ROUNDS"); do
    # Each round starts with another mode, so the machine's drift does not favour one.
    r=$(((round - 1) % ${#MODES[@]}))
    for mode in "${MODES[@]:$r}" "${MODES[@]:0:$r}"; do
      p1=${SC_PORT[${mode}1]} p2=${SC_PORT[${mode}2]} pid1=${SC_PID[${mode}1]} pid2=${SC_PID[${mode}2]}
      wrk -t1 -c4 -d1s "http://127.0.0.1:$p1/" > /dev/null & # warm connections and leases
      w1=$!
      wrk -t1 -c4 -d1s "http://127.0.0.1:$p2/" > /dev/null
      wait "$w1"
      t0=$(($(ticks "$pid1") + $(ticks "$pid2")))
      wrk -t1 -c"$SIDECAR_CONNS" -d"${SIDECAR_DURATION}s" "http://127.0.0.1:$p1/" > "$WORK/wrk1.txt" &
      w1=$!
      wrk -t1 -c"$SIDECAR_CONNS" -d"${SIDECAR_DURATION}s" "http://127.0.0.1:$p2/" > "$WORK/wrk2.txt"
      wait "$w1"
      t1=$(($(ticks "$pid1") + $(ticks "$pid2")))
      n=$(awk '/requests in/ {s += $1} END {print s}' "$WORK/wrk1.txt" "$WORK/wrk2.txt")
      rps=$(awk '/Requests\/sec/ {s += $2} END {printf "%.0f", s}' "$WORK/wrk1.txt" "$WORK/wrk2.txt")
      bad=$(awk '/Non-2xx/ {s += $5} END {print s + 0}' "$WORK/wrk1.txt" "$WORK/wrk2.txt")
      cpu=$(awk -v d=$((t1 - t0)) -v hz="$HZ" -v n="$n" 'BEGIN { printf "%.2f", d / hz / n * 1e6 }')
      printf 'sidecar\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$round" "$mode" "$rps" "$cpu" "$n" "$bad" "$(cut -d' ' -f1 /proc/loadavg)" |
        tee -a "$OUT/lease-sidecar.tsv"
    done
  done
  python3 - "$OUT/lease-sidecar.tsv" "$SIDECAR_CONNS" "$SIDECAR_DURATION" "$ROUNDS" "$MAX_AGE" >> "$OUT/lease.md" <<'PY'
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.startswith("sidecar")]
conns, dur, rounds, age = sys.argv[2:]
med = {}
for mode in ("local", "leased", "exact", "local2", "leased2"):
    rs = [r for r in rows if r[2] == mode]
    med[mode] = (statistics.median(float(r[3]) for r in rs), statistics.median(float(r[4]) for r in rs),
                 sum(int(r[6]) for r in rs), [float(r[4]) for r in rs], [float(r[3]) for r in rs])
print()
print(f"Two sluice-sidecar binaries on one hot key (every request from 127.0.0.1), one `wrk -t1 -c{conns} -d{dur}s` "
      f"each at once, {rounds} rounds of local, leased and exact in turn, and of two rules per request (on the client IP and the "
      f"path) local and both leased (each round starting with the next mode); the rules never deny (1e8/s), "
      f"lease maxAge {age}; the two-rule rows are ratios to two rules local. CPU per request is both sidecars' utime+stime from /proc over the requests "
      f"both wrk completed; medians of the rounds, ratios to local. Load average (1 min) during the rounds: "
      f"{min(float(r[7]) for r in rows):.1f} to {max(float(r[7]) for r in rows):.1f}.")
print()
print("| sidecars | req/s | vs local | CPU µs / request | vs local | CPU per round | req/s per round | non-2xx |")
print("|---|--:|--:|--:|--:|---|---|--:|")
names = {"local": "local (no --redis-url: local share)", "leased": "leased (Redis)", "exact": "exact (Redis)",
         "local2": "two rules, local", "leased2": "two rules, both leased (Redis)"}
for mode, (rps, cpu, bad, cpus, rpss) in med.items():
    ref = "local2" if mode.endswith("2") else "local"
    l_rps, l_cpu = med[ref][0], med[ref][1]
    print(f"| {names[mode]} | {rps:.0f} | {rps / l_rps:.2f}× | {cpu:.1f} | {cpu / l_cpu:.2f}× | "
          f"{', '.join(f'{c:.1f}' for c in cpus)} | {', '.join(f'{x:.0f}' for x in rpss)} | {bad} |")
PY
fi
cat "$OUT/lease.md" >&2
