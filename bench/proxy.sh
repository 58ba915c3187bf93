#!/usr/bin/env bash
# Benchmarks the sidecar against a direct connection, nginx and a bare fasthttp proxy, on
# loopback only.
#
# Starts everything itself on free loopback ports (a tiny Go upstream, redis-server, nginx with
# a keep-alive upstream and limit_req at a rate that never denies, bench/bareproxy: the
# sidecar's fasthttp server and HostClient with nothing else, the sidecar in four
# configurations: no policy, the rule decided in Redis (exact), leased from Redis, local; and the
# rule decided in Redis keyed on a header and on a verified JWT's sub, side by side), runs
# wrk for DURATION seconds per target, then a fixed-rate open-loop run at RATE req/s, a CPU
# profile of the sidecar deciding through Redis, and an outage run (redis killed with SIGKILL
# and restarted under load). Everything it started is stopped on exit.
#
# Each wrk run also reads the CPU time (utime+stime from /proc, children included: nginx's
# workers) the proxy process spent serving it, divided by the requests wrk completed, and the
# proxy's resident memory (VmRSS at the end of the run, and its peak VmHWM during the run); they are printed as
# ratios to nginx's and to the bare proxy's in the same repeat, and after the last repeat as
# the medians of those per-repeat ratios (a markdown table).
#
# Needs: go, wrk, nginx, redis-server, python3. Usage: bench/proxy.sh  (DURATION=10 RATE=1000
# CONNS=32 THREADS=1 to change the defaults; BENCH_REPEAT=3 repeats the wrk and fixed-rate runs;
# FIXED=0 skips the fixed-rate runs;
# PROFILE=0 and OUTAGE=0 skip the profile and the outage run; IDLE=N holds N idle keep-alive
# connections to each proxy and reports its memory per connection (default 1000, 0 skips); BASELINE=path/to/sluice-sidecar adds
# that binary in the same three configurations as "baseline-..." targets, to compare two builds in
# one run (build it with CGO_ENABLED=0, as this script builds the sidecar), and BASELINE_ENV="K=V ..."
# sets environment variables for those baseline sidecars only (BASELINE=<this tree's sidecar>
# BASELINE_ENV=GOGC=100 compares the shipped GOGC with Go's default); OUT=dir also writes each result as a tab-separated line to dir/proxy.tsv, "repeat
# wrk|fixed target req/s p50-ms p99-ms non-2xx" and "repeat cpu target us-per-request rss-kib
# requests peak-rss-kib" and "0 idle target rss-before-kib rss-held-kib connections", and wrk's
# outputs next to it, for bench/bench.sh).
set -euo pipefail

DURATION=${DURATION:-10}
RATE=${RATE:-1000}
CONNS=${CONNS:-32}
THREADS=${THREADS:-1}
FIXED=${FIXED:-1}
BENCH_REPEAT=${BENCH_REPEAT:-1}
PROFILE=${PROFILE:-1}
OUTAGE=${OUTAGE:-1}
OUT=${OUT:-}
BASELINE=${BASELINE:-}
BASELINE_ENV=${BASELINE_ENV:-}
IDLE=${IDLE:-1000}

cd "$(dirname "$0")/.."
for bin in go wrk nginx redis-server python3; do
  command -v "$bin" >/dev/null || { echo "missing $bin (apt-get install -y wrk nginx-light redis-server)" >&2; exit 1; }
done

# shellcheck source=bench/lib.sh
. bench/lib.sh # the scripts run from the repository root (cd above)
if [ -n "$OUT" ]; then mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd); : > "$OUT/proxy.tsv"; fi

echo "# building" >&2
# The proxies are built as the images build them (CGO_ENABLED=0, Dockerfile.sidecar): a cgo
# build maps libc too, about 1.2 MiB of resident memory that no shipped sidecar has.
CGO_ENABLED=0 go build -o "$WORK/sluice-sidecar" ./sidecar
go build -o "$WORK/upstream" ./cmd/upstream
go build -o "$WORK/loadgen" ./bench/loadgen
CGO_ENABLED=0 go build -o "$WORK/bareproxy" ./bench/bareproxy
go build -o "$WORK/jwtmint" ./bench/jwtmint
go build -o "$WORK/idleconns" ./bench/idleconns

