#!/usr/bin/env bash
# Cross-builds the kernel and engine unit tests for aarch64 and runs them under
# qemu-aarch64, so the NEON kernels are executed, not just compiled. Debian 12,
# as root the first time (installs packages); idempotent, safe to run again.
#
#   scripts/test-aarch64.sh [extra ctest args]
#
# Packages: the cross compiler (g++-aarch64-linux-gnu), qemu-user, and the
# arm64 multiarch builds of the libraries the kernels and engine link
# (libtbb-dev:arm64, libicu-dev:arm64, libpcre2-dev:arm64). They are Multi-Arch: same and
# co-install with their amd64 packages; apt may first upgrade the amd64 ones
# so both architectures have the same version. Header-only dependencies
# (xsimd, doctest, nlohmann-json, CLI11) are the host's packages.
#
# Not run here: the converter tests and the python tests (they need PyTorch
# and the host's mmgpt); they are architecture-independent host tests.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build-aarch64"

# --- packages
packages=(
  cmake ninja-build g++-aarch64-linux-gnu qemu-user
  libxsimd-dev doctest-dev nlohmann-json3-dev libcli11-dev
  libtbb-dev:arm64 libicu-dev:arm64 libpcre2-dev:arm64
)
need_arch=0
dpkg --print-foreign-architectures | grep -qx arm64 || need_arch=1
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ "$need_arch" -eq 1 ] || [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "test-aarch64.sh: need the arm64 architecture and packages (${missing[*]}); run as root to install them" >&2
    exit 1
  fi
  [ "$need_arch" -eq 1 ] && dpkg --add-architecture arm64
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# --- configure and build only the kernel and engine unit tests
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_TOOLCHAIN_FILE="$root/cmake/aarch64-linux-gnu.cmake" -DMMGPT_BUILD_BENCH=OFF >/dev/null
targets=()
for src in "$root"/tests/test_kernels_*.cpp "$root"/tests/test_engine*.cpp; do
  targets+=("$(basename "$src" .cpp)")
done
cmake --build "$build" -j "$(nproc)" --target "${targets[@]}"

# --- run them under qemu-aarch64 (the toolchain's CMAKE_CROSSCOMPILING_EMULATOR)
cd "$build"
ctest -R '^test_(kernels|engine)' --output-on-failure -j "$(nproc)" "$@"

# The kernel tests log which instantiations they ran (tests/kernels_testing.hpp
# and test_kernels_dispatch.cpp); fail unless NEON was dispatched and tested,
# so a build that silently fell back to scalar cannot pass.
log="$build/Testing/Temporary/LastTest.log"
if ! grep -q 'dispatched ISA: neon' "$log" || ! grep -q 'testing ISA neon' "$log"; then
  echo "test-aarch64.sh: the kernel tests did not run the NEON path (see $log)" >&2
  exit 1
fi
# Likewise the BF16 extension's kernels (qemu's default CPU has FEAT_BF16).
if ! grep -q 'runnable here: neon_bf16' "$log"; then
  echo "test-aarch64.sh: the bf16 dot-product tests did not run the NEON BF16 kernels (see $log)" >&2
  exit 1
fi
echo "test-aarch64.sh: NEON kernels ran in $(grep -c 'testing ISA neon' "$log") test cases under qemu-aarch64"
