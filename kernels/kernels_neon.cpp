// NEON (AArch64) instantiation of kernels_simd.hpp. Compiled only on aarch64,
// where Advanced SIMD is part of the base architecture, so no extra flags.
#if !defined(__aarch64__)
#error "kernels_neon.cpp is for aarch64 only"
#endif
#include "kernels/kernels_simd.hpp"

namespace mmgpt::kernels::detail {

const IsaTable& neon_table() {
    static const IsaTable table = simd::Kernels<xsimd::neon64>::table("neon");
    return table;
}

}  // namespace mmgpt::kernels::detail
