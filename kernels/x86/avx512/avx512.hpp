#pragma once
// Internal to kernels/x86/avx512: what its translation units export to its set.cpp.
#include "kernels/registry.hpp"

namespace mmgpt::kernels::detail {

KernelSet avx512_base_set();                        // kernels.cpp: the xsimd kernels
const QuantKernels& avx512vnni_quant_kernels();     // quant_vnni.cpp: q8_0 / q4_0 with VPDPBUSD
const MatmulKernels& avx512bf16_bf16dot_kernels();  // bf16dot.cpp: bf16 with VDPBF16PS

}  // namespace mmgpt::kernels::detail
