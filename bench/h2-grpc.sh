#!/usr/bin/env bash
# h2/gRPC row of `make bench` (bench/README.md "HTTP/2 and gRPC"): proxy CPU µs
# per gRPC unary call over h2c. The gateway (`protocol = "h2c"` cluster), nginx (`grpc_pass`) and
# HAProxy (`proto h2` on both sides) each front the same mock-backend gRPC port, pinned to core
# BENCH_PROXY_CPU with one worker; `h2load -c 8 -m 32` (core BENCH_LOAD_CPU, beside the node) sends
# unary calls to `hopping.test.v1.Echo/Who` (proto/echo.proto): POST, `content-type:
# application/grpc`, `te: trailers`, the body one gRPC message (5-byte prefix + the empty
# `WhoRequest`); the node answers headers, one DATA frame (`WhoReply`) and `grpc-status: 0`
# trailers. CPU = utime+stime of the proxy's pids from /proc/<pid>/stat over the run, divided by the
# calls h2load completed with status 200. Rounds are interleaved (gateway, nginx, HAProxy, again);
# the figure is the median over rounds.
# `bench/h2-grpc.sh syscalls [calls]` counts syscalls and context switches per call for each target.
# `bench/h2-grpc.sh callgrind [calls]` instead runs the gateway alone under callgrind for a fixed
# number of calls (20,000; h2load -n) and prints its per-call profile (bench/profile_tools.py cg).
# Env: BENCH_SECONDS (10) per run, BENCH_ROUNDS (3), BENCH_PROXY_CPU (1), BENCH_LOAD_CPU (0),
# BENCH_RAW (a raw.tsv of run.sh to append "target round grpc.* value" lines to; else a table
# is printed), BENCH_GRPC_TARGETS ("gateway nginx haproxy"), BENCH_KEEP.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BENCH_TAG=bench-grpc
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
bench_settings
read -r -a TARGETS <<<"${BENCH_GRPC_TARGETS:-gateway nginx haproxy}"
for t in nginx haproxy h2load taskset curl; do command -v "$t" >/dev/null || die "$t missing (h2load is nghttp2-client)"; done
GW=${GW_BIN:-$ROOT/target/dist/hopping-gateway}
MOCK=$ROOT/target/release/mock-backend
{ [ -x "$GW" ] && [ -x "$MOCK" ]; } || die "binaries missing: run make build dist"

bench_workdir hopgw-bench-grpc
read -r NODE_HTTP NODE_GRPC GW_PORT GW_ADMIN NGINX HAPROXY <<<"$(free_ports 6)"
METHOD=/hopping.test.v1.Echo/Who
# One gRPC message: flag 0 (not compressed), length 0 (big-endian u32), then the empty WhoRequest.
printf '\0\0\0\0\0' >"$W/call.bin"

start node "$LCPU" "$MOCK" "$NODE_HTTP" grpc-node --grpc-port "$NODE_GRPC"
wait_http "http://127.0.0.1:$NODE_HTTP/health" "mock-backend"

mkdir -p "$W/conf"
{
  printf '[server]\nshutdown_timeout = "1s"\n[limits]\nupstream_idle_timeout = "600s"\nconnect_timeout = "5s"\n'
  printf '[health]\ninterval = "30s"\ntimeout = "2s"\nkind = "tcp"\n'
  printf '[[clusters]]\nname = "grpc"\nprotocol = "h2c"\n'
  toml_nodes "n1=$NODE_GRPC"
  toml_catch_all r grpc
} >"$W/conf/gw.toml"
mkdir -p "$W/nginx"
{
  nginx_head "$W/nginx" 4096
  cat <<CONF
  keepalive_requests 100000000;
  keepalive_timeout 600s;
  http2_max_requests 100000000;
  http2_max_concurrent_streams 128;
  upstream node { server 127.0.0.1:$NODE_GRPC; keepalive 64; keepalive_requests 100000000; keepalive_timeout 600s; }
  server {
    listen 127.0.0.1:$NGINX http2 backlog=4096;
    location / { grpc_pass grpc://node; }
  }
}
CONF
} >"$W/nginx/nginx.conf"
cat >"$W/haproxy.cfg" <<CONF
global
  nbthread 1
defaults
  mode http
  http-reuse always
  timeout connect 5s
  timeout client 600s
  timeout server 600s
frontend fe
  bind 127.0.0.1:$HAPROXY proto h2
  default_backend nodes
backend nodes
  server n1 127.0.0.1:$NODE_GRPC proto h2
CONF

