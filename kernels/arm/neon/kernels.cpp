// NEON (AArch64) instantiation of simd/kernels_simd.hpp. Advanced SIMD is
// part of the base architecture, so no extra flags.
#if !defined(__aarch64__)
#error "arm/neon/kernels.cpp is for aarch64 only"
#endif
#include "kernels/arm/neon/neon.hpp"
#include "kernels/simd/kernels_simd.hpp"

namespace mmgpt::kernels::detail {

KernelSet neon_base_set() { return simd::Kernels<xsimd::neon64>::set("neon"); }

}  // namespace mmgpt::kernels::detail
