#!/usr/bin/env bash
# The whole test suite on a fresh machine: set up, build, then
#  - the kernel and engine tests cross-built for aarch64 and run under qemu,
#    so the NEON path is run too (scripts/test-aarch64.sh);
#  - a short fixed-seed smoke run of every libFuzzer target, plus its stored
#    regression inputs (scripts/fuzz-smoke.sh);
#  - the sanitizer stages (scripts/test-sanitizers.sh): the whole ctest suite
#    under AddressSanitizer + UndefinedBehaviorSanitizer (build-asan), and the
#    threaded kernel and engine tests under ThreadSanitizer (build-tsan);
#  - the ctest suite built with clang and only the POSIX fallbacks of
#    core/platform.cpp (scripts/test-posix.sh, build-posix);
#  - every host test with ctest (doctest unit tests, the PyTorch reference
#    tests, the CLI contract, the tokenizer conformance), last, so its summary
#    closes the output.
# Extra arguments go to the host ctest run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
bash scripts/test-aarch64.sh
MMGPT_FUZZ_SEED=1 bash scripts/fuzz-smoke.sh 10
bash scripts/test-sanitizers.sh
bash scripts/test-posix.sh
cd build
ctest --output-on-failure -j "$(nproc)" "$@"
