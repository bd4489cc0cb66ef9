// AVX2 + FMA (+ F16C): the panel GEMM for f16 panels, widened to f32 (simd/gemm_entries.hpp), in a
// translation unit of its own so that it compiles beside the rest of the set.
#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__)
#error "x86/avx2/gemm_f16.cpp must be compiled with -mavx2 -mfma -mf16c"
#endif
#include "kernels/simd/gemm_entries.hpp"
#include "kernels/x86/avx2/avx2.hpp"

MMGPT_SIMD_GEMM(xsimd::fma3<xsimd::avx2>, gemm_panels_f16, uint16_t);