start_target() { # TARGET -> PORT, TPIDS, TMAIN
  case $1 in
    gateway)
      start gateway "$PCPU" "$GW" --config "$W/conf/gw.toml" --listen "127.0.0.1:$GW_PORT" \
        --admin-listen "127.0.0.1:$GW_ADMIN" --workers 1 --access-log off
      TMAIN=$STARTED TPIDS=$STARTED PORT=$GW_PORT
      wait_http "http://127.0.0.1:$GW_ADMIN/readyz" gateway ;;
    nginx)
      start nginx "$PCPU" nginx -p "$W/nginx" -e "$W/nginx/error.log" -c "$W/nginx/nginx.conf"
      TMAIN=$STARTED PORT=$NGINX
      wait_tcp "$NGINX" nginx
      TPIDS="$TMAIN $(pgrep -P "$TMAIN" | paste -sd' ' -)" ;;
    haproxy)
      start haproxy "$PCPU" haproxy -db -f "$W/haproxy.cfg"
      TMAIN=$STARTED TPIDS=$STARTED PORT=$HAPROXY
      wait_tcp "$HAPROXY" haproxy ;;
    *) die "unknown target $1" ;;
  esac
}
stop_target() {
  kill -TERM "$TMAIN" 2>/dev/null || true
  wait "$TMAIN" 2>/dev/null || true
}
# h2load ARGS...: the unary call load against 127.0.0.1:$PORT.
load() {
  taskset -c "$LCPU" h2load -c 8 -m 32 -d "$W/call.bin" -H 'content-type: application/grpc' \
    -H 'te: trailers' "$@" "http://127.0.0.1:$PORT$METHOD"
}
# Every target must answer a real gRPC call (grpc-status 0 in the trailers) before it is measured.
check() {
  local out
  out=$(curl -sS --http2-prior-knowledge -X POST --data-binary @"$W/call.bin" -H 'content-type: application/grpc' \
    -H 'te: trailers' -D - -o "$W/check.body" --raw "http://127.0.0.1:$PORT$METHOD" 2>&1 || true)
  grep -qi '^grpc-status: *0' <<<"$out" || die "$1 did not answer the gRPC call with grpc-status 0: $out"
}

emit() { # target round metric value
  if [ -n "${BENCH_RAW:-}" ]; then printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$BENCH_RAW"; fi
  printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$W/raw.tsv"
}

if [ "${1:-}" = callgrind ]; then
  N=${2:-20000}
  OUT=${PROFILE_OUT:-$ROOT/target/bench-profile}
  mkdir -p "$OUT"
  cp "$GW" "$OUT/hopping-gateway.grpc"
  valgrind --tool=callgrind --callgrind-out-file="$OUT/callgrind.grpc.out" --dump-instr=no \
    "$OUT/hopping-gateway.grpc" --config "$W/conf/gw.toml" --listen "127.0.0.1:$GW_PORT" \
    --admin-listen "127.0.0.1:$GW_ADMIN" --workers 1 --access-log off >"$W/gw.log" 2>"$OUT/callgrind.grpc.valgrind.log" &
  TMAIN=$! PORT=$GW_PORT
  PIDS+=("$TMAIN")
  for _ in $(seq 1 600); do curl -fs -o /dev/null "http://127.0.0.1:$GW_ADMIN/readyz" && break; sleep 0.1; done
  check gateway
  load -n "$N" | grep -E '^(requests|status codes|finished)'
  stop_target
  python3 "$ROOT/bench/profile_tools.py" cg "$OUT/callgrind.grpc.out" "$((N + 1))" self "" 30
  log "profile in $OUT/callgrind.grpc.out ($((N + 1)) calls with the check)"
  exit 0
fi

