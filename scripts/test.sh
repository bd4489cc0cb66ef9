#!/usr/bin/env bash
# The whole test suite on a fresh machine: set up, build, run every test
# (doctest unit tests and the PyTorch reference tests) with ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
cd build
ctest --output-on-failure -j "$(nproc)" "$@"
