#!/usr/bin/env bash
# The layer map of `internal/src` (README "Contributing"), checked: every `crate::<module>` path in
# shipped code must name a module of a LOWER layer than the file's own module. Layers, bottom up:
#   0  events drain notify logging        leaves: they import no other module
#   1  metrics                            (carries the events hub)
#   2  tls::client                        upstream TLS connector (below config: clusters hold it)
#   3  config
#   4  tls                                certificates, the TLS listener (tls/*.rs but client)
#   5  registry                           nodes, health, probes
#   6  selection                          picks a node from a node set and criteria
#   7  routing                            route tables, the atomic swap, reloads
#   8  discovery                          DNS discovery (drives routing)
#   9  hopper                             affinity, bindings, hops
#   10 proxy                              the request path
#   11 admin
#   12 server                             listeners, start-up, shutdown (lib.rs is above all)
# Comments and unit-test modules (`tests.rs`, or `#[cfg(test)] mod x {` to the end of the file) are
# not checked: a test may build upper layers to exercise a lower one in context.
# Exit status 1 with one line per import against the map; 0 when it holds.
set -euo pipefail
cd "$(dirname "$0")/../internal/src"

rank() {
  case "$1" in
    events | drain | notify | logging) echo 0 ;;
    metrics) echo 1 ;;
    tls::client) echo 2 ;;
    config) echo 3 ;;
    tls) echo 4 ;;
    registry) echo 5 ;;
    selection) echo 6 ;;
    routing) echo 7 ;;
    discovery) echo 8 ;;
    hopper) echo 9 ;;
    proxy) echo 10 ;;
    admin) echo 11 ;;
    server) echo 12 ;;
    *) echo "" ;;
  esac
}

# module_of FILE: the layer a file belongs to (tls/client.rs and tls/client/* are tls::client).
module_of() {
  case "$1" in
    tls/client.rs | tls/client/*) echo "tls::client" ;;
    */*) echo "${1%%/*}" ;;
    *) echo "${1%.rs}" ;;
  esac
}

bad=0
while IFS= read -r file; do
  [ "$file" = lib.rs ] && continue
  case "$file" in */tests.rs | tests.rs) continue ;; esac
  own=$(module_of "$file")
  own_rank=$(rank "$own")
  if [ -z "$own_rank" ]; then
    echo "check-layers: $file: module '$own' is not on the layer map (add it to scripts/check-layers.sh)"
    bad=1
    continue
  fi
  # Shipped lines only: drop comments and everything from an inline test module on.
  while IFS= read -r hit; do
    line=${hit%%:*}
    path=${hit#*:}
    target=${path#crate::}
    case "$path" in
      crate::tls::client*) target="tls::client" ;;
      *) target=${target%%::*} ;;
    esac
    [ "$target" = "$own" ] && continue
    [ "$own" = "tls::client" ] && [ "$target" = tls ] && continue
    [ "$own" = tls ] && [ "$target" = "tls::client" ] && continue
    t_rank=$(rank "$target")
    if [ -z "$t_rank" ]; then
      echo "check-layers: $file:$line: crate::$target is not on the layer map"
      bad=1
    elif [ "$t_rank" -ge "$own_rank" ]; then
      echo "check-layers: $file:$line: $own (layer $own_rank) imports crate::$target (layer $t_rank): imports must point down"
      bad=1
    fi
  done < <(awk '
      /^[[:space:]]*\/\// { prev = $0; next }
      prev ~ /^[[:space:]]*#\[cfg\(test\)\]/ && $0 ~ /^[[:space:]]*(pub(\([a-z]+\))? )?mod [a-z_]+ *\{/ { exit }
      {
        line = $0; sub(/\/\/.*/, "", line)
        while (match(line, /crate::[a-z_]+(::client)?/)) {
          print FNR ":" substr(line, RSTART, RLENGTH)
          line = substr(line, RSTART + RLENGTH)
        }
        prev = $0
      }' "$file")
done < <(find . -name '*.rs' | sed 's|^\./||' | sort)

if [ "$bad" -ne 0 ]; then
  echo "check-layers: imports run against the layer map (see the top of scripts/check-layers.sh)" >&2
  exit 1
fi
echo "check-layers: every import points down the layer map"
