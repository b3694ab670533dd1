#!/usr/bin/env bash
# `make bench`: hopping-gateway side by side with nginx and HAProxy (see bench/README.md).
#
# One run, interleaved rounds (direct, gateway, nginx, HAProxy, ... then again), medians per figure.
# Each proxy (the gateway, nginx, HAProxy, and Pingora: pingora-proxy with a round-robin LoadBalancer,
# bench/pingora) is pinned to one core with one worker; the load generator, the backend and redis-server
# share the other core. Figures: max req/s at BENCH_CONNS keep-alive connections (wrk), p50/p99/p99.9
# at a fixed BENCH_RATE req/s (oha), proxy CPU µs per request (utime+stime from /proc/<pid>/stat over
# the requests served), peak RSS (VmHWM), upstream connection reuse (backend nginx stub_status:
# accepts vs requests), WebSocket RSS per idle connection plus echo p99 (bench wsload client), and
# proxy CPU per WebSocket message in a closed loop (bench/ws-msg.sh).
#
# Env: BENCH_SECONDS (10) per measurement, BENCH_ROUNDS (3), BENCH_RATE (2000), BENCH_CONNS (64),
# BENCH_RATE_CONNS (16), BENCH_WS_STEPS ("2000,10000", capped by the open-files limit), BENCH_WS_RATE
# (1000 echo messages/s), BENCH_WS_CONCURRENCY (128 handshakes in flight), BENCH_WS (1; 0 skips the WebSocket part), BENCH_NOTE (a line for the report),
# BENCH_PROXY_CPU (1), BENCH_LOAD_CPU (0), BENCH_KEEP (1 keeps the work directory), BENCH_UPDATE_README (1),
# BENCH_GRPC (1; 0 skips the h2/gRPC row, bench/h2-grpc.sh).
# Quick run: BENCH_SECONDS=3 BENCH_ROUNDS=1 make bench
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
bench_settings

RATE=${BENCH_RATE:-2000}
CONNS=${BENCH_CONNS:-64}
RATE_CONNS=${BENCH_RATE_CONNS:-16}
WS=${BENCH_WS:-1}
WS_STEPS=${BENCH_WS_STEPS:-2000,10000}
WS_RATE=${BENCH_WS_RATE:-1000}
WS_MSG_DESC="${WS_MSG_CONNS:-64} sockets × ${WS_MSG_INFLIGHT:-4} in flight, ${WS_MSG_BYTES:-64} B"
CONN_ID=bench-conn-0001

