#!/usr/bin/env bash
# CPU per WebSocket message: the gateway, nginx and HAProxy relaying a closed loop of
# small messages, configured as bench/run.sh configures them for its WebSocket rows. One mock-backend
# node (`/ws` says hello, then echoes) and the `wsload` client in message-rate mode share core
# WS_MSG_LOAD_CPU (0); each proxy runs on core WS_MSG_PROXY_CPU (1) with one worker (gateway
# `--workers 1 --access-log off`, nginx `worker_processes 1`, HAProxy `nbthread 1`). All are started
# once and measured in interleaved rounds (direct, gateway, nginx, HAProxy, then again).
#
# A message is one client message relayed to the node plus its echo relayed back (one round trip,
# two frames through the proxy); CPU µs per message = utime+stime of the proxy's processes
# (/proc/<pid>/stat, nginx master + worker) over the measured window / round trips in that window.
#
# Env: WS_MSG_SECS (10) per measurement, WS_MSG_ROUNDS (3), WS_MSG_CONNS (64 sockets),
# WS_MSG_INFLIGHT (4 messages in flight per socket), WS_MSG_BYTES (64), WS_MSG_TARGETS
# ("direct gateway nginx haproxy"), WS_MSG_PROXY_CPU (1), WS_MSG_LOAD_CPU (0), WS_MSG_GW (the gateway
# binary, default target/dist/hopping-gateway), WS_MSG_GW_BASE (a second gateway binary, measured
# as target "gateway-base" when listed in WS_MSG_TARGETS: before/after in one run), WS_MSG_PROFILE (strace or perf: attach
# `strace -c -f` or `perf stat -e context-switches,task-clock` to each proxy for its measurement;
# the summary goes to stderr, divided by every round trip wsload saw, warm-up included), WS_MSG_WRAP
# (a command prefix for the gateway, e.g. "valgrind --tool=callgrind --callgrind-out-file=F": its
# readiness wait is then 120 s; the gateway is stopped with SIGTERM at the end, so the profile is
# written; bench/README.md "Profiling" shows the two-run difference used per message).
# Output: one line per measurement on stdout, "TARGET<TAB>ROUND<TAB>wsload JSON"; a summary table
# (medians over rounds) on stderr.
#
#   make build dist && \
#   cargo build --release -p integration-tests --features bench --example wsload
#   bench/ws-msg.sh            # bench/run.sh runs it for the "WebSocket messages" rows
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
export BENCH_TAG=ws-msg
SECS=${WS_MSG_SECS:-10}
ROUNDS=${WS_MSG_ROUNDS:-3}
CONNS=${WS_MSG_CONNS:-64}
INFLIGHT=${WS_MSG_INFLIGHT:-4}
BYTES=${WS_MSG_BYTES:-64}
TARGETS=${WS_MSG_TARGETS:-direct gateway nginx haproxy}
PCPU=${WS_MSG_PROXY_CPU:-1}
LCPU=${WS_MSG_LOAD_CPU:-0}
GW=${WS_MSG_GW:-$ROOT/target/dist/hopping-gateway}
MOCK=$ROOT/target/release/mock-backend
WSLOAD=$ROOT/target/release/examples/wsload
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
export PATH="$PATH:/usr/sbin"
bench_workdir hopgw-wsmsg
{ [ -x "$GW" ] && [ -x "$MOCK" ] && [ -x "$WSLOAD" ]; } || die "binaries missing: see the build commands at the top of $0"
NOFILE=$(ulimit -Hn); [ "$NOFILE" = unlimited ] && NOFILE=1048576
ulimit -n "$NOFILE"

read -r NODE_PORT GW_PORT GW_ADMIN NGINX_PORT HAPROXY_PORT GWB_PORT GWB_ADMIN <<<"$(free_ports 7)"
start node "$LCPU" "$MOCK" "$NODE_PORT" ws-node
wait_http "http://127.0.0.1:$NODE_PORT/health" mock-backend

