#!/usr/bin/env bash
# Redis CPU per decision (issue 13): what the Redis store costs the Redis it shares, as ratios to
# a naive token bucket script measured in the same run.
#
# Starts its own redis-server and a 3-master Redis Cluster on free loopback ports, then:
#   - references on the single server, from redis-benchmark -c 32: EVALSHA of a naive float token
#     bucket on a hash (HMGET/HSET/PEXPIRE, one key per call out of 10,000) and of 'return 1';
#     Redis CPU (INFO cpu used_cpu_sys + used_cpu_user) per call;
#   - bench/rediscpu (the store, TokenBucket never denying): one hot key and 10,000 distinct keys
#     at 1, 8 and 50 callers, on the single server and on the cluster (CPU summed over masters);
#     Redis CPU per decision, decisions per script call and per round trip (INFO stats
#     total_reads_processed);
#   - the same with BASE_BIN (bench/rediscpu built at an earlier commit), when set, side by side.
# Writes $OUT/rediscpu.tsv and $OUT/rediscpu.md (ratios to the naive reference).
#
# Usage: bench/rediscpu.sh  (OUT=bench/out DURATION=2s CALLERS=1,8,50 BASE_BIN= N=200000)
set -euo pipefail

OUT=${OUT:-bench/out}
DURATION=${DURATION:-2s}
CALLERS=${CALLERS:-1,8,50}
BASE_BIN=${BASE_BIN:-}
N=${N:-200000}

cd "$(dirname "$0")/.."
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
# shellcheck source=bench/lib.sh
. bench/lib.sh
go build -o "$WORK/rediscpu" ./bench/rediscpu

start() { # port [cluster]
  local extra=()
  [ "${2:-}" = cluster ] && extra=(--cluster-enabled yes --cluster-config-file "$WORK/nodes-$1.conf")
  redis-server --port "$1" --bind 127.0.0.1 --save "" --appendonly no --daemonize no --loglevel warning \
    --dir "$WORK" "${extra[@]}" > "$WORK/redis-$1.log" 2>&1 &
  PIDS+=($!)
  waitport "$1"
}
cpu() { # port...: Redis CPU seconds summed
  for p in "$@"; do redis-cli -p "$p" INFO cpu; done |
    awk -F: '/^used_cpu_(sys|user):/ {s += $2} END {printf "%.6f\n", s}'
}

P=$(freeport); start "$P"
C1=$(freeclusterport); C2=$(freeclusterport); C3=$(freeclusterport)
for p in "$C1" "$C2" "$C3"; do start "$p" cluster; done
redis-cli --cluster create "127.0.0.1:$C1" "127.0.0.1:$C2" "127.0.0.1:$C3" --cluster-replicas 0 --cluster-yes > "$WORK/create.log"
for _ in $(seq 100); do
  ok=0; for p in "$C1" "$C2" "$C3"; do redis-cli -p "$p" CLUSTER INFO | grep -q cluster_state:ok && ok=$((ok + 1)); done
  [ "$ok" = 3 ] && break; sleep 0.1
done

NAIVE='local rate, cap, now = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local v = redis.call("HMGET", KEYS[1], "t", "ts")
local t, ts = tonumber(v[1]) or cap, tonumber(v[2]) or now
t = math.min(cap, t + (now - ts) * rate)
local ok = 0
if t >= 1 then t = t - 1; ok = 1 end
redis.call("HSET", KEYS[1], "t", t, "ts", now)
redis.call("PEXPIRE", KEYS[1], 60000)
return ok'
NSHA=$(redis-cli -p "$P" SCRIPT LOAD "$NAIVE")
RSHA=$(redis-cli -p "$P" SCRIPT LOAD "return 1")
TSV=$OUT/rediscpu.tsv
: > "$TSV"
ref() { # name args...
  local name=$1; shift
  local c0 c1
  c0=$(cpu "$P")
  redis-benchmark -h 127.0.0.1 -p "$P" -c 32 -n "$N" -r 10000 -q "$@" > /dev/null
  c1=$(cpu "$P")
  printf 'reference\t%s\t-\t32\t%s\t%s\t1\t0\t1\n' "$name" "$N" "$(python3 -c "print(f'{($c1-$c0)*1e6/$N:.2f}')")" >> "$TSV"
}
ref naive-hash-tb EVALSHA "$NSHA" 1 "naive:__rand_int__" 0.001 100 1000
ref evalsha-return1 EVALSHA "$RSHA" 0

for bin in "$WORK/rediscpu" ${BASE_BIN:+"$BASE_BIN"}; do
  ver=new; [ "$bin" = "$WORK/rediscpu" ] || ver=base
  "$bin" -redis-url "redis://127.0.0.1:$P/0" -name "single-$ver" -callers "$CALLERS" -duration "$DURATION" >> "$TSV"
  "$bin" -redis-url "redis+cluster://127.0.0.1:$C1?addr=127.0.0.1:$C2&addr=127.0.0.1:$C3" -name "cluster-$ver" \
    -callers "$CALLERS" -duration "$DURATION" >> "$TSV"
done

python3 - "$TSV" "$(cut -d' ' -f1-3 /proc/loadavg)" "$(nproc)" > "$OUT/rediscpu.md" <<'PY'
import sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
ref = {r[1]: float(r[5]) for r in rows if r[0] == "reference"}
naive = ref["naive-hash-tb"]
print(f"Redis CPU per decision, load average {sys.argv[2]} on {sys.argv[3]} CPUs (shared machine: noisy).")
print(f"Reference: naive hash token bucket EVALSHA from redis-benchmark -c 32 = {naive:.2f} µs of Redis CPU per call (1.00x); "
      f"EVALSHA 'return 1' = {ref['evalsha-return1']:.2f} µs ({ref['evalsha-return1']/naive:.2f}x).")
print()
print("| topology | keys | callers | decisions | Redis CPU µs/decision | × naive | decisions per script call | decisions per round trip (read) | errors |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for r in rows:
    if r[0] != "rediscpu":
        continue
    _, topo, keys, callers, n, us, per, fails, reads = r
    print(f"| {topo} | {keys} | {callers} | {n} | {float(us):.2f} | {float(us)/naive:.2f} | {float(per):.1f} | {float(reads):.1f} | {fails} |")
PY
cat "$OUT/rediscpu.md"
