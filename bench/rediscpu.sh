#!/usr/bin/env bash
# Redis CPU per decision (issue 13): what the Redis store costs the Redis it shares, as ratios to
# a naive token bucket script measured in the same run.
#
# Starts its own redis-server and a 3-master Redis Cluster on free loopback ports, then:
#   - references on the single server, from redis-benchmark -c 32: EVALSHA of a naive float token
#     bucket on a hash (HMGET/HSET/PEXPIRE, one key per call out of 10,000) and of 'return 1';
#     Redis CPU (INFO cpu used_cpu_sys + used_cpu_user) per call; the naive one again before each
#     round of the sidecar rows, which are ratios to their round's;
#   - bench/rediscpu (the store, TokenBucket never denying): one hot key and 10,000 distinct keys
#     at 1, 8 and 50 callers, on the single server and on the cluster (CPU summed over masters);
#     Redis CPU per decision, decisions per script call and per round trip (INFO stats
#     total_reads_processed);
#   - bench/rediscpu -takes: the request script's cost alone, one TakeRequest of 1, 14 or 32
#     takes per script call (one hot key, or as many distinct keys), Redis CPU per decision and
#     Redis's time in EVALSHA per call (INFO commandstats), single server;
#   - the sidecar (unless SIDECAR=0): wrk -c32 through a sidecar deciding a never-denying
#     TokenBucket keyed by a header, one hot key and 10,000 distinct keys, Redis CPU per
#     request, the sidecar's own CPU per request (/proc/PID/stat) and wrk's p50/p99 latency
#     (with BASE_SIDECAR, a sidecar built at an earlier commit, side by side), ROUNDS rounds of
#     them in turn (the versions' order reversed every other round) and each row's median
#     round, and with a base the median of the rounds' new ÷ base;
#   - the TokenBucket take alone, pipelined as the issue measured it with redis-benchmark -P 32
#     -c 50, against the naive script (throughput and Redis CPU per call), and each one's Redis
#     commands alone without a decision (the floor a script's Lua adds to): bench/rediscpu
#     -piped sends them, since redis-benchmark's arguments cannot carry the request script's
#     binary numbers;
#   - the same with BASE_BIN (bench/rediscpu built at an earlier commit), when set, side by side.
# Writes $OUT/rediscpu.tsv and $OUT/rediscpu.md (ratios to the naive reference).
#
# Usage: bench/rediscpu.sh  (OUT=bench/out DURATION=2s CALLERS=1,8,50 BASE_BIN= N=200000
#                            TAKES=1,14,32 SIDECAR=1 BASE_SIDECAR= ROUNDS=5)
set -euo pipefail

OUT=${OUT:-bench/out}
DURATION=${DURATION:-2s}
CALLERS=${CALLERS:-1,8,50}
BASE_BIN=${BASE_BIN:-}
N=${N:-200000}
TAKES=${TAKES:-1,14,32}
SIDECAR=${SIDECAR:-1}
ROUNDS=${ROUNDS:-5}
BASE_SIDECAR=${BASE_SIDECAR:-}

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

NAIVE=$("$WORK/rediscpu" -naive-script)
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

# The TokenBucket take alone, pipelined as the issue measured it (-P 32 -c 50), against the naive
# script, both sent by bench/rediscpu -piped (one Store.Take's call of the request script, its
# ARGV as request.go's scriptCall builds it).
"$WORK/rediscpu" -redis-url "redis://127.0.0.1:$P/0" -piped "$N" \
  -request-lua internal/limiter/redisstore/lua/arith.lua,internal/limiter/redisstore/lua/request.lua >> "$TSV"

for bin in "$WORK/rediscpu" ${BASE_BIN:+"$BASE_BIN"}; do
  ver=new; [ "$bin" = "$WORK/rediscpu" ] || ver=base
  "$bin" -redis-url "redis://127.0.0.1:$P/0" -name "single-$ver" -callers "$CALLERS" -duration "$DURATION" >> "$TSV"
  "$bin" -redis-url "redis+cluster://127.0.0.1:$C1?addr=127.0.0.1:$C2&addr=127.0.0.1:$C3" -name "cluster-$ver" \
    -callers "$CALLERS" -duration "$DURATION" >> "$TSV"
  "$bin" -redis-url "redis://127.0.0.1:$P/0" -name "single-$ver" -takes "$TAKES" -duration "$DURATION" >> "$TSV"
done

