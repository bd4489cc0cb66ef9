// NEON: the panel GEMM for f32 panels (simd/gemm_entries.hpp), in a
// translation unit of its own so that it compiles beside the rest of the set.
#if !defined(__aarch64__)
#error "arm/neon/gemm_f32.cpp is for aarch64 only"
#endif
#include "kernels/arm/neon/neon.hpp"
#include "kernels/simd/gemm_entries.hpp"

MMGPT_SIMD_GEMM(xsimd::neon64, gemm_panels, float);
