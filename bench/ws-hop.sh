#!/usr/bin/env bash
# Hop of every idle WebSocket after a kill (issue 7): two mock-backend nodes (node-1, node-2), the
# gateway with the bench settings (`--workers 1 --access-log off`) and a route in
# `websocket = "hop"` mode, and the `wsload` client in hop mode: it opens WS_HOP_CONNS idle sockets
# (about half land on node-1), sends `kill -9` to node-1's process, and times each socket's hop
# (the next hello, from node-2, with `hopped_from: node-1`) from the kill. Prints wsload's JSON:
# sockets on node-1, hopped, closed (should be 0), hop_ms p50/p99/max, all_hopped_ms, and the CPU
# time of [gateway, node-2] from the kill to the last hop (cpu_ms_during_hops).
#
#   cargo build --release --workspace && \
#   cargo build --release -p integration-tests --features bench --example wsload
#   bench/ws-hop.sh            # WS_HOP_CONNS=10000 by default (capped by the open-files limit)
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
start_gateway "node-1=$N1_PORT node-2=$N2_PORT" 'websocket = "hop"'
"$BIN/examples/wsload" --url "ws://127.0.0.1:$GW_PORT/ws" --steps "$CONNS" \
  --hop-kill "$N1" --hop-node node-1 --hop-wait-secs "${WS_HOP_WAIT_SECS:-60}" \
  --pid "$GW" --pid "$N2" --concurrency 128 --settle-ms 1500
# The gateway's own view (stderr): hops counted and `hopping_latency_seconds` (failure seen ->
# served again), and how many sockets fell back to a reconnect hint.
curl -fsS "http://127.0.0.1:$GW_ADMIN/metrics" | grep -E '^hopping_(count_total|latency_seconds_(bucket|sum|count))' >&2 || true
echo "gateway log lines \"hop deadline\" (hint fallbacks): $(grep -c 'hop deadline' "$W/gw.log" || true)" >&2
