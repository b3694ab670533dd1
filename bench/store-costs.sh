#!/usr/bin/env bash
# Redis cost per affinity operation (docs/scaling.md sizes a fleet from it): one gateway, two mock
# nodes, one redis-server on free ports. Counts Redis commands (INFO commandstats) per new binding, per hop
# and per TTL refresh, bytes per binding (MEMORY USAGE), and the binding and hop rates one gateway
# sustains (bench/store_load.py: keep-alive HTTP/1.1 connections, one new id per request, p99).
# Prints one markdown table row per figure. Usage: bench/store-costs.sh [N ids, default 2000]
set -euo pipefail
cd "$(dirname "$0")/.."
BENCH_TAG=store-costs
# shellcheck source=bench/lib.sh
source bench/lib.sh
N=${1:-2000}
P=${P:-32}
BIN=target/release
{ [ -x target/dist/hopping-gateway ] && [ -x $BIN/mock-backend ]; } || die "binaries missing: run make build dist"
bench_workdir hopgw-store-costs
read -r RP M1 M2 GP AP <<<"$(free_ports 5)"
redis-server --port "$RP" --bind 127.0.0.1 --save '' --appendonly no >"$W/redis.log" 2>&1 & PIDS+=($!)
for _ in $(seq 100); do redis-cli -p "$RP" PING 2>/dev/null | grep -q PONG && break; sleep 0.1; done
$BIN/mock-backend "$M1" node-1 >"$W/node-1.log" 2>&1 & PIDS+=($!)
$BIN/mock-backend "$M2" node-2 >"$W/node-2.log" 2>&1 & PIDS+=($!)
mkdir -p "$W/conf" # the gateway watches its config directory: the logs stay out of it
{
  cat <<EOF
[affinity]
store = "redis"
redis_url = "redis://127.0.0.1:$RP/0"
ttl = "8s"
[[clusters]]
name = "c"
EOF
  toml_nodes "node-1=$M1 node-2=$M2"
  toml_catch_all r c
} >"$W/conf/g.toml"
RUST_LOG=warn target/dist/hopping-gateway --config "$W/conf/g.toml" --listen "127.0.0.1:$GP" --admin-listen "127.0.0.1:$AP" >"$W/gw.log" 2>&1 & GW=$!; PIDS+=("$GW")
wait_http "http://127.0.0.1:$AP/readyz" gateway
rc() { redis-cli -p "$RP" "$@"; }
calls() { rc INFO commandstats | tr -d '\r' | awk -F'[:=,]' '/^cmdstat_/ {n+=$3} END {print n}'; }
phase() { # $1 = label, $2 = id prefix: N requests over P connections; prints rate and p99
  read -r rate p99 bad < <(python3 bench/store_load.py "$GP" "$N" "$2" "$P")
  echo "| $1 | $rate/s | p99 $p99 ms, $bad non-200, $N requests over $P connections |"
}
stat() { rc INFO commandstats | tr -d '\r' | awk -F'[:=,]' -v c="cmdstat_$1" '$1 == c {print $3}'; }
echo "| figure | value | note |"
echo "|---|---|---|"
rc CONFIG RESETSTAT >/dev/null
per() { python3 -c "print(round(($1)/$2, 2))"; }
c0=$(calls); e0=$(stat eval)
phase "new bindings/s" id-
c1=$(calls); e1=$(stat eval)
echo "| redis round trips per new binding | $(per "$e1-${e0:-0}" "$N") | EVAL calls (GET-miss script, then bind script) |"
echo "| redis commands per new binding | $(per "$c1-$c0" "$N") | EVALs plus the GET/SET/PEXPIRE they run |"
echo "| bytes per binding in redis | $(rc MEMORY USAGE "hopgw:conn:id-$((N-1))") | MEMORY USAGE of one key (jemalloc, 64-bit) |"
phase "cached uses/s" id-
c1b=$(calls)
echo "| redis commands per cached use | $(per "$c1b-$c1" "$N") | served from the local cache |"
sleep 4.5 # past half the 8 s TTL: the next use of a cached binding queues one refresh
c2=$(calls); e2=$(stat eval)
phase "cached uses with TTL refresh/s" id-
sleep 0.5
c3=$(calls); e3=$(stat eval)
echo "| redis round trips per TTL refresh | $(per "$e3-$e2" "$N") | bind script (slides PX) |"
echo "| redis commands per TTL refresh | $(per "$c3-$c2" "$N") | |"
curl -s -X POST "127.0.0.1:$AP/admin/nodes/node-1/drain?period=1s" >/dev/null
c4=$(calls); e4=$(stat eval); p4=$(stat publish)
phase "requests/s while node-1 drains (half hop)" id-
c5=$(calls); e5=$(stat eval); p5=$(stat publish)
hops=$(curl -s "127.0.0.1:$AP/metrics" | awk '/^hopping_count_total\{reason="draining"\}/ {print $2}')
h=${hops:-0}; h=${h%.*}
echo "| hops made | $h | of $N ids |"
echo "| redis round trips per hop | $(per "$e5-$e4+${p5:-0}-${p4:-0}" "$h") | CAS script + PUBLISH on <prefix>hops |"
echo "| redis commands per hop | $(per "$c5-$c4" "$h") | |"
echo "| PUBLISH per hop | $(per "${p5:-0}-${p4:-0}" "$h") | each delivered to every subscribed replica |"
rss=$(awk '/VmRSS/ {print $2}' "/proc/$GW/status")
echo "| gateway RSS with $((N)) cached bindings | ${rss} KiB | |"
