#pragma once
// Internal to kernels/x86/avx512: what its translation units export to its set.cpp.
#include "kernels/registry.hpp"

namespace mmgpt::kernels::detail {

KernelSet avx512_base_set();                        // kernels.cpp: the xsimd kernels
const QuantKernels& avx512vnni_quant_kernels();     // quant_vnni.cpp: q8_0 / q4_0 with VPDPBUSD
const MatmulKernels& avx512bf16_bf16dot_kernels();  // bf16dot.cpp: bf16 with VDPBF16PS
// amx.cpp: q8_0 / q4_0 with TDPBSSD, and VNNI below a tile's rows (CPUs with AMX-INT8);
const QuantKernels& amx_int8_quant_kernels();
// bf16 with TDPBF16PS, and its arithmetic on FMAs below a tile's rows (AMX-BF16);
const MatmulKernels& amx_bf16_kernels();
// that arithmetic on FMAs alone, at every M (any CPU with AVX-512 VNNI: the TU's flags).
const MatmulKernels& amx_bf16_vector_kernels();
// Whether amx_int8_quant_kernels() gives the reference's bits on this CPU
// (they are exact integer sums: a difference is a fault of the CPU or of
// the kernel; asked once, only where the CPU has AMX-INT8).
bool amx_int8_agrees();
// Whether amx_bf16_kernels() gives its reference's bits on this CPU, on a
// product built so that another order of TDPBF16PS's roundings shows (asked
// once, only where the CPU has AMX-BF16).
bool amx_bf16_agrees();

}  // namespace mmgpt::kernels::detail
