#pragma once
// The panel GEMM entries of simd::Kernels (kernels_simd.hpp), defined apart
// from the class. Each instruction set instantiates them in translation units
// of their own, gemm_f32.cpp, gemm_bf16.cpp and gemm_f16.cpp, compiled with
// its folder's flags: the GEMM is most of a set's compile time, and split this
// way it builds on several cores at once.
#include "kernels/simd/kernels_simd.hpp"

namespace mmgpt::kernels::simd {

template <class Arch>
MMGPT_SIMD_ENTRY void Kernels<Arch>::gemm_panels(const float* x, const float* wp, const float* bias, float* y,
                                                 size_t M, size_t K, size_t N, size_t p0, size_t p1, Epilogue e) {
  PanelGemm<Arch, Kernels>::run(x, wp, bias, y, M, K, N, p0, p1, e);
}

template <class Arch>
MMGPT_SIMD_ENTRY void Kernels<Arch>::gemm_panels_bf16(const float* x, const uint16_t* wp, const float* bias, float* y,
                                                      size_t M, size_t K, size_t N, size_t p0, size_t p1, Epilogue e) {
  PanelGemm<Arch, Kernels, WeightBF16>::run(x, wp, bias, y, M, K, N, p0, p1, e);
}

template <class Arch>
MMGPT_SIMD_ENTRY void Kernels<Arch>::gemm_panels_f16(const float* x, const uint16_t* wp, const float* bias, float* y,
                                                     size_t M, size_t K, size_t N, size_t p0, size_t p1, Epilogue e) {
  PanelGemm<Arch, Kernels, WeightF16>::run(x, wp, bias, y, M, K, N, p0, p1, e);
}

}  // namespace mmgpt::kernels::simd

// Explicit instantiations, one weight type each, for a set's gemm_*.cpp.
#define MMGPT_SIMD_GEMM(ARCH, ENTRY, WE)                                                                        \
  template void mmgpt::kernels::simd::Kernels<ARCH>::ENTRY(const float*, const WE*, const float*, float*, size_t, \
                                                           size_t, size_t, size_t, size_t, mmgpt::kernels::Epilogue)
