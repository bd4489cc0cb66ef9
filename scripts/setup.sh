#!/usr/bin/env bash
# Installs everything mmgpt needs to build, run and test, on Debian 12, as root.
# Idempotent: packages already present are left alone; safe to run again.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libxsimd-dev libtbb-dev libbenchmark-dev doctest-dev
  nlohmann-json3-dev libcli11-dev libfmt-dev
  python3 python3-torch python3-numpy
  libicu-dev
  clang libclang-rt-14-dev  # libFuzzer and the sanitizer runtimes (scripts/fuzz-smoke.sh)
  nodejs
  libopenblas0-pthread  # bench only: bench_kernels' OpenBLAS rows load it at run time; mmgpt never links it
)
# npm runs the tokenizer conformance test's reference (js-tiktoken). Some
# nodejs builds bundle npm and conflict with Debian's npm package: ask for it
# only when no npm is on PATH.
command -v npm >/dev/null 2>&1 || packages+=(npm)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup.sh: missing packages (${missing[*]}); run as root to install them" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# js-tiktoken, pinned by tests/tokenizer/package-lock.json; installed once.
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ ! -d "$root/tests/tokenizer/node_modules" ]; then
  (cd "$root/tests/tokenizer" && npm ci --no-audit --no-fund)
fi
