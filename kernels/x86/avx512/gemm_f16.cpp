// AVX-512: the panel GEMM for f16 panels, widened to f32 (simd/gemm_entries.hpp), in a
// translation unit of its own so that it compiles beside the rest of the set.
#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512DQ__) || !defined(__AVX512VL__)
#error "x86/avx512/gemm_f16.cpp must be compiled with -mavx512f -mavx512bw -mavx512dq -mavx512vl -mfma"
#endif
// GCC 12's AVX-512 intrinsics: see kernels.cpp.
#pragma GCC diagnostic push
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "kernels/simd/gemm_entries.hpp"
#include "kernels/x86/avx512/avx512.hpp"

MMGPT_SIMD_GEMM(xsimd::avx512bw, gemm_panels_f16, uint16_t);
#pragma GCC diagnostic pop
