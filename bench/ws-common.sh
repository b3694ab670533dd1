# Sourced by bench/ws-mem.sh and bench/ws-hop.sh: a work directory, process cleanup, free ports,
# readiness waits (bench/lib.sh) and the bench gateway (start_gateway).
# Expects `set -euo pipefail` and W_PREFIX (the mktemp prefix) from the caller.
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=$ROOT/target/release
W=$(mktemp -d "/tmp/${W_PREFIX}.XXXXXX")
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$W"; }
trap cleanup EXIT
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
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
