#!/usr/bin/env bash
# Benchmarks the Redis store against one redis-server on loopback, next to redis-benchmark on the
# same server at the same concurrency, so the store's numbers read as a ratio to what that Redis
# does with a trivial script.
#
# Starts its own redis-server on a free port (no persistence) and, for each repeat:
#   - bench/storebench: decisions/s of every algorithm with CALLERS concurrent callers, the same
#     for EVALSHA of 'return 1' through go-redis, and Redis memory per limiter;
#   - redis-benchmark -c <callers> EVALSHA <sha1 of 'return 1'> 0.
# Writes tab-separated results to $OUT/store.tsv (first column the repeat) and the raw outputs
# next to it. Everything it started is stopped on exit.
#
# Usage: bench/store.sh  (OUT=bench/out CALLERS=1,8,50 STORE_DURATION=2s BENCH_REPEAT=1
# REDIS_BENCH_N=50000)
set -euo pipefail

OUT=${OUT:-bench/out}
CALLERS=${CALLERS:-1,8,50}
STORE_DURATION=${STORE_DURATION:-2s}
BENCH_REPEAT=${BENCH_REPEAT:-1}
REDIS_BENCH_N=${REDIS_BENCH_N:-50000}

cd "$(dirname "$0")/.."
for bin in go redis-server redis-cli redis-benchmark python3; do
  command -v "$bin" >/dev/null || { echo "missing $bin (apt-get install -y redis-server redis-tools)" >&2; exit 1; }
done
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

# shellcheck source=bench/lib.sh
. bench/lib.sh # the scripts run from the repository root (cd above)

go build -o "$WORK/storebench" ./bench/storebench

PORT=$(freeport)
redis-server --port "$PORT" --bind 127.0.0.1 --save "" --appendonly no --daemonize no --loglevel warning --dir "$WORK" \
  > "$OUT/store-redis-server.log" 2>&1 &
PIDS+=($!)
waitport "$PORT"
SHA=$(redis-cli -p "$PORT" SCRIPT LOAD "return 1")

: > "$OUT/store.tsv"
for rep in $(seq "$BENCH_REPEAT"); do
  echo "# store: repeat $rep/$BENCH_REPEAT" >&2
  "$WORK/storebench" -redis-url "redis://127.0.0.1:$PORT/0" -callers "$CALLERS" -duration "$STORE_DURATION" \
    -memory-keys "$([ "$rep" = 1 ] && echo 10000 || echo 0)" | tee "$OUT/storebench-$rep.txt" | sed "s/^/$rep\t/" >> "$OUT/store.tsv"
  for c in ${CALLERS//,/ }; do
    n=$REDIS_BENCH_N; [ "$c" -gt 1 ] || n=$((REDIS_BENCH_N / 2))
    redis-benchmark -h 127.0.0.1 -p "$PORT" -c "$c" -n "$n" --csv EVALSHA "$SHA" 0 > "$WORK/rb.csv"
    cat "$WORK/rb.csv" >> "$OUT/redis-benchmark-$rep.csv"
    # "test","rps","avg_latency_ms",...: the second line's second field.
    rps=$(awk -F'","' 'NR==2 {print $2}' "$WORK/rb.csv")
    printf '%s\tredis-benchmark\tEVALSHA-return1\t%s\t%s\n' "$rep" "$c" "$rps" >> "$OUT/store.tsv"
  done
done
redis-cli -p "$PORT" INFO memory > "$OUT/store-info-memory.txt"
echo "redis-benchmark -h 127.0.0.1 -p PORT -c C -n $REDIS_BENCH_N --csv EVALSHA $SHA 0  (n halved for -c 1)" > "$OUT/store-commands.txt"
echo "storebench -redis-url redis://127.0.0.1:PORT/0 -callers $CALLERS -duration $STORE_DURATION -memory-keys 10000" >> "$OUT/store-commands.txt"
