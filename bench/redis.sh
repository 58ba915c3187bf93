#!/usr/bin/env bash
# Benchmarks the Redis store against redis-benchmark on the same redis-server, loopback only.
#
# Starts its own redis-server on a free loopback port (no persistence), then, REPS times and
# interleaved so that a busy machine hurts every column alike, for each number of concurrent
# callers C in CALLERS:
#   - redis-benchmark -c C -n N EVALSHA <sha1 of 'return 1'> 0: Redis's ceiling for one request
#     per connection in flight, the reference of the ratios;
#   - BenchmarkEvalReturn1: the same EVALSHA through go-redis, one round trip per call;
#   - BenchmarkTake per algorithm, unbatched (one round trip per Take, as for a cluster client)
#     and batched (the default for a single-node client);
# It prints the median of the
# repetitions as a table, and the load average before and after (numbers from a loaded machine
# are not comparable with an idle one's). The server is stopped on exit.
#
# Needs: go, redis-server, redis-benchmark, redis-cli, python3. Usage: bench/redis.sh
# (REPS=3 CALLERS="1 8 50" N=200000 TAKES=40000 SENDERS=1 to change the defaults; SENDERS=1
# adds a comparison of 1, 2 and 4 pipelines in flight at 50 callers).
set -euo pipefail

REPS=${REPS:-3}
CALLERS=${CALLERS:-1 8 50}
N=${N:-200000}         # redis-benchmark requests at 50 callers; scaled down for fewer callers
TAKES=${TAKES:-40000}  # Takes per Go benchmark run at 50 callers; scaled down likewise
SENDERS=${SENDERS:-0}
STEP_TIMEOUT=${STEP_TIMEOUT:-600}

cd "$(dirname "$0")/.."
for bin in go redis-server redis-benchmark redis-cli python3; do
  command -v "$bin" >/dev/null || { echo "missing $bin (apt-get install -y redis-server redis-tools)" >&2; exit 1; }
done

WORK=$(mktemp -d)
REDIS_PID=
cleanup() {
  [ -n "$REDIS_PID" ] && kill "$REDIS_PID" 2>/dev/null && wait "$REDIS_PID" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }

echo "# building the benchmark binary" >&2
go test -c -o "$WORK/redisstore.test" ./internal/limiter/redisstore

PORT=$(freeport)
redis-server --port "$PORT" --bind 127.0.0.1 --save "" --appendonly no --daemonize no \
  --loglevel warning --dir "$WORK" > "$WORK/redis-server.log" 2>&1 &
REDIS_PID=$!
for _ in $(seq 200); do redis-cli -p "$PORT" PING >/dev/null 2>&1 && break; sleep 0.05; done
redis-cli -p "$PORT" PING >/dev/null
URL="redis://127.0.0.1:$PORT/0"
RET1=$(redis-cli -p "$PORT" SCRIPT LOAD "return 1")


RESULTS=$WORK/results.tsv # kind, callers, name, value per line
scaled() { echo $(( $1 * ($2 > 10 ? $2 : 10) / 50 )); } # total callers: fewer callers, fewer calls
rb() { # callers requests args...: prints requests per second
  local c=$1 n=$2; shift 2
  timeout "$STEP_TIMEOUT" redis-benchmark -p "$PORT" -c "$c" -n "$n" --csv "$@" | tail -1 | cut -d, -f2 | tr -d '"'
}
gobench() { # callers modes regexp
  SLUICE_BENCH_REDIS_URL=$URL SLUICE_BENCH_CALLERS=$1 SLUICE_BENCH_MODES=$2 \
    timeout "$STEP_TIMEOUT" "$WORK/redisstore.test" -test.run '^$' -test.bench "$3" \
    -test.benchtime "$(scaled "$TAKES" "$1")x" |
    awk -v c="$1" '/decisions\/s/ { name=$1; sub(/-[0-9]+$/, "", name); for (i=2;i<=NF;i++) if ($(i+1)=="decisions/s") print "go\t" c "\t" name "\t" $i }'
}

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
for rep in $(seq "$REPS"); do
  echo "# repetition $rep of $REPS (load average $(cut -d' ' -f1-3 /proc/loadavg))" >&2
  for c in $CALLERS; do
    printf 'rb\t%s\treturn1\t%s\n' "$c" "$(rb "$c" "$(scaled "$N" "$c")" EVALSHA "$RET1" 0)" >> "$RESULTS"
    gobench "$c" unbatched,batched 'BenchmarkTake$|BenchmarkEvalReturn1$' >> "$RESULTS"
  done
  if [ "$SENDERS" = 1 ]; then
    gobench 50 senders1,senders2,senders4 'BenchmarkTake/.*/.*/(FixedWindow|TokenBucket)$' >> "$RESULTS"
  fi
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

python3 - "$RESULTS" "$LOAD_BEFORE" "$LOAD_AFTER" "$REPS" "$(redis-server --version | grep -o 'v=[^ ]*')" <<'EOF'
import collections, statistics, sys
path, before, after, reps, version = sys.argv[1:]
runs = collections.defaultdict(list)
for line in open(path):
    kind, c, name, v = line.rstrip("\n").split("\t")
    if v:
        runs[(kind, c, name)].append(float(v))
med = {k: statistics.median(v) for k, v in runs.items()}
def get(kind, c, name): return med.get((kind, c, name))
def k(v): return f"{v/1000:7.1f}k" if v else "      -"
def r(a, b): return f"{a/b:5.2f}" if a and b else "    -"
callers = sorted({c for (kind, c, _) in med}, key=int)
algs = ["FixedWindow", "SlidingWindowLog", "SlidingWindowCounter", "TokenBucket", "LeakyBucket/Meter", "LeakyBucket/Queue"]
print(f"## Redis store vs redis-benchmark, same redis-server ({version}), loopback; median of {reps} runs")
print(f"## load average before {before}, after {after}; decisions (requests) per second")
print()
print("callers  redis-benchmark   go-redis EVALSHA")
print("         EVALSHA return 1  return 1 (ratio)")
for c in callers:
    rb, g = get("rb", c, "return1"), get("go", c, f"BenchmarkEvalReturn1/callers={c}")
    print(f"{c:>7}  {k(rb):>16}  {k(g)} ({r(g, rb)})")
print()
print("algorithm             callers  unbatched  batched   unbatched/rb  batched/rb  batched/unbatched")
for alg in algs:
    for c in callers:
        rb = get("rb", c, "return1")
        u = get("go", c, f"BenchmarkTake/callers={c}/unbatched/{alg}")
        b = get("go", c, f"BenchmarkTake/callers={c}/batched/{alg}")
        print(f"{alg:<21} {c:>7}  {k(u)}  {k(b)}  {r(u, rb):>12}  {r(b, rb):>10}  {r(b, u):>17}")
senders = [(n, v) for (kind, c, n), v in med.items() if "/senders" in n]
if senders:
    print()
    print("pipelines in flight (callers=50)")
    for n, v in sorted(senders):
        print(f"  {n.removeprefix('BenchmarkTake/callers=50/'):<28} {k(v)}")
EOF
