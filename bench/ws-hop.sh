#!/usr/bin/env bash
# Hop of every idle WebSocket after a kill: two mock-backend nodes (node-1, node-2), the
# gateway with the bench settings (`--workers 1 --access-log off`) and a route in
# `websocket = "hop"` mode, and the `wsload` client in hop mode: it opens WS_HOP_CONNS idle sockets
# (about half land on node-1), sends `kill -9` to node-1's process, and times each socket's hop
# (the next hello, from node-2, with `hopped_from: node-1`) from the kill. Prints wsload's JSON:
# sockets on node-1, hopped, closed (should be 0), hop_ms p50/p99/max, all_hopped_ms, and the CPU
# time of [gateway, node-2] from the kill to the last hop (cpu_ms_during_hops).
#
#   make build dist && \
#   cargo build --release -p integration-tests --features bench --example wsload
#   bench/ws-hop.sh            # WS_HOP_CONNS=10000 by default (capped by the open-files limit)
#
# WS_HOP_PROFILE=callgrind (with a small WS_HOP_CONNS, e.g. 500: the gateway runs ~50 times slower
# and a socket not re-dialled within 5 s gets a reconnect hint) runs the gateway under callgrind
# with instrumentation switched on only once every socket is open, and dumps the counts when the
# last hop is timed: the storm alone, for `bench/profile_tools.py cg FILE <hops> incl 'internal::'`.
# WS_HOP_PROFILE=perf records `perf record -g` of the gateway and node-2 over the same window. The output goes
# to WS_HOP_PROFILE_OUT (default target/bench-profile). WS_HOP_PROFILE=strace counts the gateway's
# system calls (`strace -c`) over that window. The machine-wide TcpExtListenOverflows
# counter (nstat) is read before the kill and after the last hop (other jobs on the machine count too).
set -euo pipefail
W_PREFIX=hopgw-wshop
# shellcheck source=bench/ws-common.sh
. "$(dirname "$0")/ws-common.sh"
# The gateway holds two sockets per WebSocket (the client holds one, each node its share).
NOFILE=$(ulimit -n); [ "$NOFILE" = unlimited ] && NOFILE=1048576
CONNS=${WS_HOP_CONNS:-10000}
CAP=$(((NOFILE - 200) / 2))
[ "$CONNS" -gt "$CAP" ] && CONNS=$CAP
N1_PORT=$(free_port); N2_PORT=$(free_port)
"$BIN/mock-backend" "$N1_PORT" node-1 >"$W/node-1.log" 2>&1 & N1=$!; PIDS+=("$N1"); disown "$N1"  # no "Killed" job notice
"$BIN/mock-backend" "$N2_PORT" node-2 >"$W/node-2.log" 2>&1 & N2=$!; PIDS+=("$N2")
wait_http "http://127.0.0.1:$N1_PORT/health"
wait_http "http://127.0.0.1:$N2_PORT/health"
PROFILE=${WS_HOP_PROFILE:-}
OUT=${WS_HOP_PROFILE_OUT:-$ROOT/target/bench-profile}
SETTLE_MS=1500
case $PROFILE in
  "") ;;
  callgrind)
    mkdir -p "$OUT"
    GW_WRAP="valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=$OUT/ws-hop.callgrind.%p"
    SETTLE_MS=4000 ;;
  perf|strace) mkdir -p "$OUT"; SETTLE_MS=3000 ;;
  *) echo "WS_HOP_PROFILE must be callgrind, perf or strace" >&2; exit 2 ;;
esac
overflows() { nstat -az TcpExtListenOverflows 2>/dev/null | awk '/ListenOverflows/ {print $2}'; }
start_gateway "node-1=$N1_PORT node-2=$N2_PORT" 'websocket = "hop"'
# With a profiler: once every socket is open (the gateway's websocket gauge), switch it on.
if [ -n "$PROFILE" ]; then
  (
    until curl -fsS "http://127.0.0.1:$GW_ADMIN/metrics" 2>/dev/null |
      awk -v n="$CONNS" '/^gateway_active_connections\{protocol="websocket"\}/ {ok = $2 >= n} END {exit !ok}'; do
      sleep 0.1
    done
    case $PROFILE in
      callgrind) callgrind_control -i on "$GW" >/dev/null ;;
      perf) perf record -g -p "$GW,$N2" -o "$OUT/ws-hop.perf.data" 2>"$W/perf.log" & echo $! >"$W/perf.pid" ;;
      strace) strace -c -f -p "$GW" -o "$OUT/ws-hop.strace" 2>"$W/strace.log" & echo $! >"$W/perf.pid"; sleep 0.5 ;;
    esac
    overflows >"$W/overflows.before"
  ) &
  WATCH=$!
else
  overflows >"$W/overflows.before"
fi
HOLD_MS=0; [ -n "$PROFILE" ] && HOLD_MS=5000
"$BIN/examples/wsload" --url "ws://127.0.0.1:$GW_PORT/ws" --steps "$CONNS" \
  --hop-kill "$N1" --hop-node node-1 --hop-wait-secs "${WS_HOP_WAIT_SECS:-60}" \
  --pid "$GW" --pid "$N2" --concurrency 128 --settle-ms "$SETTLE_MS" --hold-ms "$HOLD_MS" >"$W/wsload.json" &
LOAD=$!
# The JSON is printed when the last hop is timed; the sockets stay open --hold-ms longer, so a
# profile stops before their teardown.
until [ -s "$W/wsload.json" ] || ! kill -0 "$LOAD" 2>/dev/null; do sleep 0.05; done
echo "TcpExtListenOverflows (machine-wide) during the run: $(($(overflows) - $(cat "$W/overflows.before")))" >&2
# shellcheck disable=SC2012 # ls -t: the newest of the files valgrind names by pid
case $PROFILE in
  callgrind) wait "$WATCH"; callgrind_control -d "$GW" >/dev/null; callgrind_control -i off "$GW" >/dev/null
    echo "callgrind counts of the storm: $(ls -t "$OUT"/ws-hop.callgrind."$GW".* | head -1)" >&2 ;;
  perf|strace) wait "$WATCH"; kill -INT "$(cat "$W/perf.pid")"; sleep 2; echo "$PROFILE output: $(ls "$OUT"/ws-hop."$PROFILE"*)" >&2 ;;
esac
wait "$LOAD"
cat "$W/wsload.json"
# The gateway's own view (stderr): hops counted and `hopping_latency_seconds` (failure seen ->
# served again), and how many sockets fell back to a reconnect hint.
curl -fsS "http://127.0.0.1:$GW_ADMIN/metrics" | grep -E '^hopping_(count_total|latency_seconds_(bucket|sum|count))' >&2 || true
echo "gateway log lines \"hop deadline\" (hint fallbacks): $(grep -c 'hop deadline' "$W/gw.log" || true)" >&2
# WS_HOP_KEEP_LOG=FILE keeps the gateway's log.
[ -n "${WS_HOP_KEEP_LOG:-}" ] && cp "$W/gw.log" "$WS_HOP_KEEP_LOG"
true