UP=$(freeport); REDIS=$(freeport); NGINX=$(freeport); BARE=$(freeport)
"$WORK/upstream" -listen "127.0.0.1:$UP" & PIDS+=($!)
redis-server --port "$REDIS" --bind 127.0.0.1 --save "" --appendonly no --daemonize no --loglevel warning --dir "$WORK" > "$WORK/redis-server.log" 2>&1 &
REDIS_PID=$!; PIDS+=($REDIS_PID)

mkdir -p "$WORK/nginx"
cat > "$WORK/nginx/nginx.conf" <<EOF
worker_processes auto;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/error.log warn;
daemon off;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $WORK/nginx/body; proxy_temp_path $WORK/nginx/proxy;
  fastcgi_temp_path $WORK/nginx/fcgi; uwsgi_temp_path $WORK/nginx/uwsgi; scgi_temp_path $WORK/nginx/scgi;
  limit_req_zone \$binary_remote_addr zone=perclient:10m rate=1000000r/s;
  upstream app { server 127.0.0.1:$UP; keepalive 256; }
  server {
    listen 127.0.0.1:$NGINX;
    location / {
      limit_req zone=perclient burst=1000000 nodelay;
      proxy_pass http://app;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }
  }
}
EOF
nginx -c "$WORK/nginx/nginx.conf" -p "$WORK/nginx" & PIDS+=($!)
NGINX_PID=$!
"$WORK/bareproxy" -listen "127.0.0.1:$BARE" -upstream "127.0.0.1:$UP" > "$WORK/bareproxy.log" 2>&1 & PIDS+=($!)
BARE_PID=$!

# A rule that never denies: 10^8 per second per client.
cat > "$WORK/policies.json" <<'EOF'
{"version":1,"namespace":"bench","policies":[{"name":"bench","selector":{},"replicas":1,"failureMode":"Local",
 "response":{"statusCode":429,"headers":"Both"},
 "rules":[{"name":"per-client","key":[{"source":"clientIP"}],"algorithm":"TokenBucket","limit":100000000,"windowMs":1000,"burst":100000000,"cost":1,"mode":"Enforce"}]}]}
EOF
# The same rule leased (bench/lease.sh's lease): decided from a share of the limit held locally.
sed 's/"mode":"Enforce"}/"mode":"Enforce","lease":{"maxAgeMs":100}}/' "$WORK/policies.json" > "$WORK/leased.json"
grep -q lease "$WORK/leased.json"
# The same rule keyed on a header, and on the sub of a verified token (ES256, cached once
# verified). Every wrk run sends both headers, so every target reads the same bytes.
TOKEN=$("$WORK/jwtmint" -jwks "$WORK/jwks.json" -sub alice)
WRK_HEADERS=(-H "Authorization: Bearer $TOKEN" -H "X-User: alice")
sed 's/"key":\[{"source":"clientIP"}\]/"key":[{"source":"header","name":"X-User"}]/' "$WORK/policies.json" > "$WORK/header.json"
sed -e 's/"key":\[{"source":"clientIP"}\]/"key":[{"source":"jwtClaim","name":"sub"}]/' \
  -e "s/\"rules\":/\"jwt\":{\"header\":\"Authorization\",\"algorithms\":[\"ES256\"],\"jwks\":$(cat "$WORK/jwks.json")},\"rules\":/" \
  "$WORK/policies.json" > "$WORK/jwt.json"
grep -q X-User "$WORK/header.json"; grep -q jwtClaim "$WORK/jwt.json"

# sidecar NAME CONFIG [extra flags...]: starts a sidecar ($SIDECAR_BIN), sets SC_PORT, SC_METRICS,
# SC_PID.
SIDECAR_BIN=$WORK/sluice-sidecar
SIDECAR_ENV=()
sidecar() {
  local name=$1 config=$2; shift 2
  SC_PORT=$(freeport); SC_METRICS=$(freeport)
  env "${SIDECAR_ENV[@]}" "$SIDECAR_BIN" --listen "127.0.0.1:$SC_PORT" --upstream "http://127.0.0.1:$UP" \
    --config "$config" --pod-labels-file "" --metrics-listen "127.0.0.1:$SC_METRICS" --pprof "$@" \
    > "$WORK/$name.log" 2>&1 &
  SC_PID=$!; PIDS+=($SC_PID)
  waitport "$SC_PORT"
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$SC_METRICS/readyz" >/dev/null && return 0; sleep 0.05; done
  echo "sidecar $name not ready" >&2; cat "$WORK/$name.log" >&2; exit 1
}

