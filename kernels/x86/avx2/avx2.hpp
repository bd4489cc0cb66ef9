#pragma once
// Internal to kernels/x86/avx2: what its translation units export to its set.cpp.
#include "kernels/registry.hpp"

namespace mmgpt::kernels::detail {

KernelSet avx2_base_set();                 // kernels.cpp: the xsimd kernels
const QuantKernels& avx2_quant_kernels();  // quant.cpp: q8_0 / q4_0 (also AVX-512's, without VNNI)

}  // namespace mmgpt::kernels::detail