# Through the sidecar: wrk -c32 on a never-denying TokenBucket keyed by X-Key, one key or
# 10,000 (wrk's script cycles through them); Redis CPU per request (each one decision).
stat() { # port: Redis CPU seconds, script calls, reads of client input
  redis-cli -p "$1" INFO all | tr -d '\r' | awk -F'[:,=]' '
    /^used_cpu_(sys|user):/ {c += $2}
    /^cmdstat_evalsha?:/ {n += $3}
    /^total_reads_processed:/ {r = $2}
    END {printf "%.6f %d %d\n", c, n, r}'
}
proccpu() { # pid: the process's CPU seconds (user + system)
  awk -v hz="$(getconf CLK_TCK)" '{printf "%.6f\n", ($14 + $15) / hz}' "/proc/$1/stat"
}
if [ "$SIDECAR" = 1 ] && ! command -v wrk > /dev/null; then
  echo "no wrk: skipping the sidecar rows (apt-get install -y wrk)" >&2; SIDECAR=0
fi
if [ "$SIDECAR" = 1 ]; then
  go build -o "$WORK/sluice-sidecar" ./sidecar
  go build -o "$WORK/upstream" ./cmd/upstream
  UP=$(freeport); "$WORK/upstream" -listen "127.0.0.1:$UP" > /dev/null 2>&1 & PIDS+=($!)
  waitport "$UP"
  cat > "$WORK/policies.json" <<'EOF'
{"version":1,"namespace":"bench","policies":[{"name":"bench","selector":{},"replicas":1,"failureMode":"Local",
 "response":{"statusCode":429,"headers":"Both"},
 "rules":[{"name":"per-key","key":[{"source":"header","name":"X-Key"}],"algorithm":"TokenBucket","limit":100000000,"windowMs":1000,"burst":100000000,"cost":1,"mode":"Enforce"}]}]}
EOF
  # Every sidecar runs at once (idle while another is measured), and ROUNDS rounds measure them
  # in turn, each round after its own naive reference (rows sidecar-VER@ROUND): these rows
  # move by about a quarter between runs on a shared machine, so the report also gives each
  # one's median ratio to its round's reference.
  SVERS=(); SPORTS=(); SPIDS=()
  for sc in "$WORK/sluice-sidecar" ${BASE_SIDECAR:+"$BASE_SIDECAR"}; do
    ver=new; [ "$sc" = "$WORK/sluice-sidecar" ] || ver=base
    SP=$(freeport); SM=$(freeport)
    "$sc" --listen "127.0.0.1:$SP" --upstream "http://127.0.0.1:$UP" --config "$WORK/policies.json" \
      --pod-labels-file "" --metrics-listen "127.0.0.1:$SM" --redis-url "redis://127.0.0.1:$P/0" > "$WORK/sidecar-$ver.log" 2>&1 &
    SPID=$!; PIDS+=($SPID)
    waitport "$SP"
    for _ in $(seq 100); do curl -sf "http://127.0.0.1:$SM/readyz" > /dev/null && break; sleep 0.05; done
    SVERS+=("$ver"); SPORTS+=("$SP"); SPIDS+=("$SPID")
  done
  for round in $(seq "$ROUNDS"); do
    # The reference again, right before the round's rows: Redis's cost per call drifts
    # with the machine as much as the rows do.
    ref "naive-hash-tb@$round" EVALSHA "$NSHA" 1 "naive:__rand_int__" 0.001 100 1000
    # The versions in turn, in reverse every other round: the machine's speed drifts within
    # a round, and whoever went first would always meet the same part of it.
    order=("${!SVERS[@]}")
    if [ $((round % 2)) = 0 ]; then order=($(printf '%s\n' "${order[@]}" | tac)); fi
    for i in "${order[@]}"; do
      ver=${SVERS[$i]}; SP=${SPORTS[$i]}; SPID=${SPIDS[$i]}
      for keys in 1 10000; do
        cat > "$WORK/keys.lua" <<EOF
local n = 0
request = function()
  n = n + 1
  return wrk.format(nil, nil, {["X-Key"] = "k" .. (n % $keys)})
end
EOF
        wrk -t2 -c32 -d1s -s "$WORK/keys.lua" "http://127.0.0.1:$SP/" > /dev/null # warm: connections, keys
        read -r c0 n0 r0 < <(stat "$P")
        s0=$(proccpu "$SPID")
        out=$(wrk -t2 -c32 -d"$DURATION" --latency -s "$WORK/keys.lua" "http://127.0.0.1:$SP/")
        s1=$(proccpu "$SPID")
        read -r c1 n1 r1 < <(stat "$P")
        reqs=$(awk '/requests in/ {print $1}' <<< "$out")
        bad=$(awk '/Non-2xx/ {print $NF}' <<< "$out")
        p50=$(awk '$1 == "50%" {print $2}' <<< "$out"); p99=$(awk '$1 == "99%" {print $2}' <<< "$out")
        python3 -c "d=$reqs; print(f'rediscpu\tsidecar-$ver@$round\t$keys\t32\t{d}\t{($c1-$c0)*1e6/d:.2f}\t{d/max(1,$n1-$n0):.2f}\t${bad:-0}\t{d/max(1,$r1-$r0):.2f}')" >> "$TSV"
        python3 -c "d=$reqs; print(f'sidecar\tsidecar-$ver@$round\t$keys\t{d}\t{($s1-$s0)*1e6/d:.2f}\t$p50\t$p99')" >> "$TSV"
      done
    done
  done
  for SPID in "${SPIDS[@]}"; do kill "$SPID"; wait "$SPID" 2>/dev/null || true; done
