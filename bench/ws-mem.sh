#!/usr/bin/env bash
# Quick RSS-per-idle-WebSocket measurement of the gateway alone (no nginx/HAProxy, no installs):
# a mock-backend node, a gateway with the bench settings (`--workers 1 --access-log off`), and the
# `wsload` client opening idle sockets in steps. Prints wsload's JSON (kib_per_conn per step).
# GW_WRAP="heaptrack -o /tmp/gw.heaptrack" runs the gateway under a profiler.
#
#   make build dist && \
#   cargo build --release -p integration-tests --features bench --example wsload
#   bench/ws-mem.sh            # WS_MEM_STEPS=2000 by default; e.g. WS_MEM_STEPS=2000,5000
set -euo pipefail
STEPS=${WS_MEM_STEPS:-2000}
W_PREFIX=hopgw-wsmem
# shellcheck source=bench/ws-common.sh
. "$(dirname "$0")/ws-common.sh"
NODE_PORT=$(free_port)
"$BIN/mock-backend" "$NODE_PORT" ws-node >"$W/node.log" 2>&1 & PIDS+=($!)
wait_http "http://127.0.0.1:$NODE_PORT/health"
start_gateway "node-1=$NODE_PORT"
"$BIN/examples/wsload" --url "ws://127.0.0.1:$GW_PORT/ws" --steps "$STEPS" --pid "$GW" \
  --echo-secs 1 --echo-rate 500 --concurrency 128 --settle-ms 1500
