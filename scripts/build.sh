#!/usr/bin/env bash
# Installs the dependencies (scripts/setup.sh) and builds mmgpt (Release) in ./build.
#   build.sh          everything: the mmgpt binary, the library, the tests and the
#                     benchmarks (scripts/test.sh)
#   build.sh --mmgpt  only the mmgpt binary, with only the packages it needs
#                     (scripts/demo.sh, the main job)
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  "") only_mmgpt=0 ;;
  --mmgpt) only_mmgpt=1 ;;
  *) echo "build.sh: unknown option '$1' (use no option, or --mmgpt)" >&2; exit 2 ;;
esac

options=(-DCMAKE_BUILD_TYPE=Release)
if [ "$only_mmgpt" = 1 ]; then
  bash scripts/setup.sh --run
  # A new build tree leaves the tests and benchmarks out, so configuring needs
  # none of their packages; an existing one keeps its settings.
  [ -f build/CMakeCache.txt ] || options+=(-DMMGPT_BUILD_TESTS=OFF -DMMGPT_BUILD_BENCH=OFF)
  targets=(--target mmgpt)
else
  bash scripts/setup.sh
  options+=(-DMMGPT_BUILD_TESTS=ON -DMMGPT_BUILD_BENCH=ON)
  targets=()
fi
generator=()
command -v ninja >/dev/null && [ ! -f build/Makefile ] && generator=(-G Ninja)
cmake -S . -B build "${generator[@]}" "${options[@]}" >/dev/null
cmake --build build -j "$(nproc)" "${targets[@]}"