waitport "$UP"; waitport "$REDIS"; waitport "$NGINX"; waitport "$BARE"
sidecar none "$WORK/absent.json";            NONE=$SC_PORT; NONE_M=$SC_METRICS; NONE_PID=$SC_PID
sidecar redis "$WORK/policies.json" --redis-url "redis://127.0.0.1:$REDIS/0"; RED=$SC_PORT; RED_M=$SC_METRICS; RED_PID=$SC_PID
sidecar leased "$WORK/leased.json" --redis-url "redis://127.0.0.1:$REDIS/0"; LEA=$SC_PORT; LEA_PID=$SC_PID
sidecar local "$WORK/policies.json";          LOC=$SC_PORT; LOC_PID=$SC_PID
sidecar header "$WORK/header.json" --redis-url "redis://127.0.0.1:$REDIS/0"; HDR=$SC_PORT; HDR_PID=$SC_PID
sidecar jwt "$WORK/jwt.json" --redis-url "redis://127.0.0.1:$REDIS/0"; JWT=$SC_PORT; JWT_M=$SC_METRICS; JWT_PID=$SC_PID
TARGETS=("direct $UP 0" "nginx+limit_req $NGINX $NGINX_PID" "bare-fasthttp $BARE $BARE_PID" "sidecar-no-policy $NONE $NONE_PID"
  "sidecar+redis $RED $RED_PID" "sidecar-leased $LEA $LEA_PID" "sidecar-local $LOC $LOC_PID"
  "sidecar+redis+header $HDR $HDR_PID" "sidecar+redis+jwt $JWT $JWT_PID")
if [ -n "$BASELINE" ]; then
  SIDECAR_BIN=$BASELINE
  read -r -a SIDECAR_ENV <<<"$BASELINE_ENV"
  sidecar base-none "$WORK/absent.json"; B_NONE_M=$SC_METRICS; TARGETS+=("baseline-no-policy $SC_PORT $SC_PID")
  sidecar base-redis "$WORK/policies.json" --redis-url "redis://127.0.0.1:$REDIS/0"; B_RED_M=$SC_METRICS; TARGETS+=("baseline+redis $SC_PORT $SC_PID")
  sidecar base-leased "$WORK/leased.json" --redis-url "redis://127.0.0.1:$REDIS/0"; TARGETS+=("baseline-leased $SC_PORT $SC_PID")
  sidecar base-local "$WORK/policies.json"; TARGETS+=("baseline-local $SC_PORT $SC_PID")
  SIDECAR_BIN=$WORK/sluice-sidecar
  SIDECAR_ENV=()
fi

# ms VALUE: wrk's latency (e.g. 812.00us, 1.20ms, 2.01s) in milliseconds.
ms() { awk -v v="$1" 'BEGIN { n = v + 0; u = v; sub(/^[0-9.]+/, "", u); f = (u == "us") ? 0.001 : (u == "s") ? 1000 : (u == "m") ? 60000 : 1; printf "%.3f", n * f }'; }
# record FIELDS...: one tab-separated line of results in $OUT/proxy.tsv.
record() { [ -z "$OUT" ] || { local IFS=$'\t'; printf '%s\n' "$*" >> "$OUT/proxy.tsv"; }; }

# ticks PID: CPU time (utime+stime, clock ticks) of PID and its children (nginx's workers).
ticks() {
  local t=0 p s
  for p in "$1" $(pgrep -P "$1" || true); do
    s=$(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null || echo 0)
    t=$((t + s))
  done
  echo "$t"
}
# rss PID [FIELD]: resident KiB (VmRSS, or FIELD: VmHWM is the peak) of PID and its children.
rss() {
  local t=0 p s
  for p in "$1" $(pgrep -P "$1" || true); do
    s=$(awk -v f="${2:-VmRSS}:" '$1 == f {print $2}' "/proc/$p/status" 2>/dev/null || echo 0)
    t=$((t + ${s:-0}))
  done
  echo "$t"
}
HZ=$(getconf CLK_TCK)

