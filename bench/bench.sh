#!/usr/bin/env bash
# `make bench`: every benchmark of Sluice next to its reference, run on this machine on loopback,
# written to bench/results.md as ratios (absolute numbers only as context), with the raw data in
# bench/out/.
#
#   1. Limiter core: go test -bench of MemoryStore (every algorithm; one key and 100k keys;
#      serial and parallel) and of golang.org/x/time/rate AllowN, in each invocation of one test
#      binary, BENCH_COUNT invocations in a row (so drift in the machine's load hits both alike);
#      medians and benchstat's comparison (benchstat pinned in ./bin).
#   2. Redis store: bench/store.sh, decisions/s at 1, 8 and 50 callers against one redis-server
#      and redis-benchmark EVALSHA of 'return 1' on the same server at the same concurrency;
#      Redis memory per limiter. bench/redis.sh, when present, runs too and its output is kept.
#   2d. Leased limits: bench/lease.sh, the exact rule, the leased rule and local decisions of
#      two sidecars' lease engines on one hot key, store calls and Redis CPU per decision; then
#      two sidecar binaries under wrk, leased vs local vs exact, req/s and CPU per request.
#   2e. Concurrency: bench/concurrency.sh, a Concurrency rule beside a TokenBucket rule through
#      one sidecar under wrk -c32: sidecar CPU, Redis round trips and Redis CPU per request.
#   2f. Adaptive protection: bench/adaptive.sh, 64 closed-loop clients through one sidecar to
#      an application with a knee at 8 in flight (bench/knee), under fixed limits 4 to 64 and
#      the adaptive limit: req/s, the application's p99 over its floor, the limit it settled at.
#   3. Proxy path: bench/proxy.sh, wrk and a fixed-rate run against direct, nginx limit_req,
#      a bare fasthttp proxy (bench/bareproxy), and the sidecar with no policy, a never-denying
#      rule exact in Redis, leased from Redis, and local; CPU per request as ratios to both.
#   4. Control plane: bench/controlplane, a rolling update of 500 pods matched by 20 policies
#      through the real manager binary against envtest, with --render-interval 0 and 1s.
#   5. RLS server: bench/rlsbench, decisions/s and CPU per decision of ShouldRateLimit under
#      closed-loop gRPC load, as a ratio to the sidecar's decision path in the same run.
#   5b. RLS server vs its peer: bench/rlspeer, the sluice-ratelimit binary and a reference
#      decision service (bench/rlsref: envoyproxy/ratelimit's Redis driver, a pipelined INCRBY
#      and EXPIRE per descriptor) under the same gRPC load and redis-server: decisions/s,
#      service and Redis CPU per decision, p50/p99 and Redis commands per decision, as ratios.
#
# Installs wrk, nginx and redis via apt when missing. About 5 minutes on a quiet 2-CPU machine with
# the defaults, 9 to 11 on a busy one, plus step 2f's 2 minutes and a half (12 loads of
# ADAPTIVE_DURATION and two builds).
# Knobs: BENCH_COUNT=5 (limiter rounds), BENCH_TIME=100ms (go test -benchtime), BENCH_REPEAT=1
# (store repeats; medians are reported), PROXY_REPEAT=3 (proxy repeats, interleaved; medians of
# their ratios), PROXY_DURATION=5 (seconds per proxy run),
# STORE_DURATION=2s, REDISCPU_BASE_BIN= (bench/rediscpu built at an earlier commit, to compare
# side by side), RATE=1000 (fixed-rate run), REDIS_N=50000 and REDIS_TAKES=10000 (bench/redis.sh's
# N and TAKES), RLS_CLIENTS=16 and RLS_DURATION=3s (bench/rlsbench), RLSPEER_CLIENTS=32,
# RLSPEER_DURATION=3s and RLSPEER_ROUNDS=5 (bench/rlspeer), ADAPTIVE_DURATION=10s (bench/adaptive.sh's
# DURATION, warm-up and measured window each), BENCHSTAT=path.
set -euo pipefail

BENCH_COUNT=${BENCH_COUNT:-5}
BENCH_TIME=${BENCH_TIME:-100ms}
BENCH_REPEAT=${BENCH_REPEAT:-1}
PROXY_DURATION=${PROXY_DURATION:-5}
PROXY_REPEAT=${PROXY_REPEAT:-3}
STORE_DURATION=${STORE_DURATION:-2s}
RATE=${RATE:-1000}
REDIS_N=${REDIS_N:-50000}
REDIS_TAKES=${REDIS_TAKES:-10000}
ADAPTIVE_DURATION=${ADAPTIVE_DURATION:-10s}

