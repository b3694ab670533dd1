#!/usr/bin/env bash
# TLS rows of `make bench` (see bench/README.md "TLS"): the gateway, nginx and HAProxy
# terminating TLS with the same ECDSA P-256 certificate (made by `hopping-gateway gen-cert`), each
# pinned to one core with one worker, in front of one mock-backend. Figures:
#   - full handshakes/s and proxy CPU µs per handshake: `openssl s_time -new` (a new connection and a
#     full TLS 1.3 handshake per request, no session reuse), CPU = utime+stime of the proxy over the run;
#   - proxy CPU µs per request on kept-alive TLS connections (h2load --h1), and the gateway's cleartext
#     figure for the ratio;
#   - the gateway's RSS per idle `wss://` WebSocket (a fresh gateway; the wsload client opens
#     BENCH_TLS_WS_CONNS idle sockets; KiB/connection = VmRSS growth over the idle baseline ÷ open
#     sockets), next to the same figure for `ws://` on another fresh gateway.
# Env: BENCH_SECONDS (10), BENCH_TLS_REQUESTS (50000), BENCH_TLS_WS_CONNS (2000), BENCH_PROXY_CPU (1),
# BENCH_LOAD_CPU (0), BENCH_KEEP.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BENCH_TAG=bench-tls
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
bench_settings
N=${BENCH_TLS_REQUESTS:-50000}
WS_CONNS=${BENCH_TLS_WS_CONNS:-2000}
for t in nginx haproxy h2load openssl taskset curl; do command -v "$t" >/dev/null || die "$t missing (make bench installs nginx and haproxy; h2load is nghttp2-client)"; done
GW=$ROOT/target/dist/hopping-gateway
MOCK=$ROOT/target/release/mock-backend
WSLOAD=$ROOT/target/release/examples/wsload
{ [ -x "$GW" ] && [ -x "$MOCK" ]; } || die "binaries missing: run make build dist"
[ -x "$WSLOAD" ] || die "wsload missing: cargo build --release -p integration-tests --features bench --example wsload"
# Two sockets per proxied WebSocket, plus the client's in this shell's children.
ulimit -n "$(ulimit -Hn)"

bench_workdir hopgw-bench-tls
read -r BACKEND GW_PLAIN GW_ADMIN GW_TLS NGINX HAPROXY <<<"$(free_ports 6)"

"$GW" gen-cert --out "$W/certs" --name localhost --name 127.0.0.1 >/dev/null
CERT=$W/certs/gateway.pem KEY=$W/certs/gateway.key CA=$W/certs/ca.pem
cat "$CERT" "$KEY" >"$W/certs/combined.pem"

start backend "$LCPU" "$MOCK" "$BACKEND" bench-node
{
  printf '[[clusters]]\nname = "c"\nhealth = { kind = "tcp" }\n'
  toml_nodes "n1=$BACKEND"
  toml_catch_all r c
  cat <<TOML
[server.tls]
listen = "127.0.0.1:$GW_TLS"
  [[server.tls.certs]]
  cert = "$CERT"
  key = "$KEY"
  server_names = ["localhost"]
TOML
} >"$W/gw.toml"
mkdir -p "$W/nginx"
{
  nginx_head "$W/nginx" 4096
  cat <<CONF
  proxy_temp_path $W/nginx/proxy;
  keepalive_requests 100000000;
  upstream be { server 127.0.0.1:$BACKEND; keepalive 64; }
  server {
    listen 127.0.0.1:$NGINX ssl;
    ssl_certificate $CERT;
    ssl_certificate_key $KEY;
    ssl_protocols TLSv1.2 TLSv1.3;
    ssl_session_cache off;
    ssl_session_tickets off;
    location / { proxy_pass http://be; proxy_http_version 1.1; proxy_set_header Connection ""; }
  }
}
CONF
} >"$W/nginx/nginx.conf"
cat >"$W/haproxy.cfg" <<CONF
global
  nbthread 1
  tune.ssl.cachesize 0
defaults
  mode http
  timeout connect 5s
  timeout client 60s
  timeout server 60s
  http-reuse always
frontend fe
  bind 127.0.0.1:$HAPROXY ssl crt $W/certs/combined.pem no-tls-tickets alpn http/1.1
  default_backend be
backend be
  server s1 127.0.0.1:$BACKEND
CONF

OUT=$ROOT/bench/results/tls-latest.md
{
  echo "| proxy | full handshakes/s | CPU µs / handshake | kept-alive TLS CPU µs / request | cleartext CPU µs / request |"
  echo "|---|---|---|---|---|"
} >"$W/table"

