#!/usr/bin/env bash
# The whole test suite on a fresh machine: set up, build, run every test
# (doctest unit tests, the PyTorch reference tests, the CLI contract and the
# tokenizer conformance) with ctest, then the kernel and engine tests
# cross-built for aarch64 under qemu, so the NEON path is run too, then a short
# fixed-seed smoke run of every libFuzzer target (plus its stored regressions).
# Extra arguments go to the host ctest run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
(cd build && ctest --output-on-failure -j "$(nproc)" "$@")
bash scripts/test-aarch64.sh
MMGPT_FUZZ_SEED=1 bash scripts/fuzz-smoke.sh 10
