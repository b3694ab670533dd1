#!/usr/bin/env bash
# The layer map of `internal/src` (README "Contributing"), checked: every `crate::<module>` path in
# shipped code must name a module of a LOWER layer than the file's own module. Layers, bottom up:
#   0  events drain notify logging watch  leaves: they import no other module
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
#   11 upgrade                            the gateway's own upgrade: handover of listeners and state
#   12 admin
#   13 server                             listeners, start-up, shutdown (lib.rs is above all)
# Comments and unit-test modules (`tests.rs`, or `#[cfg(test)] mod x {` to the end of the file) are
# not checked: a test may build upper layers to exercise a lower one in context.
# Second rule: no file-level import cycle inside one module directory. Every `crate::`, `super::`
# and `self::` path of shipped code (use groups included) is resolved to a module path; an import
# between two entries of one directory (`a.rs` or `a/` and `b.rs` or `b/`, the files under `a/`
# counting as `a`) is an edge, and a cycle of edges fails with its modules and the imports that make
# it. Not followed: names brought in by a glob (`use super::*`) -- write the path out instead. The
# crate root is left to the layer map.
# Third rule, the sides of `proxy/` (README "Contributing"): `proxy/downstream/` is the client side
# (client -> gateway), `proxy/upstream/` the node side (gateway -> node). A file under one side
# never imports the other side, and the HTTP/1.1 code both sides share (`proxy/http1_codec/`)
# imports neither: what both sides need sits in a top-level file of `proxy/` (or in
# `http1_codec/`), which both may import. The phases (the top-level files) and `proxy/websocket/`
# (which relays between a client and a node) may import both sides. Resolved like the second rule
# (shipped code; `*_tests.rs` files and inline test modules are not checked).
# Exit status 1 with one line per import against the map or cycle; 0 when both hold.
set -euo pipefail
cd "$(dirname "$0")/../internal/src"

rank() {
  case "$1" in
    events | drain | notify | logging | watch) echo 0 ;;
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
    upgrade) echo 11 ;;
    admin) echo 12 ;;
    server) echo 13 ;;
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