declare -A RPS P50 P99 FIX CPU RSS HWM
: > "$WORK/cpu.tsv" # repeat target us-per-request rss-kib peak-rss-kib req/s, for the medians
run_wrk() { # repeat name port pid (0: not a proxy)
  curl -sf "http://127.0.0.1:$3/" >/dev/null
  wrk -t1 -c8 -d1s "${WRK_HEADERS[@]}" "http://127.0.0.1:$3/" >/dev/null # warm connections
  local t0=0 t1=0 p
  # The peak (VmHWM) from here on: writing 5 to clear_refs resets it to the current RSS.
  [ "$4" = 0 ] || for p in "$4" $(pgrep -P "$4" || true); do echo 5 > "/proc/$p/clear_refs" 2>/dev/null || true; done
  [ "$4" = 0 ] || t0=$(ticks "$4")
  local out; out=$(wrk -t"$THREADS" -c"$CONNS" -d"${DURATION}s" --latency "${WRK_HEADERS[@]}" "http://127.0.0.1:$3/")
  [ "$4" = 0 ] || t1=$(ticks "$4")
  [ -z "$OUT" ] || printf '%s\n' "$out" > "$OUT/wrk-$2-$1.txt"
  RPS[$2]=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
  P50[$2]=$(awk '$1=="50%" {print $2}' <<<"$out")
  P99[$2]=$(awk '$1=="99%" {print $2}' <<<"$out")
  local bad; bad=$(awk '/Non-2xx/ {print $5}' <<<"$out")
  local n; n=$(awk '/requests in/ {print $1}' <<<"$out")
  local cpu="-" mem="-" hwm="-"
  if [ "$4" != 0 ]; then
    cpu=$(awk -v d=$((t1 - t0)) -v hz="$HZ" -v n="$n" 'BEGIN { printf "%.1f", d / hz / n * 1e6 }')
    mem=$(rss "$4"); hwm=$(rss "$4" VmHWM)
    CPU[$2]=$cpu; RSS[$2]=$mem; HWM[$2]=$hwm
    record "$1" cpu "$2" "$cpu" "$mem" "$n" "$hwm"
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$cpu" "$mem" "$hwm" "${RPS[$2]}" >> "$WORK/cpu.tsv"
  fi
  printf '%-22s %10s req/s  p50 %8s  p99 %8s  non-2xx %-6s CPU %6s us/req  RSS %6s KiB (peak %s)\n' \
    "$2" "${RPS[$2]}" "${P50[$2]}" "${P99[$2]}" "${bad:-0}" "$cpu" "$mem" "$hwm"
  record "$1" wrk "$2" "${RPS[$2]}" "$(ms "${P50[$2]}")" "$(ms "${P99[$2]}")" "${bad:-0}"
}
run_fixed() { # repeat name port
  local out; out=$("$WORK/loadgen" -url "http://127.0.0.1:$3/" -rate "$RATE" -duration "${DURATION}s")
  FIX[$2]=$out
  printf '%-22s %s\n' "$2" "$out"
  # rate=1000/s sent=10000 in 11.001s non200=0 p50=0.412ms p90=0.700ms p99=1.234ms p99.9=... max=...
  record "$1" fixed "$2" "$RATE" \
    "$(sed -E 's/.* p50=([0-9.]+)ms.*/\1/' <<<"$out")" "$(sed -E 's/.* p99=([0-9.]+)ms.*/\1/' <<<"$out")" \
    "$(sed -E 's/.*non200=([0-9]+).*/\1/' <<<"$out")"
}

for rep in $(seq "$BENCH_REPEAT"); do
  echo "## repeat $rep/$BENCH_REPEAT: wrk -t$THREADS -c$CONNS -d${DURATION}s (closed loop, max throughput), $(nproc) CPUs shared by load generator and servers, load average $(cut -d' ' -f1-3 /proc/loadavg)"
  for t in "${TARGETS[@]}"; do
    read -r name port pid <<<"$t"
    run_wrk "$rep" "$name" "$port" "$pid"
  done
  python3 - "$WORK/cpu.tsv" "$rep" <<'EOF'
import sys
rows = {r[1]: tuple(map(float, r[2:6])) for r in (l.split() for l in open(sys.argv[1])) if r[0] == sys.argv[2]}
cpu0, _, _, rps0 = rows["nginx+limit_req"]
cpub, _, _, rpsb = rows["bare-fasthttp"]
for name, (cpu, rss, hwm, rps) in rows.items():
    print(f"{name:22} CPU per request / nginx {cpu/cpu0:.2f} / bare {cpu/cpub:.2f}  req/s / nginx {rps/rps0:.2f} / bare {rps/rpsb:.2f}"
          f"  RSS {rss/1024:.1f} MiB, peak {hwm/1024:.1f} MiB")
