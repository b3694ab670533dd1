#!/usr/bin/env bash
# Scale harness: SCALE_SOCKETS idle ws:// sockets (100,000 by hand, 20,000 under make bench) through
# one proxy to 4 mock-backend nodes, for the gateway, nginx and HAProxy in one run, each measured the
# same way by the wsload client in scale mode (tests/examples/wsload/scale.rs). Per target:
#   - idle: the sockets opened in steps (SCALE_STEPS, default a quarter, half, all); after each, the
#     proxy's RSS per socket (VmRSS growth / sockets; nginx master + worker), the kernel's memory per
#     WebSocket (growth of /proc/net/sockstat's TCP buffer pages plus the socket slab caches in
#     /proc/slabinfo, host-wide: one proxied WebSocket is 4 TCP sockets here: client, proxy front,
#     proxy back, node) and the proxy's CPU time to accept them (µs per socket opened);
#   - messages: CPU µs per WebSocket message (bench/ws-msg.sh's closed loop: 64 sockets × 4 in
#     flight, 64 B, one round trip = one message) with every idle socket still open;
#   - storm: `kill -9` of node-1 (a quarter of the sockets), then the time until each of its sockets
#     is served again by another node (the gateway's `websocket = "hop"`: the next hello carries
#     `hopped_from: node-1`) or is closed (nginx and HAProxy close the client's socket when its node
#     dies); the gateway's goal is all of them served again within 2 s and 0 closed;
#   - rebalance after a 5th node joins: run only when the gateway accepts `rebalance = "on"` on a
#     route (checked with --check-config); otherwise skipped with a message.
# Each proxy runs pinned to core SCALE_PROXY_CPU (1) with one worker (gateway `--workers 1
# --access-log off`, nginx `worker_processes 1`, HAProxy `nbthread 1`); the nodes and wsload share
# core SCALE_LOAD_CPU (0). Targets run one after the other, each with fresh nodes on fresh ports.
#
# One host holds all four ends of every socket, so the script (as root, or with sudo) widens
# net.ipv4.ip_local_port_range to 1024-65535, raises fs.nr_open / fs.file-max (and
# nf_conntrack_max when conntrack is tracking) when they are too low, raises the open-files limit of
# its processes, spreads the client sockets over SCALE_SOURCES loopback source addresses
# (127.0.0.2...; wsload --source-addrs, the port picked per 4-tuple at connect) and restores every
# setting on exit. The proxies dial their nodes from 127.0.0.1: one node port gives ~64k source ports
# once the range is wide, enough for a node's share after the storm (N/3) up to N ≈ 190,000.
# Raising the hard open-files limit (2 N + 20,000 for a proxy) needs CAP_SYS_RESOURCE: where it is
# missing (a container without it), N is capped at what the hard limit allows one proxy, with a
# warning and a note in the report (a hard limit of 20,000 allows 9,686 sockets).
#
#   make build dist && \
#   cargo build --release -p integration-tests --features bench --example wsload
#   bench/scale.sh                       # 100,000 sockets per target, ~2 minutes each
#   SCALE_SOCKETS=20000 bench/scale.sh   # what make bench runs
#
# Env: SCALE_SOCKETS (100000), SCALE_STEPS (N/4,N/2,N), SCALE_TARGETS ("gateway nginx haproxy"),
# SCALE_SOURCES (client source addresses, max(8, N/50000+1)), SCALE_CONCURRENCY (128 handshakes
# in flight), SCALE_SETTLE_MS (2000, after each step before the readings), SCALE_MSG_SECS (10; 0
# skips the message phase), SCALE_HOP_WAIT_SECS (30), SCALE_PROXY_CPU (1), SCALE_LOAD_CPU (0),
# SCALE_PORT_RANGE ("1024 65535": the ephemeral ports while it runs), SCALE_KEEP (a directory:
# the raw wsload JSON and logs are copied there), GW_BIN (the gateway binary; default
# target/dist/hopping-gateway, as bench/ws-mem.sh). Output: a markdown report on stdout
# (bench/results/scale.md holds a published run); progress on stderr.
set -euo pipefail
export BENCH_TAG=scale
W_PREFIX=hopgw-scale
# shellcheck source=bench/ws-common.sh
. "$(dirname "$0")/ws-common.sh"
export PATH="$PATH:/usr/sbin"