# ---------------------------------------------------------------- tools (installed when missing)
need_apt=()
command -v nginx >/dev/null 2>&1 || need_apt+=(nginx)
command -v haproxy >/dev/null 2>&1 || need_apt+=(haproxy)
command -v wrk >/dev/null 2>&1 || need_apt+=(wrk)
command -v redis-server >/dev/null 2>&1 || need_apt+=(redis-server)
command -v taskset >/dev/null 2>&1 || need_apt+=(util-linux)
command -v python3 >/dev/null 2>&1 || need_apt+=(python3)
command -v curl >/dev/null 2>&1 || need_apt+=(curl)
# The Pingora row's build (bench/pingora, no TLS features so no OpenSSL): a C compiler for zstd-sys and cmake for
# libz-ng-sys (zlib-ng).
command -v cc >/dev/null 2>&1 || need_apt+=(build-essential)
command -v cmake >/dev/null 2>&1 || need_apt+=(cmake)
command -v h2load >/dev/null 2>&1 || need_apt+=(nghttp2-client)
if [ ${#need_apt[@]} -gt 0 ]; then
  log "installing ${need_apt[*]} with apt-get"
  SUDO=; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
if ! command -v oha >/dev/null 2>&1; then
  log "installing oha (cargo install oha --locked; compiles for a few minutes)"
  cargo install oha --locked
fi

log "building the wsload client and the harness throughput figure (tests/examples/)"
cargo build --release -q -p integration-tests --features bench --example wsload --example throughput
# Its own workspace (not a member of the gateway's) and target directory: only make bench compiles Pingora.
log "building the Pingora row's proxy (bench/pingora; the first build compiles Pingora for a few minutes)"
cargo build --release -q --manifest-path "$ROOT/bench/pingora/Cargo.toml" --target-dir "$ROOT/target/pingora"
PINGORA=$ROOT/target/pingora/release/bench-pingora
PINGORA_VERSION=$(awk '$0 == "name = \"pingora\"" {getline; gsub(/[^0-9.]/, ""); print; exit}' "$ROOT/bench/pingora/Cargo.lock" 2>/dev/null || true)
GW=$ROOT/target/dist/hopping-gateway
MOCK=$ROOT/target/release/mock-backend
WSLOAD=$ROOT/target/release/examples/wsload
{ [ -x "$GW" ] && [ -x "$MOCK" ] && [ -x "$WSLOAD" ] && [ -x "$PINGORA" ]; } || die "binaries missing: run make build dist"

# ---------------------------------------------------------------- work dir (bench/lib.sh stops every process on exit)
bench_workdir hopgw-bench
RAW=$W/raw.tsv
: >"$RAW"

# Sum over the pids of a /proc/<pid>/status field (KiB); CPU ticks are cpu_ticks (bench/lib.sh).
status_kib() { local f=$1 t=0 p; shift; for p in "$@"; do t=$((t + $(awk -v f="$f:" '$1 == f {print $2}' "/proc/$p/status"))); done; echo $t; }

# Backend nginx stub_status: "accepts requests" (the stub call itself is subtracted by the report).
stub() { curl -fs --max-time 2 "http://127.0.0.1:$BACKEND_PORT/stub" | awk 'NR == 3 {print $1, $3}'; }

# Commands redis-server has processed so far (the INFO call itself counts one).
redis_cmds() { redis-cli -p "$REDIS_PORT" info stats | tr -d '\r' | awk -F: '$1 == "total_commands_processed" {print $2}'; }

# Open-files limit caps the WebSocket steps: a proxy holds two sockets per connection.
NOFILE=$(ulimit -n)
[ "$(ulimit -Hn)" != unlimited ] && [ "$(ulimit -Hn)" -gt "$NOFILE" ] && ulimit -n "$(ulimit -Hn)" && NOFILE=$(ulimit -n)
[ "$NOFILE" = unlimited ] && NOFILE=1048576
WS_CAP=$(((NOFILE - 200) / 2))
WS_STEPS=$(echo "$WS_STEPS" | tr ',' '\n' | awk -v cap="$WS_CAP" '{print ($1 > cap ? cap : $1)}' | paste -sd, -)

read -r BACKEND_PORT GW_PORT GW_ADMIN GWLOG_PORT GWLOG_ADMIN GWR_PORT GWR_ADMIN NGINX_PORT HAPROXY_PORT REDIS_PORT PINGORA_PORT <<<"$(free_ports 11)"

# ---------------------------------------------------------------- configs
backend_conf() {
  mkdir -p "$W/backend"
  {
    nginx_head "$W/backend" 16384
    cat <<EOF
  keepalive_requests 100000000;
  keepalive_timeout 600s;
  server {
    listen 127.0.0.1:$BACKEND_PORT backlog=4096;
    location = /stub { stub_status; }
    location / { default_type text/plain; return 200 "hello from the bench backend\n"; }
  }
}
EOF
  } >"$W/backend/nginx.conf"
}

start_nginx() { # -> NGINX_PIDS (master + worker)
  start nginx-proxy "$PCPU" nginx -p "$W/nginx-proxy" -e "$W/nginx-proxy/error.log" -c "$W/nginx-proxy/nginx.conf"
  NGINX_MASTER=$STARTED
  wait_tcp "$NGINX_PORT" nginx
  NGINX_PIDS="$NGINX_MASTER $(pgrep -P "$NGINX_MASTER" | paste -sd' ' -)"
}
start_haproxy() {
  start haproxy "$PCPU" haproxy -db -f "$W/haproxy.cfg"
  HAPROXY_PID=$STARTED
  wait_tcp "$HAPROXY_PORT" haproxy
}
# Pingora: one service thread, keep-alive pool to the node, X-Forwarded-For appended (bench/pingora/src/main.rs).
start_pingora() { # UPSTREAM_PORT -> PINGORA_PID
  start pingora "$PCPU" "$PINGORA" "127.0.0.1:$PINGORA_PORT" "127.0.0.1:$1"
  PINGORA_PID=$STARTED
  wait_tcp "$PINGORA_PORT" pingora
}
start_gw() { # NAME PORT ADMIN CONF EXTRA... -> STARTED
  local name=$1 port=$2 admin=$3 conf=$4
  shift 4
  start "$name" "$PCPU" "$GW" --config "$conf" --listen "127.0.0.1:$port" --admin-listen "127.0.0.1:$admin" --workers 1 "$@"
  wait_http "http://127.0.0.1:$admin/readyz" "$name"
}

# ---------------------------------------------------------------- HTTP phase
log "work dir $W; proxies on cpu $PCPU, load+backend on cpu $LCPU; ${ROUNDS} rounds x ${SECS}s; WebSocket steps $WS_STEPS"
backend_conf
start backend "$LCPU" nginx -p "$W/backend" -e "$W/backend/error.log" -c "$W/backend/nginx.conf"
wait_http "http://127.0.0.1:$BACKEND_PORT/" backend
start redis "$LCPU" redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no
wait_tcp "$REDIS_PORT" redis-server

gw_conf "$W/conf/gw.toml" "node-1=$BACKEND_PORT"
start_gw gw "$GW_PORT" "$GW_ADMIN" "$W/conf/gw.toml" --access-log off
GW_PID=$STARTED
# The access-log gateway writes its log to a file (appended; truncated after each measurement).
taskset -c "$PCPU" "$GW" --config "$W/conf/gw.toml" --listen "127.0.0.1:$GWLOG_PORT" --admin-listen "127.0.0.1:$GWLOG_ADMIN" \
  --workers 1 --access-log on >>"$W/gw-access.log" 2>&1 &
GWLOG_PID=$!
PIDS+=("$GWLOG_PID")
wait_http "http://127.0.0.1:$GWLOG_ADMIN/readyz" gw-accesslog
start_gw gw-redis "$GWR_PORT" "$GWR_ADMIN" "$W/conf/gw.toml" --access-log off --redis-url "redis://127.0.0.1:$REDIS_PORT/0"
GWR_PID=$STARTED
nginx_proxy_conf "$W/nginx-proxy" "$NGINX_PORT" "$BACKEND_PORT" 0 "$NOFILE"
start_nginx
haproxy_conf "$W/haproxy.cfg" "$HAPROXY_PORT" "$BACKEND_PORT" $(((NOFILE - 100) / 2))
start_haproxy
start_pingora "$BACKEND_PORT"

# name | port | pids | extra header
TARGETS=(direct gateway gateway+accesslog gateway+connid-memory gateway+connid-redis nginx haproxy pingora)
declare -A T_PORT=([direct]=$BACKEND_PORT [gateway]=$GW_PORT [gateway+accesslog]=$GWLOG_PORT
  [gateway+connid-memory]=$GW_PORT [gateway+connid-redis]=$GWR_PORT [nginx]=$NGINX_PORT [haproxy]=$HAPROXY_PORT [pingora]=$PINGORA_PORT)
declare -A T_PIDS=([direct]="" [gateway]=$GW_PID [gateway+accesslog]=$GWLOG_PID
  [gateway+connid-memory]=$GW_PID [gateway+connid-redis]=$GWR_PID [nginx]=$NGINX_PIDS [haproxy]=$HAPROXY_PID [pingora]=$PINGORA_PID)
declare -A T_HDR=([gateway+connid-memory]=1 [gateway+connid-redis]=1)

for t in "${TARGETS[@]}"; do
  code=$(curl -s -o /dev/null -w '%{http_code}' -H "X-Conn-Id: $CONN_ID" "http://127.0.0.1:${T_PORT[$t]}/")
  [ "$code" = 200 ] || die "$t answers $code instead of 200 (logs in $W)"
done
log "all targets answer 200; warming up"
for t in "${TARGETS[@]}"; do
  hdr=(); [ -n "${T_HDR[$t]:-}" ] && hdr=(-H "X-Conn-Id: $CONN_ID")
  taskset -c "$LCPU" wrk -t1 -c"$CONNS" -d1s "${hdr[@]}" "http://127.0.0.1:${T_PORT[$t]}/" >/dev/null
done

emit() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$RAW"; } # target round metric value

# measure KIND TARGET ROUND: one wrk (max) or oha (fixed rate) run with CPU and backend deltas.
measure() {
  local kind=$1 t=$2 r=$3
  local url="http://127.0.0.1:${T_PORT[$t]}/" pids=${T_PIDS[$t]} out=$W/out.$kind
  local hdr=() c0=0 c1=0 s0 s1
  [ -n "${T_HDR[$t]:-}" ] && hdr=(-H "X-Conn-Id: $CONN_ID")
  local rc0=0 rc1=0
  [ "$t" = gateway+connid-redis ] && rc0=$(redis_cmds)
  s0=$(stub)
  # shellcheck disable=SC2086
  [ -n "$pids" ] && c0=$(cpu_ticks $pids)
  if [ "$kind" = max ]; then
    taskset -c "$LCPU" wrk -t1 -c"$CONNS" -d"${SECS}s" "${hdr[@]}" "$url" >"$out"
  else
    taskset -c "$LCPU" oha -z "${SECS}s" -w -q "$RATE" -c "$RATE_CONNS" --worker-threads 1 --no-tui --output-format json "${hdr[@]}" "$url" >"$out"
  fi
  # shellcheck disable=SC2086
  [ -n "$pids" ] && c1=$(cpu_ticks $pids)
  s1=$(stub)
  [ "$t" = gateway+connid-redis ] && rc1=$(redis_cmds) && emit "$t" "$r" "$kind.redis_cmds" $((rc1 - rc0 - 1))
  emit "$t" "$r" "$kind.cpu_ticks" $((c1 - c0))
  emit "$t" "$r" "$kind.backend" "$s0 $s1"
  emit "$t" "$r" "$kind.out" "$(base64 -w0 <"$out")"
  [ "$t" = gateway+accesslog ] && truncate -s 0 "$W/gw-access.log"
  return 0
}

for r in $(seq 1 "$ROUNDS"); do
  for t in "${TARGETS[@]}"; do
    log "round $r/$ROUNDS max  $t"
    measure max "$t" "$r"
  done
  for t in "${TARGETS[@]}"; do
    log "round $r/$ROUNDS rate $t"
    measure rate "$t" "$r"
  done
done
for t in "${TARGETS[@]}"; do
  pids=${T_PIDS[$t]}
  # shellcheck disable=SC2086
  [ -n "$pids" ] && emit "$t" 0 peak_rss_kib "$(status_kib VmHWM $pids)"
done

# ---------------------------------------------------------------- WebSocket phase (fresh proxies)
for p in "$NGINX_MASTER" "$HAPROXY_PID" "$PINGORA_PID" "$GW_PID" "$GWLOG_PID" "$GWR_PID"; do stop "$p"; done
if [ "$WS" = 1 ]; then
  ws_run() { # TARGET URL PIDS...
    local t=$1 url=$2
    shift 2
    local pidargs=() p
    for p in "$@"; do pidargs+=(--pid "$p"); done
    log "websocket $t: steps $WS_STEPS"
    taskset -c "$LCPU" "$WSLOAD" --url "$url" --steps "$WS_STEPS" --echo-secs "$SECS" --echo-rate "$WS_RATE" \
      --concurrency "${BENCH_WS_CONCURRENCY:-128}" \
      "${pidargs[@]}" >"$W/ws-$t.json" 2>"$W/ws-$t.err" || log "wsload against $t failed: $(tail -1 "$W/ws-$t.err")"
    emit "$t" 0 ws "$(base64 -w0 <"$W/ws-$t.json")"
  }
  ws_node() { # -> STARTED (a fresh mock-backend per target, so TIME_WAIT and state never carry over)
    WS_NODE_PORT=$(free_ports 1)
    start "ws-node-$1" "$LCPU" "$MOCK" "$WS_NODE_PORT" "ws-$1"
    wait_http "http://127.0.0.1:$WS_NODE_PORT/health" "mock-backend ws-$1"
  }
  ws_node direct
  ws_run direct "ws://127.0.0.1:$WS_NODE_PORT/ws"
  stop "$STARTED"

  ws_node gateway; node=$STARTED
  gw_conf "$W/conf/gw-ws.toml" "node-1=$WS_NODE_PORT"
  start_gw gw-ws "$GW_PORT" "$GW_ADMIN" "$W/conf/gw-ws.toml" --access-log off
  ws_run gateway "ws://127.0.0.1:$GW_PORT/ws" "$STARTED"
  stop "$STARTED"; stop "$node"

  ws_node nginx; node=$STARTED
  nginx_proxy_conf "$W/nginx-proxy" "$NGINX_PORT" "$WS_NODE_PORT" 1 "$NOFILE"
  start_nginx
  # shellcheck disable=SC2086
  ws_run nginx "ws://127.0.0.1:$NGINX_PORT/ws" $NGINX_PIDS
  stop "$NGINX_MASTER"; stop "$node"

  ws_node haproxy; node=$STARTED
  haproxy_conf "$W/haproxy.cfg" "$HAPROXY_PORT" "$WS_NODE_PORT" $(((NOFILE - 100) / 2))
  start_haproxy
  ws_run haproxy "ws://127.0.0.1:$HAPROXY_PORT/ws" "$HAPROXY_PID"
  stop "$HAPROXY_PID"; stop "$node"

  # pingora-proxy relays an upgraded connection's bytes itself (no frame parsing).
  ws_node pingora; node=$STARTED
  start_pingora "$WS_NODE_PORT"
  ws_run pingora "ws://127.0.0.1:$PINGORA_PORT/ws" "$PINGORA_PID"
  stop "$PINGORA_PID"; stop "$node"
  # CPU per WebSocket message: bench/ws-msg.sh starts its own node and proxies, same
  # pinning and rounds; each line is "target round wsload-JSON".
  log "websocket messages: $WS_MSG_DESC, $ROUNDS rounds x ${SECS}s (bench/ws-msg.sh)"
  WS_MSG_SECS=$SECS WS_MSG_ROUNDS=$ROUNDS WS_MSG_PROXY_CPU=$PCPU WS_MSG_LOAD_CPU=$LCPU WS_MSG_GW=$GW \
    "$ROOT/bench/ws-msg.sh" >"$W/ws-msg.tsv" 2>"$W/ws-msg.err" || log "ws-msg.sh failed: $(tail -1 "$W/ws-msg.err")"
  while IFS=$'\t' read -r t r js; do emit "$t" "$r" wsmsg "$(printf '%s' "$js" | base64 -w0)"; done <"$W/ws-msg.tsv"
fi

# ---------------------------------------------------------------- h2/gRPC row (BENCH_GRPC=0 skips it)
if [ "${BENCH_GRPC:-1}" = 1 ]; then
  if command -v h2load >/dev/null 2>&1; then
    BENCH_RAW=$RAW BENCH_SECONDS=$SECS BENCH_ROUNDS=$ROUNDS "$ROOT/bench/h2-grpc.sh" || log "h2/gRPC row failed"
  else
    log "h2load missing (apt-get install nghttp2-client): no h2/gRPC row"
  fi
fi

# ---------------------------------------------------------------- report
versions="nginx $(nginx -v 2>&1 | sed 's/.*nginx\///'), HAProxy $(haproxy -v | head -1 | awk '{print $3}'), Pingora ${PINGORA_VERSION:-?}, $(wrk -v 2>&1 | head -1 | awk '{print $1, $2}'), $(oha --version | head -1)"
python3 "$ROOT/bench/report.py" --raw "$RAW" --out "$ROOT/bench/results/latest.md" \
  --readme "$( [ "${BENCH_UPDATE_README:-1}" = 1 ] && echo "$ROOT/bench/README.md" )" \
  --seconds "$SECS" --rounds "$ROUNDS" --rate "$RATE" --conns "$CONNS" --rate-conns "$RATE_CONNS" \
  --ws-steps "$WS_STEPS" --ws-rate "$WS_RATE" --ws-msg "$WS_MSG_DESC" --clk-tck "$CLK_TCK" --versions "$versions" --note "${BENCH_NOTE:-}"
log "wrote bench/results/latest.md"
cat "$ROOT/bench/results/latest.md"

# Direct vs gateway keep-alive req/s through the test harness (tests/examples/throughput.rs; unpinned,
# a quick cross-check of the wrk rows, not part of the table).
HOPGW_PREBUILT=1 "$ROOT/target/release/examples/throughput" --secs "$SECS" >&2 || log "throughput example failed"

# TLS rows (bench/tls.sh): BENCH_TLS=0 skips them.
if [ "${BENCH_TLS:-1}" = 1 ]; then "$ROOT/bench/tls.sh"; fi
