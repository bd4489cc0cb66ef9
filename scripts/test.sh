#!/usr/bin/env bash
# The whole test suite on a fresh machine: set up, build, then
#  - the kernel and engine tests cross-built for aarch64 and run under qemu,
#    so the NEON path is run too (scripts/test-aarch64.sh);
#  - a short fixed-seed smoke run of every libFuzzer target, plus its stored
#    regression inputs (scripts/fuzz-smoke.sh);
#  - the sanitizer stages (scripts/test-sanitizers.sh): the ctest suite under
#    AddressSanitizer + UndefinedBehaviorSanitizer (build-asan), with the slow
#    reference and conformance sets cut to their representative slice, and the
#    threaded kernel and engine tests under ThreadSanitizer (build-tsan);
#  - the ctest suite built with clang and only the POSIX fallbacks of
#    core/platform.cpp (scripts/test-posix.sh, build-posix);
#  - every host test with ctest (doctest unit tests, the PyTorch reference
#    tests and the tokenizer conformance in full, the CLI contract, the
#    server, the Python package), last, so its summary closes the output.
# Each stage has a time budget (seconds on CI's 2 cores); the end prints every
# stage's time against it, and flags a stage over its budget.
# Extra arguments go to the host ctest run.
#
# Everything the tests read is in the project's tree. Run as root beside a
# ../shared directory (CI lays one there; a user's clone has none), the whole
# run happens in a private mount namespace where ../shared is an empty,
# read-only directory, so CI runs the suite as a user's clone does.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -d ../shared ] && [ -z "${MMGPT_TEST_SHARED_HIDDEN:-}" ]; then
  if [ "$(id -u)" -eq 0 ] && unshare --mount --propagation private true 2>/dev/null; then
    echo "== ../shared is hidden for this run (a private mount namespace): the suite sees what a user's clone has"
    exec unshare --mount --propagation private env MMGPT_TEST_SHARED_HIDDEN=1 bash -c \
      'mount -t tmpfs -o ro,size=4k mmgpt-no-shared ../shared && exec bash scripts/test.sh "$@"' test.sh "$@"
  fi
  echo "== ../shared stays visible (hiding it needs root and mount namespaces);" \
    "repo_test_self_contained still fails if a test names it"
fi

names=() secs=() budgets=() results=()
summary() {
  local total=0 over=0
  echo
  printf '%-28s %8s %8s  %s\n' stage seconds budget result
  for i in "${!names[@]}"; do
    local mark=${results[$i]}
    [ "${secs[$i]}" -gt "${budgets[$i]}" ] && mark="$mark, OVER BUDGET" && over=$((over + 1))
    printf '%-28s %8d %8d  %s\n' "${names[$i]}" "${secs[$i]}" "${budgets[$i]}" "$mark"
    total=$((total + secs[i]))
  done
  printf '%-28s %8d %8d\n' total "$total" 4800
  [ "$over" -eq 0 ] || echo "test.sh: $over stage(s) over budget: CI allows 90 minutes on 2 cores in all"
}
trap summary EXIT

# stage NAME BUDGET COMMAND...: runs COMMAND, records its time; a failure ends the run.
stage() {
  local name=$1 budget=$2 t0=$SECONDS rc=0
  shift 2
  echo "== stage $name (budget ${budget}s)"
  "$@" || rc=$?
  names+=("$name") secs+=($((SECONDS - t0))) budgets+=("$budget")
  if [ "$rc" -ne 0 ]; then
    results+=("FAILED (exit $rc)")
    exit "$rc"
  fi
  results+=(ok)
}

# The host suite runs every case in full: no MMGPT_TEST_SLICE (the sanitizer stage sets it).
host_ctest() { (cd build && env -u MMGPT_TEST_SLICE ctest --output-on-failure -j "$(nproc)" "$@"); }

stage "set-up and build" 900 bash scripts/build.sh
stage "aarch64 (qemu)" 900 bash scripts/test-aarch64.sh
stage "fuzz smoke" 480 env MMGPT_FUZZ_SEED=1 bash scripts/fuzz-smoke.sh 10
stage "ASan+UBSan" 1200 env MMGPT_SANITIZERS=asan bash scripts/test-sanitizers.sh
stage "TSan" 420 env MMGPT_SANITIZERS=tsan bash scripts/test-sanitizers.sh
stage "POSIX fallbacks" 480 bash scripts/test-posix.sh
stage "host suite" 720 host_ctest "$@"
