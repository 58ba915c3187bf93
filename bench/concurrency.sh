#!/usr/bin/env bash
# A Concurrency rule beside a TokenBucket rule through the sidecar, in one run: the sidecar's
# CPU per request, and Redis round trips, commands and CPU per request, under wrk -c32.
#
# Starts its own redis-server, the demo upstream and one sidecar whose policy has a rule of each
# kind keyed by X-Key (never denying: a TokenBucket of 10^8 a second, a Concurrency limit of 64
# above wrk's 32 connections), routed by path (/tb, /conc). ROUNDS rounds measure both rules in
# turn, the order reversed every other round (the machine's speed drifts within a round), one
# hot key and 10,000 keys. A Concurrency request costs Redis its take (one script call,
# coalesced with others like every take) and its release (ZREM, when the response is
# finished); renewals are every 10 s per key held and do not show at these durations.
# BASELINE=<sidecar binary> (a build of an earlier commit) runs a second sidecar beside it on
# the same Redis and application, measured in turn with it in every round.
# Writes $OUT/concurrency.tsv and $OUT/concurrency.md (each row's median over the rounds).
#
# Usage: bench/concurrency.sh  (OUT=bench/out DURATION=3s ROUNDS=3 BASELINE=)
set -euo pipefail

OUT=${OUT:-bench/out}
DURATION=${DURATION:-3s}
ROUNDS=${ROUNDS:-3}
BASELINE=${BASELINE:-}

cd "$(dirname "$0")/.."
for bin in go redis-server redis-cli wrk python3; do
  command -v "$bin" >/dev/null || { echo "missing $bin (apt-get install -y redis-server redis-tools wrk)" >&2; exit 1; }
done
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
# shellcheck source=bench/lib.sh
. bench/lib.sh

go build -o "$WORK/sluice-sidecar" ./sidecar
go build -o "$WORK/upstream" ./cmd/upstream
P=$(freeport)
redis-server --port "$P" --bind 127.0.0.1 --save "" --appendonly no --daemonize no --loglevel warning \
  --dir "$WORK" > "$WORK/redis.log" 2>&1 &
PIDS+=($!)
waitport "$P"
UP=$(freeport)
"$WORK/upstream" -listen "127.0.0.1:$UP" > /dev/null 2>&1 & PIDS+=($!)
waitport "$UP"
cat > "$WORK/policies.json" <<'JSON'
{"version":1,"namespace":"bench","policies":[{"name":"bench","selector":{},"replicas":1,"failureMode":"Local",
 "response":{"statusCode":429,"headers":"Both"},
 "rules":[
  {"name":"tb","match":{"pathPrefix":"/tb"},"key":[{"source":"header","name":"X-Key"}],"algorithm":"TokenBucket","limit":100000000,"windowMs":1000,"burst":100000000,"cost":1,"mode":"Enforce"},
  {"name":"conc","match":{"pathPrefix":"/conc"},"key":[{"source":"header","name":"X-Key"}],"algorithm":"Concurrency","limit":64,"windowMs":30000,"cost":1,"mode":"Enforce"}]}]}
JSON
# startsidecar NAME BINARY: a sidecar on free ports; sets PORT[NAME] and SPID[NAME].
declare -A PORT SPID
startsidecar() {
  local sp sm
  sp=$(freeport); sm=$(freeport)
  "$2" --listen "127.0.0.1:$sp" --upstream "http://127.0.0.1:$UP" --config "$WORK/policies.json" \
    --pod-labels-file "" --metrics-listen "127.0.0.1:$sm" --redis-url "redis://127.0.0.1:$P/0" > "$WORK/$1.log" 2>&1 &
  SPID[$1]=$!; PIDS+=($!); PORT[$1]=$sp
  waitport "$sp"
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$sm/readyz" > /dev/null && break; sleep 0.05; done
}
SIDECARS=(sidecar)
startsidecar sidecar "$WORK/sluice-sidecar"
if [ -n "$BASELINE" ]; then
  SIDECARS+=(baseline)
  startsidecar baseline "$BASELINE"