EOF

  [ "$FIXED" = 1 ] || continue
  echo "## repeat $rep/$BENCH_REPEAT: open loop at $RATE req/s for ${DURATION}s (latency from scheduled start)"
  for t in "${TARGETS[@]}"; do
    read -r name port _ <<<"$t"
    case $name in *+header|*+jwt) continue ;; esac # loadgen sends no headers: compared by wrk only
    run_fixed "$rep" "$name" "$port"
  done
  python3 - "${FIX[direct]}" "${FIX[sidecar+redis]}" "${FIX[sidecar-local]}" <<'EOF'
import sys, re
def p(s, k): return float(re.search(k + r"=([0-9.]+)ms", s).group(1))
d, r, l = sys.argv[1:]
for name, s in (("sidecar+redis", r), ("sidecar-local", l)):
    print(f"added latency {name} over direct at fixed rate: p50 +{p(s,'p50')-p(d,'p50'):.3f}ms (goal <= 0.25)  p99 +{p(s,'p99')-p(d,'p99'):.3f}ms (goal <= 0.5)")
EOF
done

echo "## medians of the $BENCH_REPEAT repeats' ratios (wrk -t$THREADS -c$CONNS -d${DURATION}s; CPU of each proxy process per request from /proc; peak RSS is VmHWM during the wrk runs, the highest of the repeats)"
python3 - "$WORK/cpu.tsv" <<'EOF'
import sys
from statistics import median
reps = {}
for r in (l.split() for l in open(sys.argv[1])):
    reps.setdefault(r[0], {})[r[1]] = tuple(map(float, r[2:6]))
names = list(next(iter(reps.values())))
goal = {"sidecar-no-policy": "CPU ≤ 1.05× bare", "sidecar-local": "CPU ≤ 1.1× bare",
        "sidecar+redis": "CPU ≤ 1.2× bare, req/s ≥ 0.85× bare"}
print("| configuration | µs of CPU per request | ÷ nginx limit_req | ÷ bare fasthttp proxy | req/s ÷ nginx | req/s ÷ bare | peak RSS | goal |")
print("| --- | --: | --: | --: | --: | --: | --: | --- |")
for n in names:
    m = lambda f: median(f(r) for r in reps.values())
    print(f"| {n} | {m(lambda r: r[n][0]):.1f} | {m(lambda r: r[n][0] / r['nginx+limit_req'][0]):.2f} | {m(lambda r: r[n][0] / r['bare-fasthttp'][0]):.2f}"
          f" | {m(lambda r: r[n][3] / r['nginx+limit_req'][3]):.2f} | {m(lambda r: r[n][3] / r['bare-fasthttp'][3]):.2f}"
          f" | {max(r[n][2] for r in reps.values()) / 1024:.1f} MiB | {goal.get(n, '')} |")
if "sidecar+redis+jwt" in names:
    m = lambda f: median(f(r) for r in reps.values())
    print(f"\nA rule keyed on a verified JWT's sub vs the same rule keyed on a header: CPU per request "
          f"{m(lambda r: r['sidecar+redis+jwt'][0] / r['sidecar+redis+header'][0]):.2f}x, req/s "
          f"{m(lambda r: r['sidecar+redis+jwt'][3] / r['sidecar+redis+header'][3]):.2f}x (medians of the repeats)")
EOF
curl -s "http://127.0.0.1:$JWT_M/metrics" | grep '^sluice_jwt_tokens_total' || true

# Idle keep-alive connections: IDLE connections held open (bench/idleconns: one request each,
# then idle) to each proxy, after its wrk runs; its resident memory (VmRSS, children included)
# read before they open and 2 s after the last one served its request, and the difference per
# connection.
if [ "$IDLE" -gt 0 ]; then
  echo "## $IDLE idle keep-alive connections: resident memory before, while held, and per connection"
  echo "| configuration | RSS before | RSS with $IDLE idle connections | per connection |"
  echo "| --- | --: | --: | --: |"
  for t in "${TARGETS[@]}"; do
    read -r name port pid <<<"$t"
    case $name in nginx+limit_req|bare-fasthttp|sidecar-no-policy|sidecar+redis|baseline-no-policy|baseline+redis) ;; *) continue ;; esac
    before=$(rss "$pid")
    coproc IDLER { "$WORK/idleconns" -addr "127.0.0.1:$port" -n "$IDLE"; }
    idler=$IDLER_PID
    read -r ready _ <&"${IDLER[0]}" || ready=""
    if [ "$ready" != ready ]; then
      echo "idleconns against $name did not get its connections" >&2
      exit 1
    fi
    sleep 2
    held=$(rss "$pid")
    kill "$idler" 2>/dev/null || true
    wait "$idler" 2>/dev/null || true
    awk -v n="$name" -v b="$before" -v h="$held" -v c="$IDLE" \
      'BEGIN { printf "| %s | %.1f MiB | %.1f MiB | %.1f KiB |\n", n, b / 1024, h / 1024, (h - b) / c }'
    record 0 idle "$name" "$before" "$held" "$IDLE"
  done