# Edges "DIR<TAB>FROM<TAB>TO<TAB>FILE:LINE" between entries of one module directory.
# shellcheck disable=SC2016
edges_awk='
# Prints one line per file-level import inside a module directory: "DIR FROM TO FILE:LINE".
# FILE'\''s module path comes from its name; every crate::/super::/self:: path (use groups included)
# is resolved to a module path; an import between two different entries of one directory is an edge.
function modpath(f,   p) {
  p = f; sub(/\.rs$/, "", p); sub(/(^|\/)mod$/, "", p); gsub(/\//, "::", p); return p
}
function parent(p) { if (p !~ /::/) return ""; sub(/::[^:]+$/, "", p); return p }
function join(a, b) { return a == "" ? b : a "::" b }
# Resolves `path` (text starting with crate/super/self, may end in a {group}) for module `p`;
# queues group items; records resolved module paths in `found`.
function resolve(path, p, line,   cur, seg, rest, n, i, depth, c, item, items, k) {
  cur = ""
  if (path ~ /^crate::/) { cur = ""; rest = substr(path, 8) }
  else if (path ~ /^self::/) { cur = p; rest = substr(path, 7) }
  else if (path ~ /^super::/) { cur = parent(p); rest = substr(path, 8) }
  else return
  while (rest ~ /^super::/) { cur = parent(cur); rest = substr(rest, 8) }
  while (match(rest, /^[a-z_][a-z0-9_]*/)) {
    seg = substr(rest, 1, RLENGTH); rest = substr(rest, RLENGTH + 1)
    if (seg == "self") break
    cur = join(cur, seg)
    if (rest !~ /^::/) break
    rest = substr(rest, 3)
  }
  found[++nfound] = cur SUBSEP line
  if (substr(rest, 1, 1) == "{") {
    depth = 0; item = ""; k = 0
    for (i = 1; i <= length(rest); i++) {
      c = substr(rest, i, 1)
      if (c == "{") { depth++; if (depth == 1) continue }
      if (c == "}") { depth--; if (depth == 0) { items[++k] = item; break } }
      if (c == "," && depth == 1) { items[++k] = item; item = ""; continue }
      item = item c
    }
    for (i = 1; i <= k; i++) {
      gsub(/[[:space:]]/, "", items[i])
      if (items[i] == "" || items[i] == "self" || items[i] ~ /^[*A-Z]/) continue
      resolve("self::" items[i], cur, line)
    }
  }
}
function flush(   text, pos, before, m, p, line, i, cp, tp, np, nt, a, b, j, from, to, dir, full) {
  if (FNAME == "") return
  p = modpath(FNAME); nfound = 0
  text = buf
  while (match(text, /(crate|super|self)::/)) {
    before = substr(text, RSTART - 1, 1)
    if (RSTART > 1 && before ~ /[A-Za-z0-9_:$]/) { text = substr(text, RSTART + RLENGTH); continue }
    # Line number of the match: count the line markers before it.
    pre = substr(text, 1, RSTART - 1)
    while (match(pre, /\001[0-9]+\001/)) { lastline = substr(pre, RSTART + 1, RLENGTH - 2); pre = substr(pre, RSTART + RLENGTH) }
    match(text, /(crate|super|self)::/)
    full = substr(text, RSTART)
    gsub(/\001[0-9]+\001/, "", full)
    # The path text: up to the end of a brace group, or the first character that cannot be in a path.
    if (match(full, /^[a-z_]+(::[a-z_A-Z0-9]+)*::\{/)) {
      j = RLENGTH; depth = 1
      for (i = j + 1; i <= length(full) && depth > 0; i++) {
        c = substr(full, i, 1); if (c == "{") depth++; if (c == "}") depth--
      }
      path = substr(full, 1, i - 1)
    } else { match(full, /^[a-z_]+(::[a-zA-Z_0-9]+)*/); path = substr(full, 1, RLENGTH) }
    resolve(path, p, lastline)
    match(text, /(crate|super|self)::/)
    text = substr(text, RSTART + RLENGTH)
  }
  for (i = 1; i <= nfound; i++) {
    split(found[i], a, SUBSEP); tp = a[1]; line = a[2]
    np = split(p, pa, "::"); nt = split(tp, ta, "::")
    for (j = 1; j <= np && j <= nt && pa[j] == ta[j]; j++) {}
    if (j > np || j > nt) continue   # an ancestor or a descendant: not a sibling
    dir = ""; for (k = 1; k < j; k++) dir = join(dir, pa[k])
    print dir "\t" pa[j] "\t" ta[j] "\t" FNAME ":" line
  }
}
FNR == 1 { flush(); FNAME = FILENAME; buf = ""; intest = 0; prev = "" }
intest { next }
/^[[:space:]]*\/\// { prev = $0; next }
prev ~ /^[[:space:]]*#\[cfg\(test\)\]/ && $0 ~ /^[[:space:]]*(pub(\([a-z]+\))? )?mod [a-z_]+ *\{/ { intest = 1; next }
{ l = $0; sub(/\/\/.*/, "", l); buf = buf "\001" FNR "\001" l "\n"; prev = $0 }
END { flush() }

'
# One line per cycle among the edges of one directory, with the import that makes each step.
# shellcheck disable=SC2016
cycles_awk='
# Input: "DIR<TAB>FROM<TAB>TO<TAB>FILE:LINE" edges; prints one line per import cycle among the
# entries of one directory, with the import that closes each step.
BEGIN { FS = "\t" }
{
  key = $1 SUBSEP $2 SUBSEP $3
  if (!(key in at)) { at[key] = $4; adj[$1 SUBSEP $2] = adj[$1 SUBSEP $2] " " $3 }
  dirs[$1] = 1; nodes[$1 SUBSEP $2] = 1
}
function name(d, n) { return d == "" ? n : d "::" n }
function dfs(d, n,   list, k, i, m, cyc, j, members, sorted) {
  color[d SUBSEP n] = 1; stack[++depth] = n
  k = split(adj[d SUBSEP n], list, " ")
  for (i = 1; i <= k; i++) {
    m = list[i]
    if (color[d SUBSEP m] == 1) {
      for (j = depth; j >= 1 && stack[j] != m; j--) {}
      cyc = ""; locs = ""
      for (; j <= depth; j++) {
        cyc = cyc name(d, stack[j]) " -> "
        nxt = (j < depth) ? stack[j + 1] : m
        locs = locs (locs == "" ? "" : ", ") at[d SUBSEP stack[j] SUBSEP nxt]
      }
      print "check-layers: import cycle: " cyc name(d, m) " (" locs ")"
      bad = 1
    } else if (color[d SUBSEP m] == 0) dfs(d, m)
  }
  color[d SUBSEP n] = 2; depth--
}
END {
  for (dn in nodes) { split(dn, p, SUBSEP); if (color[dn] == 0) dfs(p[1], p[2]) }
  exit bad
}

'
edges=$(find . -name '*.rs' | sed 's|^\./||' |
  grep -Ev '(^|/)(tests|tests_[a-z_]+|[a-z_]+_tests)\.rs$' | sort |
  xargs awk "$edges_awk" | awk -F '\t' '$1 != ""' | sort -u)
cycles=0
printf '%s\n' "$edges" | awk "$cycles_awk" || cycles=1

# The sides of proxy/: an edge inside `proxy` from one side to the other, or from the shared codec
# to either side.
sides=0
printf '%s\n' "$edges" | awk -F '\t' '
  $1 == "proxy" && (($2 == "downstream" && $3 == "upstream") || ($2 == "upstream" && $3 == "downstream") ||
    ($2 == "http1_codec" && ($3 == "downstream" || $3 == "upstream"))) {
    print "check-layers: " $4 ": proxy::" $2 " imports proxy::" $3 ": the sides of proxy/ never import each other (shared code goes in a top-level file of proxy/ or in http1_codec/)"
    bad = 1
  }
  END { exit bad }' || sides=1

if [ "$bad" -ne 0 ]; then
  echo "check-layers: imports run against the layer map (see the top of scripts/check-layers.sh)" >&2
fi
if [ "$cycles" -ne 0 ]; then
  echo "check-layers: files of one module import each other in a cycle: move the shared item down" >&2
  echo "  to the file both use, or into a new leaf file (see the top of scripts/check-layers.sh)" >&2
fi
if [ "$sides" -ne 0 ]; then
  echo "check-layers: proxy/downstream/ and proxy/upstream/ import each other (see the top of scripts/check-layers.sh)" >&2
fi
[ "$bad" -eq 0 ] && [ "$cycles" -eq 0 ] && [ "$sides" -eq 0 ] || exit 1
echo "check-layers: every import points down the layer map; no import cycle inside a module; proxy/downstream and proxy/upstream do not import each other"

# Third rule, for the mock backend (`mock-backend/src`): no file-level import cycle among the files
# of one directory, its crate root's included (the same edges and cycle search as above; the roots
# lib.rs and main.rs are above every file and left out).
cd ../../mock-backend/src
mock_cycles=0
find . -name '*.rs' | sed 's|^\./||' |
  grep -Ev '^(lib|main)\.rs$' |
  grep -Ev '(^|/)(tests|tests_[a-z_]+|[a-z_]+_tests)\.rs$' | sort |
  xargs awk "$edges_awk" | sort -u | awk "$cycles_awk" || mock_cycles=1
if [ "$mock_cycles" -ne 0 ]; then
  echo "check-layers: files of mock-backend/src import each other in a cycle: move the shared item" >&2
  echo "  down to the file both use, or into a new leaf file" >&2
  exit 1
fi
echo "check-layers: no import cycle inside mock-backend/src"
