#!/usr/bin/env bash
# The whole test suite under AddressSanitizer + UndefinedBehaviorSanitizer, in its own
# build directory (build-asan), so it never disturbs the normal Release build in ./build.
# Every target is sanitized, the mmgpt binary the python tests drive included.
# Any finding (memory error, leak, undefined behaviour) aborts the process and fails its test.
# Extra arguments go to ctest (e.g. -R test_formats).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${MMGPT_ASAN_BUILD_DIR:-build-asan}
jobs=${MMGPT_JOBS:-2}

generator=()
command -v ninja >/dev/null && [ ! -f "$build/Makefile" ] && generator=(-G Ninja)
# RelWithDebInfo (-O2 -g): optimised enough for the GPT-2-sized reference models,
# with line numbers in the sanitizer reports. Benchmarks are not tests; skip them.
cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DMMGPT_SANITIZE=address,undefined -DMMGPT_BUILD_BENCH=OFF >/dev/null
cmake --build "$build" -j "$jobs"

# halt_on_error / abort_on_error: the first finding ends the process with a failure.
# detect_leaks=1: LeakSanitizer checks every sanitized process at exit. The python
# tests run the sanitized mmgpt as a subprocess; python and torch themselves are not
# sanitized and are not affected (the variables only matter to sanitized binaries).
export ASAN_OPTIONS="halt_on_error=1:abort_on_error=1:detect_leaks=1:detect_stack_use_after_return=1:strict_string_checks=1:check_initialization_order=1:strict_init_order=1"
export UBSAN_OPTIONS="halt_on_error=1:abort_on_error=1:print_stacktrace=1"
export LSAN_OPTIONS="report_objects=1"

cd "$build"
ctest --output-on-failure -j "$jobs" "$@"
