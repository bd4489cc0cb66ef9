#!/usr/bin/env bash
# The sanitizer stages of CI (scripts/test.sh runs this; see docs/sanitizers.md):
#
#  1. AddressSanitizer + UndefinedBehaviorSanitizer: the whole ctest suite, in its own
#     build directory (build-asan), so it never disturbs the Release build in ./build.
#     Every target is sanitized, the mmgpt binary the python tests drive included. Any
#     finding (memory error, leak, undefined behaviour) aborts the process and fails
#     its test. Built with clang++ (GCC 12 needs over 15 CPU-minutes for each SIMD
#     kernel file under -fsanitize=address,undefined; clang, a few seconds), whose
#     runtimes come with libclang-rt-14-dev (scripts/setup.sh).
#  2. ThreadSanitizer: the threaded kernel and engine tests (every test_kernels_* and
#     test_engine* executable) and the atomic file writer's (its background writer
#     thread), in build-tsan, with g++ (libtsan2 comes with g++-12).
#     Debian's libtbb is not instrumented; kernels/parallel.hpp states TBB's fork/join
#     ordering to TSan and tests/sanitizers/tsan.supp drops the reports on TBB's own
#     task objects (docs/sanitizers.md says exactly what is and is not checked).
#
# usage: scripts/test-sanitizers.sh [extra ctest args for the ASan+UBSan stage]
#   env: MMGPT_SANITIZERS (default "asan tsan": the stages to run), MMGPT_JOBS (default 2),
#        MMGPT_ASAN_BUILD_DIR (build-asan), MMGPT_TSAN_BUILD_DIR (build-tsan)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
stages=${MMGPT_SANITIZERS:-asan tsan}
jobs=${MMGPT_JOBS:-2}
symbolizer=/usr/lib/llvm-14/bin/llvm-symbolizer  # from clang's llvm-14 dependency

if [[ " $stages " == *" asan "* ]]; then
  command -v clang++ >/dev/null || { echo "test-sanitizers: clang++ not found (scripts/setup.sh installs it)" >&2; exit 1; }
  build=${MMGPT_ASAN_BUILD_DIR:-build-asan}
  # RelWithDebInfo (-O2 -g): optimised enough for the GPT-2-sized reference models,
  # with line numbers in the sanitizer reports. Benchmarks are not tests; skip them.
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
    -DMMGPT_SANITIZE=address,undefined -DMMGPT_BUILD_BENCH=OFF >/dev/null
  echo "== ASan+UBSan: building in $build"
  cmake --build "$build" -j "$jobs"

  # halt_on_error / abort_on_error: the first finding ends the process with a failure.
  # detect_leaks=1: LeakSanitizer checks every sanitized process at exit. The python
  # tests run the sanitized mmgpt as a subprocess; python and torch themselves are not
  # sanitized and are not affected (the variables only matter to sanitized binaries).
  export ASAN_OPTIONS="halt_on_error=1:abort_on_error=1:detect_leaks=1:detect_stack_use_after_return=1:strict_string_checks=1:check_initialization_order=1:strict_init_order=1"
  export UBSAN_OPTIONS="halt_on_error=1:abort_on_error=1:print_stacktrace=1"
  export LSAN_OPTIONS="report_objects=1"
  [ -x "$symbolizer" ] && export ASAN_SYMBOLIZER_PATH="$symbolizer"
  # Every test runs; the slow reference and conformance sets run a
  # representative slice (their large-model cases and the long texts are left
  # to the host suite, which runs them in full): MMGPT_TEST_SLICE.
  echo "== ASan+UBSan: the whole ctest suite (reference and conformance sets: a slice)"
  (cd "$build" && MMGPT_TEST_SLICE=sanitizers ctest --output-on-failure -j "$jobs" "$@")
  unset ASAN_OPTIONS UBSAN_OPTIONS LSAN_OPTIONS
fi

if [[ " $stages " == *" tsan "* ]]; then
  build=${MMGPT_TSAN_BUILD_DIR:-build-tsan}
  # The compiler is chosen when the directory is first configured (naming it again
  # as another path to the same g++ would make CMake wipe the cache and rebuild).
  compiler=()
  [ -f "$build/CMakeCache.txt" ] || compiler=(-DCMAKE_CXX_COMPILER=g++)
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${compiler[@]}" \
    -DMMGPT_SANITIZE=thread -DMMGPT_BUILD_BENCH=OFF >/dev/null
  targets=()
  for src in tests/test_kernels_*.cpp tests/test_engine*.cpp tests/test_formats_atomic_file.cpp; do
    targets+=("$(basename "$src" .cpp)")
  done
  echo "== TSan: building ${targets[*]} in $build"
  cmake --build "$build" -j "$jobs" --target "${targets[@]}"
  # halt_on_error: the first race fails its test. The suppressions only drop reports
  # on TBB's own objects (see the file); history_size=7 keeps enough access history
  # for TSan to restore the stack of the earlier access, which they are matched on.
  export TSAN_OPTIONS="halt_on_error=1:history_size=7:second_deadlock_stack=1:suppressions=$root/tests/sanitizers/tsan.supp"
  echo "== TSan: the threaded kernel, engine and atomic file tests"
  (cd "$build" && ctest --output-on-failure -j "$jobs" -R '^test_(kernels|engine|formats_atomic_file)')
fi
