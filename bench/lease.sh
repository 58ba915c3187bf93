#!/usr/bin/env bash
# Leased limits (issue 14): two sidecars' lease engines sharing one hot key through one
# redis-server on loopback, closed-loop callers, the exact rule, the leased rule and local
# decisions in the same run (bench/leasebench). Writes $OUT/lease.tsv and $OUT/lease.md.
#
# Usage: bench/lease.sh  (OUT=bench/out DURATION=2s PODS=2 CALLERS=8 MAX_AGE=100ms)
set -euo pipefail

OUT=${OUT:-bench/out}
DURATION=${DURATION:-2s}
PODS=${PODS:-2}
CALLERS=${CALLERS:-8}
MAX_AGE=${MAX_AGE:-100ms}

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
cat "$OUT/lease.md" >&2
