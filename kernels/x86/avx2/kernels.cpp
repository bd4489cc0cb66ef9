// AVX2 + FMA (+ F16C) instantiation of simd/kernels_simd.hpp, compiled with
// those flags (sources.cmake); set.cpp uses it only on CPUs that report all
// three features.
#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__)
#error "x86/avx2/kernels.cpp must be compiled with -mavx2 -mfma -mf16c"
#endif
#include "kernels/simd/kernels_simd.hpp"
#include "kernels/x86/avx2/avx2.hpp"

namespace mmgpt::kernels::detail {

KernelSet avx2_base_set() { return simd::Kernels<xsimd::fma3<xsimd::avx2>>::set("avx2"); }

}  // namespace mmgpt::kernels::detail