fi

python3 - "$TSV" "$(cut -d' ' -f1-3 /proc/loadavg)" "$(nproc)" > "$OUT/rediscpu.md" <<'PY'
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
ref = {r[1]: float(r[5]) for r in rows if r[0] == "reference"}
naive = ref["naive-hash-tb"]
# A row of round R (topology@R) is a ratio to that round's reference.
reference = lambda topo: ref["naive-hash-tb@" + topo.split("@")[1]] if "@" in topo else naive
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
    print(f"| {topo} | {keys} | {callers} | {n} | {float(us):.2f} | {float(us)/reference(topo):.2f} | {float(per):.1f} | {float(reads):.1f} | {fails} |")
script = [r for r in rows if r[0] == "script"]
if script:
    print()
    print("The request script alone (bench/rediscpu -takes): one TakeRequest of that many takes per script call, 4 callers, single server.")
    print()
    print("| version | keys | takes per call | decisions | Redis CPU µs/decision | × naive | Redis µs in EVALSHA per call | per decision | errors |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for _, topo, keys, g, n, us, call, fails in script:
        print(f"| {topo} | {keys} | {g} | {n} | {float(us):.2f} | {float(us)/naive:.2f} | {float(call):.2f} | {float(call)/int(g):.2f} | {fails} |")
sidecar = {}
for r in rows:
    if r[0] == "rediscpu" and r[1].startswith("sidecar-"):
        sidecar.setdefault((r[1].split("@")[0], r[2]), []).append(float(r[5]) / reference(r[1]))
if sidecar:
    med = statistics.median # of an even number of rounds, the mean of the middle two
    print()
    print("Through the sidecar, each row's median ratio to its round's naive reference: " + "; ".join(
        f"{topo} {'one key' if keys == '1' else keys + ' keys'} {med(v):.2f}x ({', '.join(f'{x:.2f}' for x in v)})"
        for (topo, keys), v in sidecar.items()) + ".")
    # Within a round the two versions ran a few seconds apart: new ÷ base per round is steadier
    # than either row's ratio to the reference.
    paired = [(keys, [n / b for n, b in zip(sidecar[("sidecar-new", keys)], sidecar[("sidecar-base", keys)])])
              for keys in ("1", "10000") if ("sidecar-base", keys) in sidecar and ("sidecar-new", keys) in sidecar]
    if paired:
        print("Redis CPU per request, new ÷ base in the same round: " + "; ".join(
            f"{'one key' if keys == '1' else keys + ' keys'} median {med(v):.2f} ({', '.join(f'{x:.2f}' for x in v)})"
            for keys, v in paired) + ".")
side = [r for r in rows if r[0] == "sidecar"]
if side:
    print()
    print("The sidecar's own CPU per request and wrk's latency (wrk -t2 -c32 --latency).")
    print()
    print("| version | keys | requests | sidecar CPU µs/request | p50 | p99 |")
    print("|---|---:|---:|---:|---:|---:|")
    for _, topo, keys, n, us, p50, p99 in side:
        print(f"| {topo} | {keys} | {n} | {float(us):.2f} | {p50} | {p99} |")
piped = {r[1]: (float(r[2]), float(r[3])) for r in rows if r[0] == "piped"}
if piped:
    (nr, nc), (tr, tc) = piped["naive-hash-tb"], piped["request-tb-take"]
    print()
    print(f"Pipelined (bench/rediscpu -piped: 50 connections, pipelines of 32), one key of 10,000 per call: naive hash token bucket {nr:,.0f}/s ({nc:.2f} µs of Redis CPU per call), "
          f"the request script's TokenBucket take {tr:,.0f}/s ({tc:.2f} µs): {tr/nr:.2f}x the naive script's rate.")
    (_, ncc), (_, rcc) = piped["naive-commands"], piped["request-commands"]
    print(f"Their Redis commands alone, without a decision: the naive script's call, HMGET, HSET and PEXPIRE {ncc:.2f} µs; "
          f"the request script's call, TIME, GET and SET PX of a 12-byte state {rcc:.2f} µs, {rcc/nc:.2f}x the whole naive call: "
          f"the floor of an exact take on Redis's clock with an expiring key, under which no Lua can bring it.")
PY
cat "$OUT/rediscpu.md"
