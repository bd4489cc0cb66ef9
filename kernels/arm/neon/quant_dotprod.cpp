// The quantized kernels for Armv8.2 with the dot product (SDOT by lane;
// compiled with -march=armv8.2-a+dotprod (sources.cmake), used by set.cpp
// only where HWCAP_ASIMDDP says the CPU has it). The code is in
// quant_impl.hpp, shared with the baseline set of quant.cpp.
#if !defined(__aarch64__)
#error "arm/neon/quant_dotprod.cpp is for aarch64 only"
#endif
#if !defined(__ARM_FEATURE_DOTPROD)
#error "arm/neon/quant_dotprod.cpp needs -march=armv8.2-a+dotprod (see sources.cmake)"
#endif
#include "kernels/arm/neon/quant_impl.hpp"

namespace mmgpt::kernels::detail {

const QuantKernels& neon_dotprod_quant_kernels() { return qneon::make_table<true>("neon_dotprod"); }

}  // namespace mmgpt::kernels::detail
