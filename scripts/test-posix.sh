#!/usr/bin/env bash
# CI stage: the whole ctest suite built with -DMMGPT_POSIX_FALLBACKS=ON, so that
# core/platform.cpp takes only its POSIX fallbacks, as on a system that is
# neither Linux nor macOS (no O_TMPFILE, MADV_*, mincore, /proc). Built with
# clang++ (macOS's compiler; scripts/setup.sh installs it) in its own build
# directory, so it never disturbs the Release build in ./build.
#
# usage: scripts/test-posix.sh [extra ctest args]
#   env: MMGPT_JOBS (default: the number of CPUs), MMGPT_POSIX_BUILD_DIR (build-posix)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build=${MMGPT_POSIX_BUILD_DIR:-build-posix}
jobs=${MMGPT_JOBS:-$(nproc)}
command -v clang++ >/dev/null || { echo "test-posix: clang++ not found (scripts/setup.sh installs it)" >&2; exit 1; }
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=clang++ \
  -DMMGPT_POSIX_FALLBACKS=ON -DMMGPT_BUILD_TESTS=ON -DMMGPT_BUILD_BENCH=OFF >/dev/null
echo "== POSIX fallbacks: building in $build"
cmake --build "$build" -j "$jobs"
"$build/mmgpt" --version | grep -qx 'system    posix (POSIX calls only)' ||
  { echo "test-posix: $build/mmgpt does not use the POSIX fallbacks" >&2; exit 1; }
echo "== POSIX fallbacks: ctest in $build"
cd "$build"
# The conformance tests that only repeat the host suite's work on more data
# run a slice here (MMGPT_TEST_SLICE: see each test); the host suite runs them whole.
MMGPT_TEST_SLICE=posix ctest --output-on-failure -j "$jobs" "$@"
