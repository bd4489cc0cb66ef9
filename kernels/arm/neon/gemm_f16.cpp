// NEON: the panel GEMM for f16 panels, widened to f32 (simd/gemm_entries.hpp), in a
// translation unit of its own so that it compiles beside the rest of the set.
#if !defined(__aarch64__)
#error "arm/neon/gemm_f16.cpp is for aarch64 only"
#endif
#include "kernels/arm/neon/neon.hpp"
#include "kernels/simd/gemm_entries.hpp"

MMGPT_SIMD_GEMM(xsimd::neon64, gemm_panels_f16, uint16_t);
