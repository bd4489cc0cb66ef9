#pragma once
// Internal to kernels/arm/neon: what its translation units export to its set.cpp.
#include "kernels/registry.hpp"

namespace mmgpt::kernels::detail {

KernelSet neon_base_set();                         // kernels.cpp: the xsimd kernels
const QuantKernels& neon_quant_kernels();          // quant.cpp: q8_0 / q4_0, baseline Advanced SIMD
const QuantKernels& neon_dotprod_quant_kernels();  // quant_dotprod.cpp: + SDOT (Armv8.2 dot product)
const MatmulKernels& neon_bf16_bf16dot_kernels();  // bf16dot.cpp: bf16 with BFDOT

}  // namespace mmgpt::kernels::detail