N=${SCALE_SOCKETS:-100000}
STEPS=${SCALE_STEPS:-$((N / 4)),$((N / 2)),$N}
TARGETS=${SCALE_TARGETS:-gateway nginx haproxy}
NSRC=${SCALE_SOURCES:-$((N / 50000 + 1))}
[ "$NSRC" -lt 8 ] && NSRC=8
CONC=${SCALE_CONCURRENCY:-128}
SETTLE_MS=${SCALE_SETTLE_MS:-2000}
MSG_SECS=${SCALE_MSG_SECS:-10}
HOP_WAIT=${SCALE_HOP_WAIT_SECS:-30}
PCPU=${SCALE_PROXY_CPU:-1}
LCPU=${SCALE_LOAD_CPU:-0}
MSG_CONNS=64
GW=${GW_BIN:-$ROOT/target/dist/hopping-gateway}
MOCK=$BIN/mock-backend
WSLOAD=$BIN/examples/wsload
[ -x "$GW" ] || die "gateway binary missing ($GW): run make dist, or set GW_BIN"
{ [ -x "$MOCK" ] && [ -x "$WSLOAD" ]; } || die "binaries missing: see the build commands at the top of $0"
# Not root: the sysctls are written with sudo; the hard open-files limit cannot be raised (the
# sockets are capped, below) and /proc/slabinfo is unreadable (the kernel figure is then the TCP
# buffer pages alone).
SUDO=; [ "$(id -u)" -ne 0 ] && SUDO=sudo
[ "$NSRC" -le 250 ] || die "SCALE_SOURCES=$NSRC: at most 250 (127.0.0.2-127.0.0.251)"
SOURCES="127.0.0.2-127.0.0.$((NSRC + 1))"

