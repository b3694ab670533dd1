# hopping-gateway — see README.md. run and test use the release profile (one build serves both); dist builds
# the shipped gateway binary (the dist profile: release with LTO, Cargo.toml, and PGO), which bench measures.
CARGO ?= cargo

.PHONY: build dist run test lint fmt bench fuzz clean

build:
	$(CARGO) build --release --workspace

## The gateway binary as shipped: target/dist/hopping-gateway (release with LTO and profile-guided
## optimisation: an instrumented build, a 15 s training run, the final build; scripts/dist.sh, ~15 min).
dist:
	CARGO="$(CARGO)" ./scripts/dist.sh

## Two mock backends (8081, 8082) and the gateway on 8000 with the embedded Go-compatible defaults.
run: build
	./scripts/run.sh

## The whole suite: unit tests, mock-backend tests and the integration scenarios (real processes).
test:
	./scripts/test-deps.sh
	$(CARGO) build --release --workspace --all-targets
	@if $(CARGO) nextest --version >/dev/null 2>&1; then \
		HOPGW_PREBUILT=1 $(CARGO) nextest run --release --workspace --profile ci; \
	else \
		echo "cargo-nextest not found; using cargo test"; \
		HOPGW_PREBUILT=1 $(CARGO) test --release --workspace -- --test-threads=4; \
	fi

## Format, clippy, the layer map (scripts/check-layers.sh), the size limits (scripts/check-limits.py: files <= 400 lines,
## functions <= 80 or with their reason) and the API docs, all warnings as errors.
lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --release --workspace --all-targets -- -D warnings
	./scripts/check-layers.sh
	python3 scripts/check-limits.py
	RUSTDOCFLAGS="-D warnings -A rustdoc::private_intra_doc_links" $(CARGO) doc --no-deps --workspace --document-private-items

fmt:
	$(CARGO) fmt --all

## Side-by-side benchmark against nginx and HAProxy (not part of test or CI); the gateway row is the dist binary.
## The scale harness (bench/scale.sh) runs SCALE_SOCKETS idle WebSockets per proxy here; 100000 by hand.
SCALE_SOCKETS ?= 20000
bench: build dist
	./bench/run.sh
	./bench/store-costs.sh | tee bench/results/store-costs.md
	SCALE_SOCKETS=$(SCALE_SOCKETS) ./bench/scale.sh

## cargo-fuzz targets (config parser, conn ids, request heads, HTTP/1.x head parser, chunked codec, head verdicts against hyper, upstream answer heads; fuzz/README.md), FUZZ_SECONDS each (default 60).
fuzz:
	./scripts/fuzz.sh

clean:
	$(CARGO) clean
