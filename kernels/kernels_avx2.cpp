// AVX2 + FMA (+ F16C) instantiation of kernels_simd.hpp. CMake compiles this
// file (and only this file) with -mavx2 -mfma -mf16c because of its name;
// dispatch.cpp calls it only on CPUs that report all three features.
#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__)
#error "kernels_avx2.cpp must be compiled with -mavx2 -mfma -mf16c"
#endif
#include "kernels/kernels_simd.hpp"

namespace mmgpt::kernels::detail {

const IsaTable& avx2_table() {
    static const IsaTable table = simd::Kernels<xsimd::fma3<xsimd::avx2>>::table("avx2");
    return table;
}

}  // namespace mmgpt::kernels::detail
