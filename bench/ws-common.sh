# shellcheck shell=bash
# Sourced by bench/ws-mem.sh, bench/ws-hop.sh and bench/h2-flood.sh: bench/lib.sh with its work
# directory (W, stopped processes and removed on exit), ROOT and BIN (target/release), free_port,
# and the bench gateway (start_gateway). Expects `set -euo pipefail` and W_PREFIX (the work
# directory's prefix) from the caller.
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck disable=SC2034 # BIN: read by the scripts that source this one
BIN=$ROOT/target/release
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
bench_workdir "$W_PREFIX"
free_port() { free_ports 1; }
ulimit -n "$(ulimit -Hn)"

# Writes the bench gateway config (cluster "bench" with the nodes given as "id=port" words in $1,
# one catch-all route "all" plus the TOML lines in $2) and starts the gateway with the bench
# settings (`--workers 1 --access-log off`, under $GW_WRAP when set; $GW_BIN instead of the dist
# binary, make dist, when set); sets GW_PORT, GW_ADMIN, GW.
start_gateway() {
  [ -x "${GW_BIN:-$ROOT/target/dist/hopping-gateway}" ] || die "gateway binary missing: run make dist"
  GW_PORT=$(free_port); GW_ADMIN=$(free_port)
  gw_conf "$W/conf/gw.toml" "$1" "${2:-}"
  ${GW_WRAP:-} "${GW_BIN:-$ROOT/target/dist/hopping-gateway}" --config "$W/conf/gw.toml" --listen "127.0.0.1:$GW_PORT" \
    --admin-listen "127.0.0.1:$GW_ADMIN" --workers 1 --access-log off >"$W/gw.log" 2>&1 &
  GW=$!; PIDS+=("$GW")
  wait_http "http://127.0.0.1:$GW_ADMIN/readyz"
}