fi

# profile NAME PORT METRICS BINARY: a CPU profile of a sidecar under wrk (8 s), its top entries.
profile() {
  echo "## CPU profile of $1 under wrk (8s)"
  wrk -t"$THREADS" -c"$CONNS" -d10s "http://127.0.0.1:$2/" >/dev/null &
  local w=$!
  sleep 1
  curl -sf -o "$WORK/cpu-$1.pprof" "http://127.0.0.1:$3/debug/pprof/profile?seconds=8"
  wait $w
  go tool pprof -top -nodecount=25 "$4" "$WORK/cpu-$1.pprof" 2>/dev/null | sed -n '1,32p'
  echo "### cumulative, request path"
  go tool pprof -top -cum -nodecount=200 "$4" "$WORK/cpu-$1.pprof" 2>/dev/null |
    grep -E 'proxy\.\(\*Handler\)|redisstore|ReverseProxy\)\.ServeHTTP|fasthttp\.\(\*(Server|HostClient)\)\.(serveConn|Do)\b|keys\.|Transport\)\.RoundTrip|go-redis.*Process|syscall\.Syscall|runtime\.gcBgMarkWorker|runtime\.mallocgc|metrics|breaker' | head -20
}
if [ "$PROFILE" = 1 ]; then
  profile sidecar-no-policy "$NONE" "$NONE_M" "$WORK/sluice-sidecar"
  profile sidecar+redis "$RED" "$RED_M" "$WORK/sluice-sidecar"
  if [ -n "$BASELINE" ]; then
    profile baseline-no-policy "$(awk '/^baseline-no-policy/ {print $2}' <<<"$(printf '%s\n' "${TARGETS[@]}")")" "$B_NONE_M" "$BASELINE"
    profile baseline+redis "$(awk '/^baseline\+redis/ {print $2}' <<<"$(printf '%s\n' "${TARGETS[@]}")")" "$B_RED_M" "$BASELINE"
  fi
fi

[ "$OUTAGE" = 1 ] || exit 0
echo "## outage: redis SIGKILLed 3s into a ${DURATION}s wrk run on sidecar+redis (failureMode Local), restarted 3s later"
wrk -t"$THREADS" -c"$CONNS" -d"${DURATION}s" "http://127.0.0.1:$RED/" > "$WORK/outage.wrk" &
WRK=$!
sleep 3
KILL_AT=$(date +%s.%N); kill -9 "$REDIS_PID"; wait "$REDIS_PID" 2>/dev/null || true
sleep 3
redis-server --port "$REDIS" --bind 127.0.0.1 --save "" --appendonly no --daemonize no --loglevel warning --dir "$WORK" >> "$WORK/redis-server.log" 2>&1 &
REDIS_PID=$!; PIDS+=($REDIS_PID); waitport "$REDIS"
BACK_AT=$(date +%s.%N)
wait $WRK
grep -E 'requests in|Requests/sec|Non-2xx|Socket errors' "$WORK/outage.wrk" || true
grep -q 'Non-2xx' "$WORK/outage.wrk" || echo "  Non-2xx or 3xx responses: 0"
python3 - "$KILL_AT" "$BACK_AT" "$WORK/redis.log" <<'EOF2'
import json, sys, datetime
kill, back, log = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
def ts(s): return datetime.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()
opened = closed = None
for line in open(log, errors="ignore"):
    try: e = json.loads(line)
    except ValueError: continue
    if e.get("msg") != "Redis circuit breaker changed state": continue
    t = ts(e["time"])
    print(f"  breaker {e['from']} -> {e['to']} at kill{t-kill:+.3f}s (cooldown {e['cooldown']/1e9:.0f}s)")
    if e["to"] == "open" and opened is None and t >= kill: opened = t
    if e["to"] == "closed" and t >= back and closed is None: closed = t
print(f"  time to open the breaker after SIGKILL: {(opened-kill)*1000:.1f}ms" if opened else "  breaker never opened")
print(f"  time back on Redis after it restarted:  {(closed-back)*1000:.1f}ms" if closed else "  never closed")
EOF2
