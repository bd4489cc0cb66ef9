# Cross-compiling for 64-bit ARM on Debian (scripts/test-aarch64.sh):
#   cmake -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake ...
# Compilers from g++-aarch64-linux-gnu; libraries from the arm64 multiarch
# packages (libtbb-dev:arm64, libicu-dev:arm64) in /usr/lib/aarch64-linux-gnu.
# Test executables run under qemu-aarch64 (ctest prefixes every add_test
# command with CMAKE_CROSSCOMPILING_EMULATOR).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
# Debian multiarch: arm64 libraries and their CMake packages live under
# /usr/lib/aarch64-linux-gnu, which CMake searches once it knows the triplet.
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)

# The cross toolchain's own runtime (/usr/aarch64-linux-gnu) and the multiarch
# tree rooted at /; header-only packages (xsimd, doctest, nlohmann_json, CLI11)
# are architecture-independent and found in /usr/include and /usr/share.
# Build tools (programs) are always the host's.
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu /)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# Run with the arm64 multiarch runtime that libtbb-dev:arm64/libicu-dev:arm64
# pull in (libc6:arm64, libstdc++6:arm64: /lib/ld-linux-aarch64.so.1 and
# /usr/lib/aarch64-linux-gnu), i.e. what a real arm64 Debian runs. Not with
# "-L /usr/aarch64-linux-gnu": that mixes the cross toolchain's libc and
# libstdc++ (2.36-8cross1) with the multiarch libtbb built against
# libc6:arm64, and oneTBB's first parallel_for then spins forever under qemu.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64)
