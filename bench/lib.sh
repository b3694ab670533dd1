# Sourced by the bench scripts (run.sh, tls.sh, and through ws-common.sh the WebSocket and h2
# ones): log lines, a process started pinned to one core, CPU ticks of pids, free loopback ports and
# the readiness wait. Expects `set -euo pipefail`, W (the work directory, for logs) and PIDS (an
# array of started pids) from the caller; BENCH_TAG names the log lines (default "bench").

log() { printf '[%s %s] %s\n' "${BENCH_TAG:-bench}" "$(date +%T)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# start NAME CPU CMD... : runs CMD pinned to CPU, output to $W/NAME.log; sets STARTED to its pid.
start() {
  local name=$1 cpu=$2
  shift 2
  taskset -c "$cpu" "$@" >"$W/$name.log" 2>&1 &
  STARTED=$!
  PIDS+=("$STARTED")
}

# Sum over the pids of utime+stime (clock ticks).
cpu_ticks() { local t=0 p; for p in "$@"; do t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done; echo $t; }

# free_ports N: N distinct free loopback ports, space-separated (held together while chosen).
free_ports() {
  python3 - "$1" <<'PY'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
PY
}

# wait_http URL [what]: until URL answers 2xx (http or https, certificate not checked), 10 s at most.
wait_http() {
  for _ in $(seq 1 200); do
    curl -fsk -o /dev/null --max-time 1 "$1" && return 0
    sleep 0.05
  done
  die "${2:-$1} did not answer (logs in $W)"
}
