#!/usr/bin/env bash
# `make fuzz`: each cargo-fuzz target for FUZZ_SECONDS (default 60). Not part of `make test` or CI.
# cargo-fuzz needs nightly features; the stable toolchain allows them with RUSTC_BOOTSTRAP=1.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked
secs="${FUZZ_SECONDS:-60}"
for t in config conn_id request_head; do
  echo "== fuzz target $t for ${secs}s"
  RUSTC_BOOTSTRAP=1 cargo fuzz run "$t" -- -max_total_time="$secs"
done
