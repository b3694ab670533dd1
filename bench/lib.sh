# shellcheck shell=bash
# Sourced by every bench script (directly, or through ws-common.sh for the WebSocket and h2 flood
# ones): log lines, the shared settings, the work directory with its cleanup, processes started
# pinned to one core and stopped, CPU ticks of pids, free loopback ports and the readiness waits,
# and config text (the bench gateway's, its nodes and catch-all route, nginx and HAProxy as the
# proxies of the bench rows). Expects `set -euo pipefail`; bench_workdir sets W (the work directory,
# for logs and configs) and PIDS (the started pids) that the other functions use. BENCH_TAG names
# the log lines (default "bench").

log() { printf '[%s %s] %s\n' "${BENCH_TAG:-bench}" "$(date +%T)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# bench_settings: what the measuring scripts share, from the environment: SECS (BENCH_SECONDS, 10 s
# per measurement), ROUNDS (BENCH_ROUNDS, 3 interleaved rounds), PCPU (BENCH_PROXY_CPU, 1: the core
# of the proxy under test), LCPU (BENCH_LOAD_CPU, 0: the core of the load, backend and nodes) and
# CLK_TCK (the unit of /proc/<pid>/stat's times); PATH gains /usr/sbin (nginx and HAProxy on
# Debian) and ~/.cargo/bin (oha).
# shellcheck disable=SC2034 # the settings are read by the calling script
bench_settings() {
  SECS=${BENCH_SECONDS:-10}
  ROUNDS=${BENCH_ROUNDS:-3}
  PCPU=${BENCH_PROXY_CPU:-1}
  LCPU=${BENCH_LOAD_CPU:-0}
  CLK_TCK=$(getconf CLK_TCK)
  export PATH="$PATH:/usr/sbin${HOME:+:$HOME/.cargo/bin}"
}

# bench_workdir PREFIX: a fresh work directory W (/tmp/PREFIX.XXXXXX, readable by the processes the
# script starts), an empty PIDS, and on exit (Ctrl-C included) bench_cleanup.
bench_workdir() {
  W=$(mktemp -d "/tmp/$1.XXXXXX")
  chmod 755 "$W"
  PIDS=()
  trap bench_cleanup EXIT
  trap 'exit 130' INT TERM
}

# bench_cleanup [RC]: stops every started process, newest first, removes W and exits with RC (default:
# the status the script is exiting with); W is kept (and named on stderr) when that status is not 0 or
# BENCH_KEEP=1, with every config, log and raw output in it.
bench_cleanup() {
  local rc=${1:-$?} i rev=()
  trap - EXIT INT TERM
  for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do rev+=("${PIDS[$i]}"); done
  stop "${rev[@]}"
  if [ "${BENCH_KEEP:-0}" = 1 ] || [ "$rc" -ne 0 ]; then log "work directory kept: $W"; else rm -rf "$W"; fi
  exit "$rc"
}

# stop PID...: SIGTERM to each, SIGKILL to any still running 5 s later; each is reaped and dropped
# from PIDS.
stop() {
  local p q alive keep=()
  for p in "$@"; do kill -TERM "$p" 2>/dev/null || true; done
  for _ in $(seq 1 50); do
    alive=0
    for p in "$@"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ "$alive" -eq 0 ] && break
    sleep 0.1
  done
  for p in "$@"; do
    kill -KILL "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  for q in "${PIDS[@]}"; do
    for p in "$@"; do [ "$q" = "$p" ] && continue 2; done
    keep+=("$q")
  done
  PIDS=("${keep[@]}")
}

# stop_all: stop every process in PIDS.
stop_all() { stop "${PIDS[@]}"; }

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

# wait_tcp PORT what: until 127.0.0.1:PORT accepts a connection, 10 s at most.
wait_tcp() {
  for _ in $(seq 1 200); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.05
  done
  die "$2 did not listen on $1 (logs in $W)"
}

# gw_conf FILE NODES [EXTRA]: writes the bench gateway config to FILE: cluster "bench" with the
# nodes given as "id=port" words in NODES, one catch-all route "all", then the TOML lines EXTRA.
# Configs live in their own directory: the gateway watches its config file's directory, and log
# files written next to it would wake the watcher on every line. Like nginx's and HAProxy's settings
# in run.sh: pooled node connections survive the pauses between interleaved measurements (the
# default, 4s, would empty the pool between them), and a connect may take up to 5 s as with
# HAProxy's "timeout connect 5s" (the default, 1s, trips on the WebSocket phase's connect bursts on
# a starved core: 5 timeouts in a row eject the only node).
gw_conf() {
  local n
  mkdir -p "$(dirname "$1")"
  {
    cat <<'CONF'
[server]
shutdown_timeout = "1s"
[limits]
upstream_idle_timeout = "600s"
connect_timeout = "5s"
[health]
interval = "30s"
timeout = "2s"
[[clusters]]
name = "bench"
CONF
    toml_nodes "$2"
    toml_catch_all all bench
    printf '%s\n' "${3:-}"
  } >"$1"
}

