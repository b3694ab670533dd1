#!/usr/bin/env bash
# Redis cost per affinity operation (issue 18, docs/scaling.md): one gateway, two mock nodes, one
# redis-server on free ports. Counts Redis commands (INFO commandstats) per new binding, per hop
# and per TTL refresh, bytes per binding (MEMORY USAGE), and the binding and hop rates one gateway
# sustains (curl clients in parallel; p99 of curl's time_total, which includes curl's own start).
# Prints one markdown table row per figure. Usage: bench/store-costs.sh [N ids, default 2000]
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-2000}
P=${P:-16}
BIN=target/release
port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
RP=$(port); M1=$(port); M2=$(port); GP=$(port); AP=$(port)
dir=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$dir"; }
trap cleanup EXIT
redis-server --port "$RP" --bind 127.0.0.1 --save '' --appendonly no >/dev/null & pids+=($!)
$BIN/mock-backend "$M1" node-1 >/dev/null 2>&1 & pids+=($!)
$BIN/mock-backend "$M2" node-2 >/dev/null 2>&1 & pids+=($!)
cat >"$dir/g.toml" <<EOF
[affinity]
store = "redis"
redis_url = "redis://127.0.0.1:$RP/0"
ttl = "4s"
[[clusters]]
name = "c"
  [[clusters.nodes]]
  id = "node-1"
  addr = "127.0.0.1:$M1"
  [[clusters.nodes]]
  id = "node-2"
  addr = "127.0.0.1:$M2"
[[routes]]
id = "r"
match = { path_prefix = "/" }
cluster = "c"
EOF
RUST_LOG=warn $BIN/hopping-gateway --config "$dir/g.toml" --listen "127.0.0.1:$GP" --admin-listen "127.0.0.1:$AP" >/dev/null 2>&1 & pids+=($!)
for _ in $(seq 100); do curl -sf "127.0.0.1:$AP/readyz" >/dev/null && break; sleep 0.1; done
rc() { redis-cli -p "$RP" "$@"; }
calls() { rc INFO commandstats | tr -d '\r' | awk -F'[:=,]' '/^cmdstat_/ {n+=$3} END {print n}'; }
phase() { # $1 = label, $2 = id prefix: N requests, P in parallel; prints rate and p99
  local t0 t1
  t0=$(date +%s.%N)
  seq "$N" | xargs -P "$P" -I{} curl -s -o /dev/null -w '%{time_total}\n' -H "X-Conn-Id: $2{}" "127.0.0.1:$GP/data" >"$dir/$1.times"
  t1=$(date +%s.%N)
  python3 - "$dir/$1.times" "$t0" "$t1" "$N" "$1" <<'PY'
import sys
t = sorted(float(x) for x in open(sys.argv[1]))
el = float(sys.argv[3]) - float(sys.argv[2]); n = int(sys.argv[4])
print(f"| {sys.argv[5]} rate | {n/el:.0f}/s | p99 {t[int(len(t)*0.99)-1]*1000:.1f} ms (curl, {len(t)} requests) |")
PY
}
rc CONFIG RESETSTAT >/dev/null
c0=$(calls)
phase "new binding" id-
c1=$(calls)
echo "| redis commands per new binding | $(python3 -c "print(round(($c1-$c0)/$N,2))") | GET miss EVAL + bind EVAL |"
echo "| bytes per binding in redis | $(rc MEMORY USAGE hopgw:conn:id-1) | MEMORY USAGE of one key |"
sleep 2.2 # past half the 4 s TTL: the next use of a cached binding queues one refresh
c2=$(calls)
phase "cached use with TTL refresh" id-
sleep 0.5
c3=$(calls)
echo "| redis commands per TTL refresh | $(python3 -c "print(round(($c3-$c2)/$N,2))") | one bind EVAL per refreshed binding |"
curl -s -X POST "127.0.0.1:$AP/admin/nodes/node-1/drain?period=1s" >/dev/null
c4=$(calls)
phase "hop (drained node)" id-
c5=$(calls)
hops=$(curl -s "127.0.0.1:$AP/metrics" | awk '/^hopping_count_total\{reason="draining"\}/ {print $2}')
pub=$(rc INFO commandstats | tr -d '\r' | awk -F'[:=,]' '/^cmdstat_publish/ {print $3}')
echo "| hops made | ${hops:-0} | of $N ids |"
echo "| redis commands per hop | $(python3 -c "print(round(($c5-$c4)/max(1,${hops:-0}),2))") | CAS EVAL + PUBLISH (ids not hopping: 0) |"
echo "| PUBLISH per hop | $(python3 -c "print(round(${pub:-0}/max(1,${hops:-0}),2))") | delivered to every subscribed replica |"
rss=$(awk '/VmRSS/ {print $2}' "/proc/${pids[3]}/status")
echo "| gateway RSS with $((N)) cached bindings | ${rss} KiB | |"
