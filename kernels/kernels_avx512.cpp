// AVX-512 (F, BW, DQ, VL) instantiation of kernels_simd.hpp. CMake compiles
// this file with -mavx512f -mavx512bw -mavx512dq -mavx512vl -mfma because of
// its name; dispatch.cpp calls it only on CPUs that report all of those.
#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512DQ__) || !defined(__AVX512VL__)
#error "kernels_avx512.cpp must be compiled with -mavx512f -mavx512bw -mavx512dq -mavx512vl -mfma"
#endif
// GCC 12's AVX-512 intrinsics initialise "undefined" vectors from themselves
// (`__m512i __Y = __Y;`), which -Wmaybe-uninitialized reports once inlined.
// A known false positive in the compiler's own header, silenced only here.
#pragma GCC diagnostic push
#if !defined(__clang__)  // clang has no such warning (and warns about the pragma)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "kernels/kernels_simd.hpp"

namespace mmgpt::kernels::detail {

const IsaTable& avx512_table() {
    static const IsaTable table = simd::Kernels<xsimd::avx512bw>::table("avx512");
    return table;
}
#pragma GCC diagnostic pop

}  // namespace mmgpt::kernels::detail