# toml_nodes NODES: prints one [[clusters.nodes]] table per "id=port" word in NODES (address
# 127.0.0.1:port), indented under the [[clusters]] table printed before.
toml_nodes() {
  local n
  for n in $1; do
    printf '  [[clusters.nodes]]\n  id = "%s"\n  addr = "127.0.0.1:%s"\n' "${n%%=*}" "${n#*=}"
  done
}

# toml_catch_all ROUTE CLUSTER: prints the [[routes]] table ROUTE sending every path to CLUSTER.
toml_catch_all() {
  printf '[[routes]]\nid = "%s"\nmatch = { path_prefix = "/" }\ncluster = "%s"\n' "$1" "$2"
}

# nginx_head DIR CONNECTIONS [MAIN]: prints the top of an nginx.conf keeping its pid, error log and
# body temp files in DIR: "user root;" when run as root (else an empty line), one worker, the
# main-context line MAIN if given, foreground, CONNECTIONS connections per worker, then the opening
# of the http block with the access log off. The caller prints the rest of the http block.
nginx_head() {
  if [ "$(id -u)" -eq 0 ]; then echo "user root;"; else echo; fi
  echo "worker_processes 1;"
  if [ -n "${3:-}" ]; then echo "$3"; fi
  cat <<EOF
daemon off;
pid $1/nginx.pid;
error_log $1/error.log warn;
events { worker_connections $2; }
http {
  access_log off;
  client_body_temp_path $1/body;
EOF
}

# nginx as the reverse proxy of the bench rows: DIR (config, temp paths, pid), LISTEN_PORT,
# UPSTREAM_PORT, WS (1: upgrade headers and hour-long timeouts; 0: keep-alive upstream), NOFILE
# (worker_rlimit_nofile; empty: none). Writes DIR/nginx.conf.
nginx_proxy_conf() {
  local dir=$1 port=$2 up=$3 ws=$4 nofile=${5:-}
  mkdir -p "$dir"
  # nginx touches its whole connection array at start: size it for the phase (peak RSS is reported);
  # for WebSockets the real bound is worker_rlimit_nofile.
  local extra="" conns=4096
  [ "$ws" = 1 ] && conns=65536
  [ "$ws" = 1 ] && extra=$NGINX_WS_LOCATION
  [ "$ws" = 0 ] && extra='proxy_set_header Connection "";'
  {
    nginx_head "$dir" "$conns" "${nofile:+worker_rlimit_nofile $nofile;}"
    cat <<EOF
  proxy_temp_path $dir/proxy;
  keepalive_requests 100000000;
  keepalive_timeout 600s;
  map \$http_upgrade \$connection_upgrade { default upgrade; '' close; }
  upstream node { server 127.0.0.1:$up; keepalive 128; keepalive_requests 100000000; keepalive_timeout 600s; }
EOF
    nginx_server "$port" node "$extra"
  } >"$dir/nginx.conf"
}

# The location directives that carry WebSockets through the bench nginx: the upgrade headers and
# hour-long timeouts.
# shellcheck disable=SC2016 # nginx's variables, not the shell's
NGINX_WS_LOCATION='proxy_set_header Upgrade $http_upgrade; proxy_set_header Connection $connection_upgrade; proxy_read_timeout 3600s; proxy_send_timeout 3600s;'

# The server block that ends every bench nginx.conf's http block, on stdout: LISTEN_PORT, UPSTREAM
# (the upstream block's name), EXTRA (more location directives).
nginx_server() {
  cat <<EOF
  server {
    listen 127.0.0.1:$1 backlog=4096;
    location / {
      proxy_pass http://$2;
      proxy_http_version 1.1;
      proxy_set_header Host \$host;
      proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
      proxy_set_header X-Forwarded-Proto \$scheme;
      $3
    }
  }
}
EOF
}

# The global and defaults sections every bench HAProxy shares (one thread, keep-alive both ways,
# upstream reuse, X-Forwarded-For), on stdout: MAXCONN.
haproxy_head() {
  cat <<EOF
global
  nbthread 1
  maxconn $1
defaults
  mode http
  option http-keep-alive
  option forwardfor
  http-reuse always
  timeout connect 5s
  timeout client 600s
  timeout server 600s
  timeout http-keep-alive 600s
  timeout tunnel 3600s
EOF
}

# HAProxy as the reverse proxy of the bench rows: OUT (the config file), LISTEN_PORT, UPSTREAM_PORT,
# MAXCONN.
haproxy_conf() {
  {
    haproxy_head "$4"
    cat <<EOF
frontend fe
  bind 127.0.0.1:$2
  default_backend nodes
backend nodes
  server n1 127.0.0.1:$3
EOF
  } >"$1"
}
