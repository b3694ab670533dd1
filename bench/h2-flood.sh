#!/usr/bin/env bash
# HTTP/2 abuse under load (SPEC section 4, CASE-25/26): a second h2c connection's latency while
# other connections flood the gateway (rapid reset, PING floods, empty CONTINUATIONs), against the
# same connection's idle latency. One abusive connection at a time (rapid reset, then a PING flood,
# then empty CONTINUATIONs, round and round: each reconnects once the gateway's GOAWAY closed it),
# the gateway pinned to core 1 (BENCH_PROXY_CPU), h2load and the flooder on core 0 (BENCH_LOAD_CPU).
# The flooder connects from FLOOD_SRC (127.0.0.2), the honest client from 127.0.0.1, as two
# clients on a network would; FLOOD_SRC=127.0.0.1 puts both on one address.
# Needs h2load (nghttp2-client) and release binaries.
# Usage: bench/h2-flood.sh [requests] ; prints idle and flooded p50/p99 in ms.
set -euo pipefail
W_PREFIX=hopgw-h2flood
PCPU=${BENCH_PROXY_CPU:-1}
LCPU=${BENCH_LOAD_CPU:-0}
GW_WRAP=${GW_WRAP:-taskset -c $PCPU}
# shellcheck source=bench/ws-common.sh
source "$(dirname "$0")/ws-common.sh"
BIN=${BENCH_BIN:-$BIN} # another build to compare (its hopping-gateway and mock-backend)
N=${1:-3000}
FLOOD_SRC=${FLOOD_SRC:-127.0.0.2}
NODE=$(free_port)
"$BIN/mock-backend" "$NODE" node-a >"$W/node.log" 2>&1 & PIDS+=($!)
wait_http "http://127.0.0.1:$NODE/health"
start_gateway "node-a=$NODE"

p99() { # h2load --log-file: start(µs) status duration(µs)
  python3 - "$1" <<'PY'
import sys
d = sorted(int(l.split()[2]) for l in open(sys.argv[1]) if l.strip())
q = lambda p: d[min(len(d) - 1, int(len(d) * p))] / 1000
print(f"n={len(d)} p50={q(0.50):.2f}ms p99={q(0.99):.2f}ms")
PY
}
measure() { taskset -c "$LCPU" h2load -n "$N" -c 1 -m 1 --log-file="$W/$1.log" "http://127.0.0.1:$GW_PORT/data" >/dev/null; p99 "$W/$1.log"; }

taskset -c "$LCPU" h2load -n 500 -c 1 -m 1 "http://127.0.0.1:$GW_PORT/data" >/dev/null   # warm-up
echo "idle:    $(measure idle)"

# Flooders: each opens a connection, floods until the gateway's GOAWAY closes it, and reconnects.
nice -n 19 taskset -c "$LCPU" python3 - "$GW_PORT" "$FLOOD_SRC" >"$W/flood.log" 2>&1 <<'PY' &
import socket, struct, sys, threading, time
port, src = int(sys.argv[1]), sys.argv[2]
def fr(t, f, s, p=b""): return struct.pack(">I", len(p))[1:] + bytes([t, f]) + struct.pack(">I", s) + p
hb = bytes([0x82, 0x86, 0x04, 5]) + b"/data" + bytes([0x01, 0x10]) + b"app.example.test"
pre = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + fr(4, 0, 0)
rapid = b"".join(fr(1, 5, n, hb) + fr(3, 0, n, b"\0\0\0\x08") for n in range(1, 20001, 2))
ping = fr(6, 0, 0, b"\0" * 8) * 20000
cont = fr(1, 0, 1, hb) + fr(9, 0, 1) * 20000
n = 0
while True:
    payload = (rapid, ping, cont)[n % 3]
    n += 1
    try:
        with socket.create_connection(("127.0.0.1", port), source_address=(src, 0)) as s:
            s.sendall(pre + payload)
            while s.recv(1 << 16):
                pass
    except OSError:
        pass
PY
FLOOD=$!; PIDS+=("$FLOOD")
sleep 1
goaways() { curl -fsS "http://127.0.0.1:$GW_ADMIN/metrics" | awk '/^gateway_h2_goaway_sent_total/ {n += $2} END {print n + 0}'; }
n_flood_start=$(goaways)
t0=$(awk '{print $14 + $15}' "/proc/$GW/stat"); s0=$(date +%s.%N)
echo "flooded: $(measure flooded)"
t1=$(awk '{print $14 + $15}' "/proc/$GW/stat"); s1=$(date +%s.%N)
n_flood_end=$(goaways)
echo "gateway CPU while flooded: $(awk -v d=$((t1 - t0)) -v hz="$(getconf CLK_TCK)" -v s="$s0" -v e="$s1" 'BEGIN {printf "%.0f%%", d / hz / (e - s) * 100}') of one core"
echo "abusive connections: $((n_flood_end - n_flood_start)) ended for abuse while measured"
echo "GOAWAYs for abuse: $(curl -fsS "http://127.0.0.1:$GW_ADMIN/metrics" | grep '^gateway_h2_goaway_sent_total' | tr '\n' ' ')"