# measure NAME PORT PIDS...: one row.
measure() {
  local name=$1 port=$2; shift 2
  local t0 t1 out conns hs_rate hs_us ka_us
  t0=$(cpu_ticks "$@")
  out=$(taskset -c "$LCPU" openssl s_time -connect "127.0.0.1:$port" -new -time "$SECS" -www /data -CAfile "$CA" 2>&1 | grep 'connections in' | tail -1)
  t1=$(cpu_ticks "$@")
  conns=$(echo "$out" | awk '{print $1}')
  hs_rate=$(echo "$out" | awk '{printf "%.0f", $1 / $4}')
  hs_us=$(awk -v d=$((t1 - t0)) -v n="$conns" -v hz="$CLK_TCK" 'BEGIN {printf "%.0f", d / hz * 1e6 / n}')
  t0=$(cpu_ticks "$@")
  taskset -c "$LCPU" h2load --h1 -n "$N" -c 16 -t 1 "https://127.0.0.1:$port/data" >"$W/$name-h2load.log" 2>&1
  t1=$(cpu_ticks "$@")
  grep -q "succeeded, 0 errored" "$W/$name-h2load.log" || grep -q ' 0 failed' "$W/$name-h2load.log" || log "$name: h2load reported failures (see $W/$name-h2load.log)"
  ka_us=$(awk -v d=$((t1 - t0)) -v n="$N" -v hz="$CLK_TCK" 'BEGIN {printf "%.1f", d / hz * 1e6 / n}')
  local plain="-"
  if [ "$name" = gateway ]; then
    t0=$(cpu_ticks "$@")
    taskset -c "$LCPU" h2load --h1 -n "$N" -c 16 -t 1 "http://127.0.0.1:$GW_PLAIN/data" >"$W/$name-plain.log" 2>&1
    t1=$(cpu_ticks "$@")
    plain=$(awk -v d=$((t1 - t0)) -v n="$N" -v hz="$CLK_TCK" 'BEGIN {printf "%.1f", d / hz * 1e6 / n}')
  fi
  echo "| $name | $hs_rate | $hs_us | $ka_us | $plain |" >>"$W/table"
  log "$name: $hs_rate handshakes/s, $hs_us µs CPU/handshake, $ka_us µs CPU/request kept alive (cleartext $plain)"
}

sleep 0.3
start gateway "$PCPU" "$GW" --config "$W/gw.toml" --listen "127.0.0.1:$GW_PLAIN" --admin-listen "127.0.0.1:$GW_ADMIN" --workers 1 --access-log off
GWPID=$STARTED
wait_http "https://127.0.0.1:$GW_TLS/data"
measure gateway "$GW_TLS" "$GWPID"
stop "$GWPID"

start nginx "$PCPU" nginx -c "$W/nginx/nginx.conf" -p "$W/nginx"
wait_http "https://127.0.0.1:$NGINX/data"
# shellcheck disable=SC2046
measure nginx "$NGINX" $(pgrep -P "$STARTED") "$STARTED"
stop "$STARTED"

start haproxy "$PCPU" haproxy -f "$W/haproxy.cfg"
wait_http "https://127.0.0.1:$HAPROXY/data"
measure haproxy "$HAPROXY" "$STARTED"
stop "$STARTED"

# ws_row SCHEME URL: a fresh gateway, WS_CONNS idle sockets through it; one row of the WS table.
{
  echo "| gateway, idle WebSockets | sockets open | failed | KiB / connection | RSS before → after, KiB |"
  echo "|---|---|---|---|---|"
} >"$W/ws-table"
ws_row() {
  local scheme=$1 url=$2 json
  start "gateway-$scheme" "$PCPU" "$GW" --config "$W/gw.toml" --listen "127.0.0.1:$GW_PLAIN" --admin-listen "127.0.0.1:$GW_ADMIN" --workers 1 --access-log off
  local pid=$STARTED
  wait_http "https://127.0.0.1:$GW_TLS/data"
  taskset -c "$LCPU" "$WSLOAD" --url "$url" --ca "$CA" --steps "$WS_CONNS" --pid "$pid" \
    --echo-secs 1 --echo-rate 500 --concurrency 128 --settle-ms 1500 >"$W/ws-$scheme.json" 2>"$W/ws-$scheme.err" \
    || die "wsload $scheme failed: $(tail -1 "$W/ws-$scheme.err")"
  json=$(cat "$W/ws-$scheme.json")
  python3 - "$scheme" "$json" >>"$W/ws-table" <<'PY'
import json, sys
d = json.loads(sys.argv[2]); s = d["steps"][-1]
k = "n/a" if s["kib_per_conn"] is None else f"{s['kib_per_conn']:.1f}"
print(f"| `{sys.argv[1]}://` | {s['conns']:,} | {s['failed']} | {k} | {d['base_rss_kib']:,} → {s['rss_kib']:,} |")
PY
  log "$scheme: $(tail -1 "$W/ws-table")"
  stop "$pid"
}
ws_row wss "wss://localhost:$GW_TLS/ws"
ws_row ws "ws://127.0.0.1:$GW_PLAIN/ws"
stop_all

{
  echo "TLS, $(date -u +%F), ${SECS}s handshake runs (openssl s_time -new, TLS 1.3, ECDSA P-256, no session reuse), $N kept-alive requests over 16 connections (h2load --h1);"
  echo "$(nginx -v 2>&1 | sed 's/.*nginx\//nginx /'), HAProxy $(haproxy -v | head -1 | awk '{print $3}'), $(openssl version | awk '{print $1, $2}')."
  echo
  cat "$W/table"
  echo
  cat "$W/ws-table"
} >"$OUT"
log "wrote bench/results/tls-latest.md"
cat "$OUT"