fi

redisstat() { # Redis CPU seconds, commands processed (those of scripts included), reads of client input
  redis-cli -p "$P" INFO all | tr -d '\r' | awk -F: '
    /^used_cpu_(sys|user):/ {c += $2}
    /^total_commands_processed:/ {n = $2}
    /^total_reads_processed:/ {r = $2}
    END {printf "%.6f %d %d\n", c, n, r}'
}
proccpu() { awk -v hz="$(getconf CLK_TCK)" '{printf "%.6f\n", ($14 + $15) / hz}' "/proc/$1/stat"; }

TSV="$OUT/concurrency.tsv"
: > "$TSV"
for round in $(seq "$ROUNDS"); do
  rules=(tb conc)
  if [ $((round % 2)) = 0 ]; then rules=(conc tb); fi
  for rule in "${rules[@]}"; do
    for keys in 1 10000; do
      cat > "$WORK/keys.lua" <<LUA
local n = 0
request = function()
  n = n + 1
  return wrk.format(nil, "/$rule", {["X-Key"] = "k" .. (n % $keys)})
end
LUA
      order=("${SIDECARS[@]}")
      if [ $((round % 2)) = 0 ]; then mapfile -t order < <(printf '%s\n' "${SIDECARS[@]}" | tac); fi
      for sc in "${order[@]}"; do
        url="http://127.0.0.1:${PORT[$sc]}/"
        wrk -t2 -c32 -d1s -s "$WORK/keys.lua" "$url" > /dev/null # warm: connections, keys
        read -r c0 n0 r0 < <(redisstat)
        s0=$(proccpu "${SPID[$sc]}")
        out=$(wrk -t2 -c32 -d"$DURATION" --latency -s "$WORK/keys.lua" "$url")
        s1=$(proccpu "${SPID[$sc]}")
        read -r c1 n1 r1 < <(redisstat)
        reqs=$(awk '/requests in/ {print $1}' <<< "$out")
        bad=$(awk '/Non-2xx/ {print $NF}' <<< "$out")
        p99=$(awk '$1 == "99%" {print $2}' <<< "$out")
        # INFO itself is one command per reading.
        python3 -c "d=$reqs; print(f'$rule\t$keys\t$round\t{d}\t{($s1-$s0)*1e6/d:.2f}\t{($n1-$n0-1)/d:.3f}\t{($r1-$r0-1)/d:.3f}\t{($c1-$c0)*1e6/d:.2f}\t$p99\t${bad:-0}\t$sc')" >> "$TSV"
      done
    done
  done
done

python3 - "$TSV" "$(cut -d' ' -f1-3 /proc/loadavg)" "$(nproc)" > "$OUT/concurrency.md" <<'PY'
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
print(f"A Concurrency rule beside a TokenBucket rule through one sidecar, wrk -c32, load average {sys.argv[2]} on {sys.argv[3]} CPUs (shared machine: noisy); medians of {max(int(r[2]) for r in rows)} rounds.")
print()
scs = sorted({r[10] for r in rows}, key=lambda s: s != "sidecar")
print("| rule | keys | sidecar | requests | sidecar CPU µs/request | Redis round trips/request | Redis commands/request (scripts' included) | Redis CPU µs/request | p99 | non-2xx |")
print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|")
for rule in ("tb", "conc"):
    for keys in ("1", "10000"):
        for sc in scs:
            rs = [r for r in rows if r[0] == rule and r[1] == keys and r[10] == sc]
            if not rs:
                continue
            med = lambda i: statistics.median(float(r[i]) for r in rs)
            p99 = sorted(r[8] for r in rs)[len(rs) // 2]
            name = {"tb": "TokenBucket", "conc": "Concurrency"}[rule]
            print(f"| {name} | {keys} | {sc} | {med(3):.0f} | {med(4):.2f} | {med(6):.3f} | {med(5):.3f} | {med(7):.2f} | {p99} | {max(int(r[9]) for r in rs)} |")
PY
cat "$OUT/concurrency.md"