cd "$(dirname "$0")/.."
ROOT=$(pwd)
BENCHSTAT=${BENCHSTAT:-$ROOT/bin/benchstat}
OUT=$ROOT/bench/out
mkdir -p "$OUT"
rm -f "$OUT"/*.txt "$OUT"/*.tsv "$OUT"/*.csv "$OUT"/*.log

PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT

# Tools: apt-get update once, and only when something is missing.
missing=()
command -v wrk >/dev/null || missing+=(wrk)
command -v nginx >/dev/null || missing+=(nginx-light)
{ command -v redis-server >/dev/null && command -v redis-benchmark >/dev/null; } || missing+=(redis-server redis-tools)
command -v python3 >/dev/null || missing+=(python3)
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
  echo "# installing ${missing[*]} with apt-get" >&2
  $sudo apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi
[ -x "$BENCHSTAT" ] || { echo "missing $BENCHSTAT (make bench installs it)" >&2; exit 1; }

# The machine, before anything runs.
{
  echo "date	$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "nproc	$(nproc)"
  echo "cpu	$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
  echo "loadavg_start	$(cut -d' ' -f1-3 /proc/loadavg)"
  echo "kernel	$(uname -sr)"
  echo "go	$(go version | cut -d' ' -f3-)"
  echo "redis-server	$(redis-server --version | sed 's/^Redis server //')"
  echo "redis-benchmark	$(redis-benchmark --version)"
  echo "nginx	$(nginx -v 2>&1 | sed 's/^nginx version: //')"
  echo "wrk	$(wrk -v 2>&1 | head -1 | sed 's/ Copyright.*//')"
  echo "benchstat	golang.org/x/perf/cmd/benchstat@$(go version -m "$BENCHSTAT" | awk '$1 == "mod" {print $3}')"
  echo "git	$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- internal sidecar bench 2>/dev/null || echo ' (with uncommitted changes in the tree)')"
} > "$OUT/machine.tsv"
cat "$OUT/machine.tsv" >&2

echo "# 1/5 limiter core: $BENCH_COUNT rounds" >&2
go test -c -o "$OUT/limiter.test" ./internal/limiter
LIMITER_CMD="limiter.test -test.run '^\$' -test.bench 'BenchmarkMemoryStore|BenchmarkXTimeRate' -test.benchmem -test.benchtime $BENCH_TIME  (go test -c ./internal/limiter; $BENCH_COUNT runs in a row)"
: > "$OUT/limiter.txt"
for round in $(seq "$BENCH_COUNT"); do
  echo "#   round $round/$BENCH_COUNT" >&2
  (cd internal/limiter && "$OUT/limiter.test" -test.run '^$' -test.bench 'BenchmarkMemoryStore|BenchmarkXTimeRate' \
    -test.benchmem -test.benchtime "$BENCH_TIME") >> "$OUT/limiter.txt"
done
rm -f "$OUT/limiter.test"
# benchstat compares columns: one "impl" per algorithm, x/time/rate first (the base).
python3 bench/report.py benchstat-input "$OUT/limiter.txt" > "$OUT/limiter-benchstat-input.txt"
"$BENCHSTAT" -col impl "$OUT/limiter-benchstat-input.txt" > "$OUT/limiter-benchstat.txt"

echo "# 2/5 redis store" >&2
OUT=$OUT CALLERS=1,8,50 STORE_DURATION=$STORE_DURATION BENCH_REPEAT=$BENCH_REPEAT bench/store.sh
if [ -x bench/redis.sh ]; then
  echo "# 2b/5 bench/redis.sh (present in the tree)" >&2
  # Bounded: its own defaults (3 repetitions of 200k requests) take many minutes on a busy machine.
  echo "bench/redis.sh  (REPS=$BENCH_REPEAT N=$REDIS_N TAKES=$REDIS_TAKES)" > "$OUT/redis-sh.txt"
  REPS=$BENCH_REPEAT N=$REDIS_N TAKES=$REDIS_TAKES timeout 300 bench/redis.sh >> "$OUT/redis-sh.txt" 2>&1 ||
    echo "bench/redis.sh exited with $?" >> "$OUT/redis-sh.txt"
fi

