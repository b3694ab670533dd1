#!/usr/bin/env bash
# Per-request cost of a proxied keep-alive GET, gateway against nginx: CPU µs/request
# (utime+stime from /proc/<pid>/stat, as run.sh), syscalls/request (`strace -c -f`), context
# switches and task-clock per request (`perf stat`). Not part of make bench; see bench/README.md.
#
#   bench/h1-cost.sh [GATEWAY_BINARY]     (default target/dist/hopping-gateway)
#
# One backend nginx (return 200), the gateway (--workers 1) and an nginx proxy (one worker, the
# run.sh config) pinned to core 0, wrk -t1 -c64 pinned to core 1; H1_SECS (5) per run, H1_ROUNDS
# (3) interleaved rounds for CPU µs (medians printed), one strace and one perf run per target.
# H1_RATE=N runs oha at a fixed N req/s over 16 connections instead (run.sh's fixed-rate row).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BENCH_TAG=h1-cost
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
bench_workdir hopgw-h1cost
GW=${1:-$ROOT/target/dist/hopping-gateway}
SECS=${H1_SECS:-5}
ROUNDS=${H1_ROUNDS:-3}
RATE=${H1_RATE:-}

read -r BP GP AP NP <<<"$(free_ports 4)"
mkdir -p "$W/backend" "$W/proxy"
{
  nginx_head "$W/backend" 4096
  cat <<EOF
  keepalive_requests 100000000;
  keepalive_timeout 600s;
  server { listen 127.0.0.1:$BP backlog=4096; location / { default_type text/plain; return 200 "hello from the bench backend\n"; } }
}
EOF
} >"$W/backend/nginx.conf"
# As bench/run.sh's nginx row.
nginx_proxy_conf "$W/proxy" "$NP" "$BP" 0
gw_conf "$W/conf/gw.toml" "node-1=$BP"
start backend 1 nginx -p "$W/backend" -c "$W/backend/nginx.conf"
start gateway 0 "$GW" --config "$W/conf/gw.toml" --listen "127.0.0.1:$GP" --admin-listen "127.0.0.1:$AP" --workers 1 --access-log off
GWPID=$STARTED
start nginx 0 nginx -p "$W/proxy" -c "$W/proxy/nginx.conf"
wait_http "http://127.0.0.1:$BP/" backend
wait_http "http://127.0.0.1:$AP/readyz" gateway
wait_http "http://127.0.0.1:$NP/" nginx
NGXW=$(pgrep -P "$STARTED" | head -1)

# run PORT -> requests served by one wrk run
run() {
  if [ -n "$RATE" ]; then
    taskset -c 1 oha -z "${SECS}s" -w -q "$RATE" -c 16 --worker-threads 1 --no-tui --output-format json "http://127.0.0.1:$1/" |
      python3 -c 'import json, sys; print(sum(json.load(sys.stdin)["statusCodeDistribution"].values()))'
  else
    taskset -c 1 wrk -t1 -c64 -d"${SECS}s" "http://127.0.0.1:$1/" | awk '/requests in/ {print $1}'
  fi
}
declare -A CPU
for t in gateway nginx; do CPU[$t]=""; done
log "load before: $(uptime)"
for r in $(seq 1 "$ROUNDS"); do
  for t in gateway nginx; do
    if [ $t = gateway ]; then port=$GP pid=$GWPID; else port=$NP pid=$NGXW; fi
    read -r u0 s0 < <(awk '{print $14, $15}' "/proc/$pid/stat")
    n=$(run "$port")
    read -r u1 s1 < <(awk '{print $14, $15}' "/proc/$pid/stat")
    read -r us uus kus < <(awk -v u=$((u1 - u0)) -v k=$((s1 - s0)) -v n="$n" -v hz="$(getconf CLK_TCK)" \
      'BEGIN {f = 1e6 / hz / n; printf "%.2f %.2f %.2f\n", (u + k) * f, u * f, k * f}')
    CPU[$t]+="$us "
    log "round $r $t: $n requests, $us CPU µs/request (user $uus, kernel $kus)"
  done
done
for t in gateway nginx; do
  med=$(echo "${CPU[$t]}" | tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  echo "$t: CPU µs/request median $med (rounds: ${CPU[$t]})"
done
for t in gateway nginx; do
  if [ $t = gateway ]; then port=$GP pid=$GWPID; else port=$NP pid=$NGXW; fi
  strace -c -f -p "$pid" -o "$W/strace.$t" &
  SP=$!
  sleep 0.5
  n=$(run "$port")
  kill -INT "$SP"; wait "$SP" 2>/dev/null || true
  echo "$t: syscalls per request under strace ($n requests):"
  awk -v n="$n" 'NR > 2 && $NF != "total" && $4 ~ /^[0-9]+$/ {printf "  %-16s %.3f\n", $NF, $4 / n} $NF == "total" {printf "  %-16s %.3f\n", "total", $4 / n}' "$W/strace.$t"
  perf stat -e context-switches,task-clock -p "$pid" -o "$W/perf.$t" -- sleep "$((SECS + 1))" &
  PP=$!
  sleep 0.3
  n=$(run "$port")
  wait "$PP" || true
  echo "$t: perf stat per request ($n requests):"
  awk -v n="$n" '/context-switches/ {gsub(",", "", $1); printf "  context switches %.3f\n", $1 / n} /task-clock/ {gsub(",", "", $1); printf "  task-clock µs %.2f\n", $1 * 1000 / n}' "$W/perf.$t"
done
log "load after: $(uptime)"
