// The quantized kernels for Armv8.2 with the dot product (SDOT by lane;
// compiled with -march=armv8.2-a+dotprod, dispatched only where HWCAP_ASIMDDP
// says the CPU has it). The code is in quant_neon_impl.hpp, shared with the
// baseline set of quant_neon.cpp.
#if !defined(__aarch64__)
#error "quant_neon_dotprod.cpp is for aarch64 only"
#endif
#if !defined(__ARM_FEATURE_DOTPROD)
#error "quant_neon_dotprod.cpp needs -march=armv8.2-a+dotprod (see CMakeLists.txt)"
#endif
#include "kernels/arm/neon/quant_impl.hpp"

namespace mmgpt::kernels::detail {

const QuantKernels& neon_dotprod_quant_kernels() { return qneon::make_table<true>("neon_dotprod"); }

}  // namespace mmgpt::kernels::detail
