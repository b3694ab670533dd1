#!/usr/bin/env bash
# Profiles the gateway's request path under valgrind (not part of make bench; see bench/README.md).
#
#   bench/profile.sh [callgrind|dhat] [plain|connid|log|connid-log]
#
# Starts a backend nginx (return 200) and the gateway (--workers 1) under the chosen valgrind tool,
# sends PROFILE_REQUESTS (20000) keep-alive requests with `oha -n` (-c 8), stops the gateway and
# prints where the output is. PROFILE_GW names another gateway binary (default target/dist/hopping-gateway).
# `plain`: no conn id, access log off. A mode containing `connid`: every request carries X-Conn-Id
# (memory store, so the id is bound). A mode containing `log`: the access log is on (written to a file). The profiled binary is copied next to the output.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
TOOL=${1:-callgrind}
MODE=${2:-plain}
N=${PROFILE_REQUESTS:-20000}
OUT=${PROFILE_OUT:-$ROOT/target/bench-profile}
mkdir -p "$OUT"
export PATH="$PATH:/usr/sbin:$HOME/.cargo/bin"
command -v valgrind >/dev/null || { apt-get update -qq && apt-get install -y -qq valgrind >/dev/null; }
# oha sends an exact request count; without it, wrk runs for PROFILE_SECONDS and the count comes from the gateway's metrics.
command -v oha >/dev/null || command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk >/dev/null; }

bench_workdir hopgw-profile
read -r BP GP AP <<<"$(free_ports 3)"

mkdir -p "$W/backend"
{
  nginx_head "$W/backend" 1024
  cat <<EOF
  keepalive_requests 100000000;
  server { listen 127.0.0.1:$BP; location / { default_type text/plain; return 200 "hello from the bench backend\n"; } }
}
EOF
} >"$W/backend/nginx.conf"
nginx -p "$W/backend" -e "$W/backend/error.log" -c "$W/backend/nginx.conf" &
PIDS+=($!)

mkdir -p "$W/conf"  # not next to gw.log: the gateway watches its config directory
{
  printf '[server]\nshutdown_timeout = "1s"\n[health]\ninterval = "30s"\n[[clusters]]\nname = "bench"\n'
  toml_nodes "node-1=$BP"
  toml_catch_all all bench
} >"$W/conf/gw.toml"

access=off
hdr=()
case $MODE in *connid*) hdr=(-H "X-Conn-Id: bench-conn-0001") ;; esac
case $MODE in *log*) access=on ;; esac
# PROFILE_VALGRIND_ARGS adds options, e.g. "--cache-sim=yes --branch-sim=yes" (simulated cache misses and
# branch mispredictions; bench/README.md "The shipped build" compares them).
# shellcheck disable=SC2206
case $TOOL in
  callgrind) vg=(valgrind --tool=callgrind --callgrind-out-file="$OUT/callgrind.$MODE.out" --dump-instr=no ${PROFILE_VALGRIND_ARGS:-}) ;;
  dhat) vg=(valgrind --tool=dhat --dhat-out-file="$OUT/dhat.$MODE.json") ;;
  *) echo "tool: callgrind or dhat" >&2; exit 2 ;;
esac
cp "${PROFILE_GW:-$ROOT/target/dist/hopping-gateway}" "$OUT/hopping-gateway.$MODE"
"${vg[@]}" "$OUT/hopping-gateway.$MODE" --config "$W/conf/gw.toml" --listen "127.0.0.1:$GP" \
  --admin-listen "127.0.0.1:$AP" --workers 1 --access-log "$access" >"$W/gw.log" 2>"$OUT/$TOOL.$MODE.valgrind.log" &
GWPID=$!
PIDS+=("$GWPID")
for _ in $(seq 1 600); do curl -fs -o /dev/null "http://127.0.0.1:$AP/readyz" && break; sleep 0.1; done
curl -fs -o /dev/null "http://127.0.0.1:$GP/" || { echo "gateway not answering" >&2; exit 1; }
if command -v oha >/dev/null; then
  oha -n "$N" -c 8 --no-tui "${hdr[@]}" "http://127.0.0.1:$GP/" | tee "$OUT/$TOOL.$MODE.oha.txt" | grep -E 'Success rate|Requests/sec|\[' || true
else
  wrk -t1 -c8 -d"${PROFILE_SECONDS:-20}s" "${hdr[@]}" "http://127.0.0.1:$GP/" | tee "$OUT/$TOOL.$MODE.wrk.txt"
  N=$(curl -fs "http://127.0.0.1:$AP/metrics" | awk '/^gateway_requests_total\{/ {s += $2} END {printf "%d", s - 1}')
fi
kill -TERM "$GWPID"
wait "$GWPID" 2>/dev/null || true
echo "output: $OUT/$TOOL.$MODE.* (requests: $N, plus 1 check request)"
