# Sourced by bench/ws-mem.sh and bench/ws-hop.sh: a work directory, process cleanup, free ports,
# and readiness waits. Expects `set -euo pipefail` and W_PREFIX (the mktemp prefix) from the caller.
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=$ROOT/target/release
W=$(mktemp -d "/tmp/${W_PREFIX}.XXXXXX")
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$W"; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_http() { for _ in $(seq 1 100); do curl -fsS -o /dev/null "$1" 2>/dev/null && return 0; sleep 0.1; done; echo "$1 not up" >&2; exit 1; }
ulimit -n "$(ulimit -Hn)"