# ---------------------------------------------------------------- host settings (restored on exit)
SAVED=() # "path=old value"
set_sys() { # KEY VALUE: writes VALUE to /proc/sys/KEY, remembering the old value
  local f=/proc/sys/${1//.//} old
  old=$(cat "$f")
  [ "$old" = "$2" ] && return 0
  SAVED+=("$f=$old")
  echo "$2" | $SUDO tee "$f" >/dev/null || die "cannot set $1"
  log "set $1 = $2 (was $(echo "$old" | tr '\t' ' '))"
}
restore_sys() {
  local i f
  for ((i = ${#SAVED[@]} - 1; i >= 0; i--)); do
    f=${SAVED[$i]%%=*}
    echo "${SAVED[$i]#*=}" | $SUDO tee "$f" >/dev/null 2>&1 || log "could not restore $f"
  done
  [ ${#SAVED[@]} -eq 0 ] || log "restored ${#SAVED[@]} kernel settings"
  SAVED=()
}
# Restores the host settings, then runs lib.sh's bench_cleanup (stops every started pid, removes the
# work directory, exits with the script's status).
on_exit() {
  local rc=$?
  trap - EXIT
  if [ $rc -ne 0 ]; then
    local f
    for f in "$W"/gateway.log "$W"/nginx.log "$W"/nginx/error.log "$W"/haproxy.log; do
      [ -s "$f" ] && { log "last lines of $f:"; tail -5 "$f" >&2; }
    done
  fi
  restore_sys
  bench_cleanup "$rc"
}
trap on_exit EXIT
trap 'exit 130' INT TERM

# Open files per process: a proxy holds 2 per socket, the client 1, a node its share. Raising the
# hard limit needs CAP_SYS_RESOURCE; without it (some containers) the sockets per target are capped
# at what the hard limit allows a proxy, with a message, and the report says so.
NOFILE=$((2 * N + 20000))
[ "$NOFILE" -lt 1048576 ] && NOFILE=1048576
[ "$(cat /proc/sys/fs/nr_open)" -lt "$NOFILE" ] && set_sys fs.nr_open "$NOFILE"
[ "$(cat /proc/sys/fs/file-max)" -lt $((5 * N + 100000)) ] && set_sys fs.file-max $((5 * N + 100000))
if ! ulimit -Hn "$NOFILE" 2>/dev/null; then
  log "cannot raise the hard open-files limit ($(ulimit -Hn)) to $NOFILE: no CAP_SYS_RESOURCE here"
fi
NOFILE=$(ulimit -Hn)
[ "$NOFILE" = unlimited ] && NOFILE=1048576
ulimit -n "$NOFILE"
REQUESTED=$N
CAP=$(((NOFILE - 500) / 2 - MSG_CONNS))
if [ "$N" -gt "$CAP" ]; then
  N=$CAP
  STEPS=${SCALE_STEPS:-$((N / 4)),$((N / 2)),$N}
  STEPS=$(echo "$STEPS" | tr ',' '\n' | awk -v cap="$N" '{print ($1 > cap ? cap : $1)}' | paste -sd, -)
  log "WARNING: $REQUESTED sockets need $((2 * REQUESTED + 500)) open files in a proxy; the hard limit is $NOFILE: measuring $N sockets per target (steps $STEPS)"
fi
read -r LO HI <<<"${SCALE_PORT_RANGE:-1024 65535}"
set_sys net.ipv4.ip_local_port_range "$LO	$HI"
if [ -r /proc/sys/net/netfilter/nf_conntrack_count ] && [ "$(cat /proc/sys/net/netfilter/nf_conntrack_count)" -gt 0 ] &&
  [ "$(cat /proc/sys/net/netfilter/nf_conntrack_max)" -lt $((3 * N + 50000)) ]; then
  set_sys net.netfilter.nf_conntrack_max $((3 * N + 50000))
fi
[ "$(cat /proc/sys/net/core/somaxconn)" -lt 4096 ] && set_sys net.core.somaxconn 4096

need_apt=()
command -v nginx >/dev/null 2>&1 || need_apt+=(nginx)
command -v haproxy >/dev/null 2>&1 || need_apt+=(haproxy)
if [[ " $TARGETS " =~ \ (nginx|haproxy)\  ]] && [ ${#need_apt[@]} -gt 0 ]; then
  log "installing ${need_apt[*]} with apt-get"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

# ---------------------------------------------------------------- helpers
wait_tcp() { # PORT what
  for _ in $(seq 1 200); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.05
  done
  die "$2 did not listen on $1 (logs in $W)"
}
tcp_inuse() { awk '$1 == "TCP:" {print $3}' /proc/net/sockstat; }
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }
# Stops the given started pids (TERM, then KILL after 10 s) and forgets them.
stop_pids() {
  local p keep=() q
  for p in "$@"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "$@"; do
    for _ in $(seq 1 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  for q in "${PIDS[@]}"; do [[ " $* " == *" $q "* ]] || keep+=("$q"); done
  PIDS=("${keep[@]}")
}
# Waits (60 s at most) until the host's TCP sockets in use are back near the count at start, so a
# target's kernel readings do not include the last one's teardown.
TCP_BASE=$(tcp_inuse)
wait_drained() {
  for _ in $(seq 1 600); do
    [ "$(tcp_inuse)" -le $((TCP_BASE + 2000)) ] && return 0
    sleep 0.1
  done
  log "TCP sockets in use still $(tcp_inuse) (at start: $TCP_BASE)"
}

# 4 nodes on fresh ports, pinned to the load core: NODE_PORTS (words), NODE_PIDS, NODE1.
start_nodes() {
  local i port
  NODE_PORTS=""; NODE_PIDS=""
  for i in 1 2 3 4; do
    port=$(free_port)
    start "node-$i.$1" "$LCPU" "$MOCK" "$port" "node-$i"
    disown "$STARTED" # no "Killed" job notice when the storm kills node-1
    NODE_PORTS="$NODE_PORTS $port"; NODE_PIDS="$NODE_PIDS $STARTED"
    [ "$i" = 1 ] && NODE1=$STARTED
  done
  for port in $NODE_PORTS; do wait_http "http://127.0.0.1:$port/health" "mock-backend on $port"; done
}

# The gateway: bench/lib.sh's bench config (gw_conf) with the 4 nodes, the route in hop mode and
# max_connections raised above the sockets; pinned, one worker, no access log.
target_gateway() {
  local nodes="" i=1 p
  for p in $NODE_PORTS; do nodes="$nodes node-$i=$p"; i=$((i + 1)); done
  gw_conf "$W/conf/gw.toml" "$nodes" 'websocket = "hop"'
  sed -i "/^\[limits\]/a max_connections = $((N + MSG_CONNS + 10000))" "$W/conf/gw.toml"
  read -r PORT GW_ADMIN <<<"$(free_ports 2)"
  start gateway "$PCPU" "$GW" --config "$W/conf/gw.toml" --listen "127.0.0.1:$PORT" \
    --admin-listen "127.0.0.1:$GW_ADMIN" --workers 1 --access-log off
  PROXY_PIDS=$STARTED
  wait_http "http://127.0.0.1:$GW_ADMIN/readyz" gateway
}

# nginx as in bench/lib.sh's nginx_proxy_conf (WebSocket variant) with the 4 nodes round robin.
# worker_connections: both legs of every socket and a quarter more (with exactly 2 N + slack nginx
# warns "worker_connections are not enough, reusing connections" and drops handshakes near the
# top); nginx allocates them all at start, which shows in its RSS before the sockets, not per socket.
target_nginx() {
  local dir=$W/nginx p
  mkdir -p "$dir"
  PORT=$(free_port)
  {
    nginx_head "$dir" $(((2 * N + 2 * MSG_CONNS) * 5 / 4 + 1000)) "worker_rlimit_nofile $NOFILE;"
    cat <<EOF
  proxy_temp_path $dir/proxy;
  map \$http_upgrade \$connection_upgrade { default upgrade; '' close; }
  upstream nodes {
$(for p in $NODE_PORTS; do echo "    server 127.0.0.1:$p;"; done)
  }
EOF
    nginx_server "$PORT" nodes "$NGINX_WS_LOCATION"
  } >"$dir/nginx.conf"
  start nginx "$PCPU" nginx -p "$dir" -e "$dir/error.log" -c "$dir/nginx.conf"
  local master=$STARTED
  wait_tcp "$PORT" nginx
  PROXY_PIDS="$master $(pgrep -P "$master" | paste -sd' ' -)"
}

# HAProxy as in bench/lib.sh's haproxy_conf (its haproxy_head) with the 4 nodes round robin and maxconn above the sockets.
target_haproxy() {
  local p i=1
  PORT=$(free_port)
  {
    haproxy_head $((N + MSG_CONNS + 100))
    cat <<EOF
frontend fe
  bind 127.0.0.1:$PORT
  maxconn $((N + MSG_CONNS + 100))
  default_backend nodes
backend nodes
  balance roundrobin
EOF
    for p in $NODE_PORTS; do echo "  server n$i 127.0.0.1:$p"; i=$((i + 1)); done
  } >"$W/haproxy.cfg"
  start haproxy "$PCPU" haproxy -db -f "$W/haproxy.cfg"
  PROXY_PIDS=$STARTED
  wait_tcp "$PORT" haproxy
}

# ---------------------------------------------------------------- the run
log "work dir $W; $N sockets per target in steps $STEPS from $SOURCES; proxies on cpu $PCPU, nodes+wsload on cpu $LCPU; load average $(loadavg)"
for t in $TARGETS; do
  case $t in gateway | nginx | haproxy) ;; *) die "unknown target $t (gateway, nginx, haproxy)" ;; esac
  wait_drained
  start_nodes "$t"
  "target_$t"
  log "$t: pids $PROXY_PIDS on port $PORT, nodes on$NODE_PORTS; load average $(loadavg)"
  loadavg >"$W/load-$t.before"
  pidargs=()
  for p in $PROXY_PIDS; do pidargs+=(--pid "$p"); done
  msgargs=()
  [ "$MSG_SECS" != 0 ] && msgargs=(--msg-secs "$MSG_SECS" --msg-conns "$MSG_CONNS" --msg-inflight 4 --msg-bytes 64)
  taskset -c "$LCPU" "$WSLOAD" --mode scale --url "ws://127.0.0.1:$PORT/ws" --steps "$STEPS" \
    --source-addrs "$SOURCES" --read-buffer 4096 --concurrency "$CONC" --settle-ms "$SETTLE_MS" \
    "${pidargs[@]}" "${msgargs[@]}" --hop-kill "$NODE1" --hop-node node-1 --hop-wait-secs "$HOP_WAIT" \
    >"$W/scale-$t.json" 2> >(tee "$W/wsload-$t.err" >&2) || log "wsload against $t failed: $(tail -1 "$W/wsload-$t.err")"
  loadavg >"$W/load-$t.after"
  if [ "$t" = gateway ]; then
    curl -fsS "http://127.0.0.1:$GW_ADMIN/metrics" | grep -E '^hopping_(count_total|latency_seconds_(sum|count))' >"$W/gw-metrics.txt" || true
    grep -c 'hop deadline' "$W/gateway.log" >"$W/gw-hint-fallbacks.txt" || true
  fi
  # shellcheck disable=SC2086
  stop_pids $PROXY_PIDS $NODE_PIDS
  log "$t: done; load average $(loadavg)"
done

# Rebalance after a 5th node joins (the gateway's `rebalance = "on"`): measured only when the
# gateway's config accepts the key.
RB_CONF=$W/conf-rebalance/gw.toml
gw_conf "$RB_CONF" "node-1=1 node-2=2" "$(printf 'websocket = "hop"\nrebalance = "on"')"
if "$GW" --check-config "$RB_CONF" >/dev/null 2>"$W/rebalance-check.err"; then
  REBALANCE="the gateway accepts rebalance = \"on\", but this script does not measure the rebalance yet (to do: a 5th node joins, time until its share of sockets is served there)"
else
  REBALANCE="skipped: this gateway refuses rebalance = \"on\" ($(tail -1 "$W/rebalance-check.err" | sed -e 's/.*: //' -e 's/, expected.*//'))"
fi
log "rebalance after a 5th node joins: $REBALANCE"

if [ -n "${SCALE_KEEP:-}" ]; then
  mkdir -p "$SCALE_KEEP"
  cp "$W"/scale-*.json "$W"/wsload-*.err "$W"/load-* "$W"/*.log "$SCALE_KEEP"/ 2>/dev/null || true
  cp "$W"/gw-*.txt "$SCALE_KEEP"/ 2>/dev/null || true
  [ ! -f "$W/nginx/error.log" ] || cp "$W/nginx/error.log" "$SCALE_KEEP/nginx-error.log"
  log "raw results and logs copied to $SCALE_KEEP"
fi

# ---------------------------------------------------------------- report (markdown on stdout)
versions="$("$GW" --version 2>/dev/null | awk 'NR == 1') ($GW, tree at $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo ?)), nginx $(nginx -v 2>&1 | sed 's/.*nginx\///'), HAProxy $(haproxy -v | awk 'NR == 1 {print $3}')"
machine="$(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo), Linux $(uname -r)"
python3 - "$W" "$N" "$STEPS" "$NSRC" "$MSG_SECS" "$versions" "$machine" "$REBALANCE" "$TARGETS" "$REQUESTED" "$NOFILE" <<'PY'
import json, os, sys, datetime
w, n, steps, nsrc, msg_secs, versions, machine, rebalance, targets, requested, nofile = sys.argv[1:]
names = {"gateway": "hopping-gateway", "nginx": "nginx", "haproxy": "HAProxy"}
runs = {}
for t in targets.split():
    try:
        runs[t] = json.load(open(os.path.join(w, f"scale-{t}.json")))
    except Exception as e:
        print(f"<!-- {t}: no result ({e}) -->")
    load = [open(os.path.join(w, f"load-{t}.{k}")).read().strip() for k in ("before", "after") if os.path.exists(os.path.join(w, f"load-{t}.{k}"))]
    if t in runs:
        runs[t]["_load"] = " → ".join(load)
ts = list(runs)
def cell(v, fmt="{}"):
    return "–" if v is None else fmt.format(v)
def row(label, f):
    out = []
    for t in ts:
        try:
            out.append(f(runs[t]))
        except Exception:
            out.append("–")
    print(f"| {label} | " + " | ".join(out) + " |")
def last(r):
    return r["steps"][-1]
now = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
capped = "" if requested == n else f" (SCALE_SOCKETS={int(requested):,} capped by the open-files limit {nofile})"
print(f"Scale run {now}: {int(n):,} idle ws:// sockets per target{capped} (steps {steps}) over {nsrc} client source addresses, "
      f"4 mock-backend nodes; {machine}; {versions}.\n")
print("| | " + " | ".join(names.get(t, t) for t in ts) + " |")
print("|---|" + "---:|" * len(ts))
row("sockets open (failed)", lambda r: f"{last(r)['conns']:,} ({last(r)['failed']})")
for i, s in enumerate(runs[ts[0]]["steps"] if ts else []):
    row(f"proxy RSS per socket at {s['target']:,}, KiB", lambda r, i=i: cell(r["steps"][i]["kib_per_conn"], "{:.2f}"))
row("proxy RSS before the sockets, MiB", lambda r: f"{r['base']['rss_kib'] / 1024:.1f}")
row("kernel per WebSocket (4 TCP sockets, host-wide), KiB", lambda r: cell(last(r)["kernel_kib_per_conn"], "{:.2f}"))
row("proxy CPU to accept, µs per socket", lambda r: f"{sum(s['cpu_ms_open'] for s in r['steps']) * 1000 / last(r)['conns']:.0f}")
row("sockets opened per second (client-bound)", lambda r: f"{sum(s['conns'] - (r['steps'][k - 1]['conns'] if k else 0) for k, s in enumerate(r['steps'])) / sum(s['open_secs'] for s in r['steps']):,.0f}")
if msg_secs != "0":
    row(f"CPU per message at {int(n):,} open, µs (64 × 4 in flight, 64 B)", lambda r: cell(r["msg"]["cpu_us_per_msg"], "{:.2f}"))
    row("messages per second (errors)", lambda r: f"{r['msg']['msgs_per_sec']:,.0f} ({r['msg']['errors']})")
row("node-1 killed: its sockets", lambda r: f"{r['storm']['on_hop_node']:,}")
row("… served again by another node", lambda r: f"{r['storm']['hopped']:,}")
row("… closed", lambda r: f"{r['storm']['closed']:,}")
row("… all settled (served again or closed) after, ms", lambda r: cell(r["storm"]["settled_ms"], "{:,.0f}"))
row("… served again p50 / p99 / max, ms", lambda r: "–" if not r["storm"]["hopped"] else
    f"{r['storm']['hop_ms']['p50']:,.0f} / {r['storm']['hop_ms']['p99']:,.0f} / {r['storm']['hop_ms']['max']:,.0f}")
row("… closed p50 / max, ms", lambda r: "–" if not r["storm"]["closed"] else
    f"{r['storm']['close_ms']['p50']:,.0f} / {r['storm']['close_ms']['max']:,.0f}")
row("sockets of other nodes closed", lambda r: f"{r['storm']['closed_elsewhere']:,}")
row("proxy CPU during the storm, ms", lambda r: cell(sum(x for x in r["storm"]["cpu_ms_during_storm"] if x is not None)))
row("load average (1/5/15 min) before → after", lambda r: r["_load"])
print(f"\nRebalance after a 5th node joins: {rebalance}.")
PY
for f in gw-metrics.txt gw-hint-fallbacks.txt; do
  [ -s "$W/$f" ] && { echo; echo "gateway $f:"; sed 's/^/    /' "$W/$f"; }
done
true