echo "# 2c/5 bench/rediscpu.sh: Redis CPU per decision, single node and 3-master cluster" >&2
OUT=$OUT DURATION=$STORE_DURATION BASE_BIN=${REDISCPU_BASE_BIN:-} bench/rediscpu.sh > /dev/null

echo "# 2d/5 bench/lease.sh: leased limits, two sidecars (engines, then binaries) on one hot key" >&2
OUT=$OUT DURATION=$STORE_DURATION bench/lease.sh > /dev/null

echo "# 2e/5 bench/concurrency.sh: a Concurrency rule beside a TokenBucket rule through one sidecar" >&2
OUT=$OUT DURATION=$STORE_DURATION bench/concurrency.sh > /dev/null

echo "# 2f/5 bench/adaptive.sh: the adaptive limit and fixed limits against an application with a knee" >&2
OUT=$OUT DURATION=$ADAPTIVE_DURATION bench/adaptive.sh > /dev/null

echo "# 3/5 proxy path" >&2
OUT=$OUT DURATION=$PROXY_DURATION RATE=$RATE BENCH_REPEAT=$PROXY_REPEAT PROFILE=0 OUTAGE=0 bench/proxy.sh | tee "$OUT/proxy.txt"

echo "# 4/5 control plane: a rolling update through a real manager, per --render-interval" >&2
go build -o "$OUT/manager" ./cmd/manager
{
  echo "## The control plane under pod churn (issue 20)"
  echo
  KUBEBUILDER_ASSETS="$(hack/envtest-assets.sh)" go run ./bench/controlplane -manager "$OUT/manager"
  echo
  echo "The sidecar's side: loading the compressed file of 80 policies × 64 rules (parse, gunzip, compile, select; the request path reads the previous configuration through an atomic pointer until the new one is stored), \`go test -run '^\$' -bench BenchmarkLoadCompressed -benchmem ./internal/dataplane/config\`:"
  echo
  echo '```'
  go test -run '^$' -bench BenchmarkLoadCompressed -benchmem -count 3 ./internal/dataplane/config | grep -E '^Benchmark|^cpu'
  echo '```'
} > "$OUT/section-20-controlplane.md"
rm -f "$OUT/manager"

echo "loadavg_end	$(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/machine.tsv"
{
  echo "limiter	$LIMITER_CMD"
  echo "store	OUT=bench/out CALLERS=1,8,50 STORE_DURATION=$STORE_DURATION BENCH_REPEAT=$BENCH_REPEAT bench/store.sh"
  sed 's/^/store	  /' "$OUT/store-commands.txt"
  echo "lease	OUT=bench/out DURATION=$STORE_DURATION bench/lease.sh  (wrk -t1 -c16 -d5s per sidecar, 3 rounds)"
  echo "proxy	OUT=bench/out DURATION=$PROXY_DURATION RATE=$RATE BENCH_REPEAT=$PROXY_REPEAT PROFILE=0 OUTAGE=0 bench/proxy.sh"
  echo "proxy	  wrk -t1 -c32 -d${PROXY_DURATION}s --latency URL; bench/loadgen -url URL -rate $RATE -duration ${PROXY_DURATION}s"
} > "$OUT/commands.tsv"
python3 bench/report.py results "$OUT" > bench/results.md
{
  echo
  echo "## A Concurrency rule beside a TokenBucket rule"
  echo
  echo "OUT=bench/out DURATION=$STORE_DURATION bench/concurrency.sh"
  echo
  cat "$OUT/concurrency.md"
  echo
  echo "## Adaptive protection: the sidecar's adaptive limit against an application with a knee"
  echo
  echo "OUT=bench/out DURATION=$ADAPTIVE_DURATION bench/adaptive.sh"
  echo
  cat "$OUT/adaptive.md"
} >> bench/results.md
echo "# 5/5 RLS server vs the sidecar's decision path" >&2
go run ./bench/rlsbench -clients "${RLS_CLIENTS:-16}" -duration "${RLS_DURATION:-3s}" | tee "$OUT/rls.md" >> bench/results.md
echo "# 5b/5 RLS server vs a reference decision service (envoyproxy/ratelimit's Redis driver)" >&2
go run ./bench/rlspeer -clients "${RLSPEER_CLIENTS:-32}" -duration "${RLSPEER_DURATION:-3s}" -rounds "${RLSPEER_ROUNDS:-5}" |
  tee "$OUT/rlspeer.md" >> bench/results.md
echo "# wrote bench/results.md" >&2
