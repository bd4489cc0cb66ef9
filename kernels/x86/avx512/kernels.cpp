// AVX-512 (F, BW, DQ, VL) instantiation of simd/kernels_simd.hpp, compiled
// with those flags (sources.cmake); set.cpp uses it only on CPUs that
// report all of them.
#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512DQ__) || !defined(__AVX512VL__)
#error "x86/avx512/kernels.cpp must be compiled with -mavx512f -mavx512bw -mavx512dq -mavx512vl -mfma"
#endif
// GCC 12's AVX-512 intrinsics initialise "undefined" vectors from themselves
// (`__m512i __Y = __Y;`), which -Wmaybe-uninitialized reports once inlined.
// A known false positive in the compiler's own header, silenced only here.
#pragma GCC diagnostic push
#if !defined(__clang__)  // clang has no such warning (and warns about the pragma)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "kernels/simd/kernels_simd.hpp"
#include "kernels/x86/avx512/avx512.hpp"

namespace mmgpt::kernels::detail {

KernelSet avx512_base_set() { return simd::Kernels<xsimd::avx512bw>::set("avx512"); }
#pragma GCC diagnostic pop

}  // namespace mmgpt::kernels::detail