if [ "${1:-}" = syscalls ]; then
  # `bench/h2-grpc.sh syscalls [calls]`: per target, after the warm-up, `strace -c -f` and
  # `perf stat -e context-switches,task-clock` attached to the proxy's pids over a fixed number of
  # calls (20,000): syscalls and context switches per call, kernel work included in the CPU figure.
  N=${2:-20000}
  ticks_split() { local p; for p in "$@"; do awk '{print $14, $15}' "/proc/$p/stat"; done | awk '{u += $1; s += $2} END {print u, s}'; }
  for t in "${TARGETS[@]}"; do
    start_target "$t"
    check "$t"
    load -n 2000 >/dev/null
    pids=$(for p in $TPIDS; do ls "/proc/$p/task"; done | paste -sd, -)
    # perf alone first (strace's stops would add switches of their own), then strace.
    perf stat -e context-switches,task-clock -x, -o "$W/perf.$t" -p "$pids" 2>/dev/null &
    ppid=$!
    sleep 0.5
    # shellcheck disable=SC2086 # TPIDS: a list of pids
    u0=$(ticks_split $TPIDS)
    load -n "$N" | grep -E '^requests' >&2
    # shellcheck disable=SC2086
    u1=$(ticks_split $TPIDS)
    kill -INT "$ppid"
    wait "$ppid" 2>/dev/null || true
    strace -c -f -o "$W/strace.$t" -p "$pids" 2>/dev/null &
    spid=$!
    sleep 1
    load -n "$N" | grep -E '^requests' >&2
    kill -INT "$spid"
    wait "$spid" 2>/dev/null || true
    stop_target
    log "$t: per call over $N calls"
    awk -v n="$N" '$1 ~ /^[0-9.]+$/ && NF >= 5 {c = $4; name = $NF; if (name != "total") printf "  %-16s %8.3f\n", name, c / n}
      $NF == "total" {printf "  %-16s %8.3f\n", "syscalls", $4 / n}' "$W/strace.$t" >&2
    awk -F, -v n="$N" '$3 == "context-switches" {printf "  context-switches %8.3f\n", $1 / n}
      $3 ~ /task-clock/ {printf "  task-clock µs    %8.3f\n", $1 * 1000 / n}' "$W/perf.$t" >&2
    awk -v a="$u0" -v b="$u1" -v n="$N" -v hz="$CLK_TCK" 'BEGIN {split(a, x, " "); split(b, y, " ");
      printf "  user µs          %8.3f\n  system µs        %8.3f\n", (y[1] - x[1]) / hz * 1e6 / n, (y[2] - x[2]) / hz * 1e6 / n}' >&2
  done
  exit 0
fi

log "work dir $W; proxies on cpu $PCPU, h2load and node on cpu $LCPU; $ROUNDS rounds x ${SECS}s"
for r in $(seq 1 "$ROUNDS"); do
  for t in "${TARGETS[@]}"; do
    start_target "$t"
    check "$t"
    load -n 2000 >/dev/null # warm-up: connections, upstream pool
    # shellcheck disable=SC2086 # TPIDS: a list of pids
    c0=$(cpu_ticks $TPIDS)
    load -D "$SECS" >"$W/h2load.$t.$r" 2>&1 || die "h2load against $t failed: $(tail -3 "$W/h2load.$t.$r")"
    # shellcheck disable=SC2086
    c1=$(cpu_ticks $TPIDS)
    # "requests: T total, S started, D done, OK succeeded, F failed, E errored, X timeout" and
    # "status codes: N 2xx, A 3xx, B 4xx, C 5xx" (a call cut by the end of -D has its status counted
    # but is not done): calls = succeeded (status < 400, complete) minus 3xx; the rest is "not 2xx".
    read -r ok bad <<<"$(awk '/^requests:/ {s = $8; f = $10 + $12 + $14}
      /^status codes:/ {gsub(",", ""); r = $5; e = $7 + $9}
      END {print s - r, f + r + e}' "$W/h2load.$t.$r")"
    rps=$(awk '/^finished in/ {gsub(",", ""); print $4}' "$W/h2load.$t.$r")
    [ "${ok:-0}" -gt 0 ] || die "no 2xx from $t: $(cat "$W/h2load.$t.$r")"
    us=$(awk -v d=$((c1 - c0)) -v n="$ok" -v hz="$CLK_TCK" 'BEGIN {printf "%.2f", d / hz * 1e6 / n}')
    emit "$t" "$r" grpc.calls "$ok"
    emit "$t" "$r" grpc.failed "$bad"
    emit "$t" "$r" grpc.cpu_us "$us"
    emit "$t" "$r" grpc.rps "$rps"
    log "round $r $t: $ok calls (${rps} calls/s), $us µs CPU per call, $bad not 2xx"
    stop_target
  done
done

if [ -z "${BENCH_RAW:-}" ]; then
  python3 - "$W/raw.tsv" <<'PY'
import collections, statistics, sys
v = collections.defaultdict(list)
for line in open(sys.argv[1]):
    t, r, k, x = line.rstrip("\n").split("\t")
    v[(t, k)].append(float(x))
targets = list(dict.fromkeys(t for t, _ in v))
print("| target | CPU µs/call | calls/s | not 2xx |")
print("|---|---:|---:|---:|")
for t in targets:
    m = lambda k: statistics.median(v[(t, k)])
    print(f"| {t} | {m('grpc.cpu_us'):.2f} | {m('grpc.rps'):,.0f} | {sum(v[(t, 'grpc.failed')]):.0f} |")
PY
fi
