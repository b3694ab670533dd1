#!/usr/bin/env bash
# `make dist`: the shipped gateway, target/dist/hopping-gateway. The `dist` profile (Cargo.toml:
# release with fat LTO and one codegen unit) built with profile-guided optimisation (PGO; rustc
# book, "Profile-guided Optimization"), in four steps:
#   1. an instrumented build (`-Cprofile-generate`) in target/pgo-gen;
#   2. the training run: tests/examples/pgo_train.rs drives it through HTTP/1.1, WebSocket, gRPC over
#      h2c, TLS and a WebSocket hop against two mock-backends, about 15 s (HOPGW_PGO_SECS per phase, 2);
#   3. llvm-profdata merges the counts into target/pgo/gateway-<hash>.profdata;
#   4. the final build with `-Cprofile-use`, laid out by those counts (hot code together, cold code
#      apart): bench/README.md "The shipped build: LTO, one codegen unit, PGO" has what it saves.
# llvm-profdata comes from rustup's llvm-tools component (added here when missing), else from a
# Debian llvm-N package of rustc's LLVM major version. HOPGW_PGO=0, or no llvm-profdata, builds the
# plain dist profile (and says so). Extra RUSTFLAGS from the environment are kept. Nothing is rebuilt
# while the PGO binary is newer than every source, the training run and this script.
set -euo pipefail
cd "$(dirname "$0")/.."
CARGO=${CARGO:-cargo}
say() { printf 'dist: %s\n' "$*" >&2; }

plain() {
  say "$1: building the dist profile without PGO"
  exec $CARGO build --profile dist --locked -p hopping-gateway
}

[ "${HOPGW_PGO:-1}" = 0 ] && plain "HOPGW_PGO=0"

# llvm-profdata of rustc's own LLVM (the raw profile format follows the LLVM version).
LLVM_MAJOR=$(rustc -vV | awk '/^LLVM version:/ {split($3, v, "."); print v[1]}')
profdata() {
  local host sysroot
  host=$(rustc -vV | awk '/^host:/ {print $2}')
  sysroot=$(rustc --print sysroot)
  local tool=$sysroot/lib/rustlib/$host/bin/llvm-profdata
  if [ ! -x "$tool" ] && command -v rustup >/dev/null; then
    rustup component add llvm-tools >/dev/null 2>&1 || true
  fi
  if [ -x "$tool" ]; then echo "$tool"; return; fi
  command -v "llvm-profdata-$LLVM_MAJOR" || true
}
PROFDATA=$(profdata)
[ -n "$PROFDATA" ] || plain "no llvm-profdata (rustup component add llvm-tools, or apt-get install llvm-$LLVM_MAJOR)"

ROOT=$(pwd)
OUT=$ROOT/target/pgo
# Up to date, as make would judge it: a PGO binary newer than every file it is built or trained from.
BIN=$ROOT/target/dist/hopping-gateway
if [ -x "$BIN" ] && [ -f "$OUT/done" ] && [ ! "$OUT/done" -ot "$BIN" ] &&
  [ -z "$(find cmd internal mock-backend tests/examples/pgo_train.rs tests/support Cargo.toml Cargo.lock \
    rust-toolchain.toml scripts/dist.sh -newer "$OUT/done" -print -quit)" ]; then
  say "target/dist/hopping-gateway (PGO) is up to date"
  exit 0
fi
rm -rf "$OUT"
mkdir -p "$OUT/bin" "$OUT/raw"
say "building the training run and the mock-backend (release)"
# The whole workspace, as `make build` does (a package alone would resolve other crate features and
# rebuild the shared dependencies both ways).
$CARGO build --release --locked --workspace
$CARGO build --release --locked -p integration-tests --features bench --example pgo-train
say "building the instrumented gateway (target/pgo-gen)"
# Build scripts and proc macros are instrumented too; their counts go to $OUT/build, not the profile.
LLVM_PROFILE_FILE=$OUT/build/%p.profraw RUSTFLAGS="${RUSTFLAGS:-} -Cprofile-generate=$OUT/build" \
  $CARGO build --profile dist --locked --target-dir target/pgo-gen -p hopping-gateway
ln -sf "$ROOT/target/pgo-gen/dist/hopping-gateway" "$OUT/bin/hopping-gateway"
ln -sf "$ROOT/target/release/mock-backend" "$OUT/bin/mock-backend"
say "training run"
HOPGW_TEST_BIN_DIR=$OUT/bin LLVM_PROFILE_FILE=$OUT/raw/gateway-%p.profraw \
  "$ROOT/target/release/examples/pgo-train" --secs "${HOPGW_PGO_SECS:-2}" >&2
# The file's name carries its hash: cargo tracks RUSTFLAGS, not the file, so a new profile must be a
# new flag for the dependencies to be rebuilt with it.
"$PROFDATA" merge -o "$OUT/merged.profdata" "$OUT"/raw/*.profraw
PROFILE=$OUT/gateway-$(sha256sum "$OUT/merged.profdata" | cut -c1-16).profdata
mv "$OUT/merged.profdata" "$PROFILE"
say "building the gateway with the profile ($PROFILE)"
RUSTFLAGS="${RUSTFLAGS:-} -Cprofile-use=$PROFILE" \
  $CARGO build --profile dist --locked -p hopping-gateway
touch "$OUT/done"
say "target/dist/hopping-gateway (PGO)"
