// The quantized kernels for baseline Armv8-A Advanced SIMD (no dot product):
// int8 products widened with SMULL / SMLAL and summed pairwise into int32.
// The code is in quant_impl.hpp, shared with quant_dotprod.cpp.
#if !defined(__aarch64__)
#error "arm/neon/quant.cpp is for aarch64 only"
#endif
#include "kernels/arm/neon/quant_impl.hpp"

namespace mmgpt::kernels::detail {

const QuantKernels& neon_quant_kernels() { return qneon::make_table<false>("neon"); }

}  // namespace mmgpt::kernels::detail
