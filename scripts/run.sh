#!/usr/bin/env bash
# `make run`: two mock backends and the gateway with the embedded Go-compatible defaults (SPEC section 2).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=target/release
pids=()
cleanup() {
  trap - EXIT INT TERM # once, whichever signal or exit came first
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  echo; echo "stopped mock backends and gateway"
}
trap cleanup EXIT INT TERM

"$BIN/mock-backend" 8081 node-1 & pids+=($!)
"$BIN/mock-backend" 8082 node-2 & pids+=($!)
"$BIN/hopping-gateway" & pids+=($!)

# A process that cannot bind (e.g. an earlier `make run` still holds the port) exits at once.
# Checked after /readyz answers too: that answer may come from the earlier instance.
all_alive() {
  local p
  for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null || return 1; done
}
fail() {
  echo >&2
  echo "make run: $1 (ports 8000, 9901, 8081 and 8082 must be free; see the error above)" >&2
  exit 1
}
ready=0
for _ in $(seq 1 100); do
  all_alive || fail "a process exited during start-up"
  if curl -fs http://127.0.0.1:9901/readyz >/dev/null 2>&1; then ready=1; break; fi
  sleep 0.1
done
sleep 0.3
all_alive || fail "a process exited during start-up"
[ "$ready" = 1 ] || fail "the gateway did not become ready within 10 s"

cat <<'TXT'

hopping-gateway is up: data plane http://localhost:8000, admin http://127.0.0.1:9901
Try, in another terminal:

  curl -s localhost:8000/data                                 # balanced over node-1 and node-2
  curl -s -H 'X-Conn-Id: demo-2' localhost:8000/data          # bound: always the same node (node-1)
  curl -s 127.0.0.1:9901/admin/conns/demo-2                   # the binding and its TTL
  curl -s 127.0.0.1:9901/admin/nodes                          # node states and effective weights

Watch a hop: kill node-1, the node demo-2 is bound to, then ask again:
  pkill -9 -f 'mock-backend 8081 node-1'
  curl -s -H 'X-Conn-Id: demo-2' localhost:8000/data          # served by node-2; the log says
                                                              # "Hopping triggered for conn demo-2 from node-1 to node-2"
  curl -s 127.0.0.1:9901/metrics | grep hopping_count         # hopping_count_total{reason="connect_error"} 1
                                                              # (the series exists from the first hop on)
Bring the killed node back before the next steps (from the project root, in that terminal; Ctrl-C there stops it):
  target/release/mock-backend 8081 node-1                     # probed healthy, then slow start

"Alive but useless": curl -s -XPOST 'localhost:8082/control/health?state=down'  (ejected after 3 probes, 6 s)
  and back:          curl -s -XPOST 'localhost:8082/control/health?state=up'    (probed healthy, then slow start)
Drain a node:        curl -s -XPOST '127.0.0.1:9901/admin/nodes/node-2/drain?period=10s'
  and back:          curl -s -XPOST '127.0.0.1:9901/admin/nodes/node-2/undrain'

Ctrl-C stops all three.
TXT
wait
