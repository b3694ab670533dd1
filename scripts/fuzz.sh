#!/usr/bin/env bash
# `make fuzz`: each cargo-fuzz target for FUZZ_SECONDS (default 60). Not part of `make test` or CI.
# cargo-fuzz needs nightly features (-Z flags for the sanitizer): a nightly toolchain is used when
# rustup has one, otherwise the stable one with RUSTC_BOOTSTRAP=1.
# A crash leaves its input in fuzz/artifacts/<target>/; replay it with
#   cargo +nightly fuzz run <target> fuzz/artifacts/<target>/<file>
# and turn it into a regression test next to the code it broke.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked
secs="${FUZZ_SECONDS:-60}"
if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
  fuzz=(cargo +nightly fuzz)
else
  export RUSTC_BOOTSTRAP=1
  fuzz=(cargo fuzz)
fi
for t in config conn_id request_head h2_frames h1_head h1_chunked h1_differential h1_response_head handover; do
  echo "== fuzz target $t for ${secs}s"
  "${fuzz[@]}" run "$t" -- -max_total_time="$secs"
done