declare -A PORT=([direct]=$NODE_PORT [gateway]=$GW_PORT [gateway-base]=$GWB_PORT [nginx]=$NGINX_PORT [haproxy]=$HAPROXY_PORT)
declare -A TPIDS=([direct]="")
for t in $TARGETS; do
  case $t in
    direct) ;;
    gateway)
      gw_conf "$W/conf/gw.toml" "node-1=$NODE_PORT"
      # shellcheck disable=SC2086
      start gateway "$PCPU" ${WS_MSG_WRAP:-} "$GW" --config "$W/conf/gw.toml" --listen "127.0.0.1:$GW_PORT" \
        --admin-listen "127.0.0.1:$GW_ADMIN" --workers 1 --access-log off
      TPIDS[gateway]=$STARTED
      GW_PID=$STARTED
      for _ in $(seq 1 1200); do curl -fs -o /dev/null --max-time 1 "http://127.0.0.1:$GW_ADMIN/readyz" && break; sleep 0.1; done
      wait_http "http://127.0.0.1:$GW_ADMIN/readyz" gateway
      ;;
    gateway-base)
      [ -x "${WS_MSG_GW_BASE:-}" ] || die "gateway-base needs WS_MSG_GW_BASE (a gateway binary)"
      gw_conf "$W/conf-base/gw.toml" "node-1=$NODE_PORT"
      start gateway-base "$PCPU" "$WS_MSG_GW_BASE" --config "$W/conf-base/gw.toml" --listen "127.0.0.1:$GWB_PORT" \
        --admin-listen "127.0.0.1:$GWB_ADMIN" --workers 1 --access-log off
      TPIDS[gateway-base]=$STARTED
      wait_http "http://127.0.0.1:$GWB_ADMIN/readyz" gateway-base
      ;;
    nginx)
      # As bench/run.sh's WebSocket nginx: the upgrade pair passed on, long proxy timeouts.
      mkdir -p "$W/nginx"
      # As bench/run.sh's nginx in its WebSocket phase.
      nginx_proxy_conf "$W/nginx" "$NGINX_PORT" "$NODE_PORT" 1 "$NOFILE"
      start nginx "$PCPU" nginx -p "$W/nginx" -e "$W/nginx/error.log" -c "$W/nginx/nginx.conf"
      master=$STARTED
      wait_tcp "$NGINX_PORT" nginx
      TPIDS[nginx]="$master $(pgrep -P "$master" | paste -sd' ' -)"
      ;;
    haproxy)
      # As bench/run.sh's HAProxy (HTTP mode; an upgraded connection becomes a tunnel).
      haproxy_conf "$W/haproxy.cfg" "$HAPROXY_PORT" "$NODE_PORT" 4096
      start haproxy "$PCPU" haproxy -db -f "$W/haproxy.cfg"
      TPIDS[haproxy]=$STARTED
      wait_tcp "$HAPROXY_PORT" haproxy
      ;;
    *) die "unknown target $t (direct, gateway, nginx, haproxy)" ;;
  esac
done

# measure TARGET ROUND: one wsload message-rate run; prints its line on stdout.
measure() {
  local t=$1 r=$2 pidargs=() p prof=""
  for p in ${TPIDS[$t]}; do pidargs+=(--pid "$p"); done
  # shellcheck disable=SC2046,SC2086 # one -p per pid
  case ${WS_MSG_PROFILE:-} in
    strace) [ -n "${TPIDS[$t]}" ] && { strace -c -f -o "$W/prof.$t" $(printf -- '-p %s ' ${TPIDS[$t]}) & prof=$!; sleep 0.5; } ;;
    perf) [ -n "${TPIDS[$t]}" ] && { perf stat -e context-switches,task-clock -o "$W/prof.$t" -p "${TPIDS[$t]// /,}" & prof=$!; sleep 0.5; } ;;
  esac
  taskset -c "$LCPU" "$WSLOAD" --url "ws://127.0.0.1:${PORT[$t]}/ws" --msg-secs "$SECS" --msg-conns "$CONNS" \
    --msg-inflight "$INFLIGHT" --msg-bytes "$BYTES" --settle-ms 200 --concurrency 64 "${pidargs[@]}" \
    >"$W/out.json" 2>"$W/out.err" || log "wsload against $t failed: $(tail -1 "$W/out.err")"
  if [ -n "$prof" ]; then
    kill -INT "$prof" 2>/dev/null || true
    wait "$prof" 2>/dev/null || true
    log "$t ${WS_MSG_PROFILE}: round trips (all, warm-up included) $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["total_messages"])' "$W/out.json")"
    cat "$W/prof.$t" >&2
  fi
  printf '%s\t%s\t%s\n' "$t" "$r" "$(cat "$W/out.json")"
}

log "work dir $W; proxies on cpu $PCPU, node+wsload on cpu $LCPU; $ROUNDS rounds x ${SECS}s; $CONNS sockets x $INFLIGHT in flight, $BYTES B"
for r in $(seq 1 "$ROUNDS"); do
  for t in $TARGETS; do
    log "round $r/$ROUNDS $t"
    measure "$t" "$r" | tee -a "$W/all.tsv"
  done
done
python3 - "$W/all.tsv" >&2 <<'PY'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    t, _, js = line.rstrip("\n").split("\t", 2)
    rows.setdefault(t, []).append(json.loads(js))
def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None
print("| target | msgs/s | CPU µs/msg | echo p50 ms | p99 ms | errors |")
print("|---|---:|---:|---:|---:|---:|")
for t, rs in rows.items():
    f = lambda k: med([r.get(k) for r in rs])
    cpu = f("cpu_us_per_msg")
    print(f"| {t} | {f('msgs_per_sec'):.0f} | {'-' if cpu is None else f'{cpu:.2f}'} | {f('p50_ms')} | {f('p99_ms')} | {sum(r['errors'] for r in rs)} |")
PY
if [ -n "${WS_MSG_WRAP:-}" ] && [ -n "${GW_PID:-}" ]; then
  # Let the wrapped gateway write its profile before the work directory goes.
  kill -TERM "$GW_PID" 2>/dev/null || true
  wait "$GW_PID" 2>/dev/null || true
fi
