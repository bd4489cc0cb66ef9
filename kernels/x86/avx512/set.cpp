// AVX-512 F/BW/DQ/VL: the xsimd kernels; with VNNI the VPDPBUSD quantized
// kernels (else AVX2's), and with AMX-INT8 the tile kernels above them; with
// AVX512_BF16 the VDPBF16PS bf16 kernels (else bf16 widened to f32), and
// with AMX-BF16 the tile kernels in TDPBF16PS's arithmetic instead. AMX is
// used only where the kernel grants the tile state, MMGPT_AMX is not 0, and
// a probe product gives the reference's bits here. The tests get the
// AMX-INT8 kernels wherever the CPU has them (a difference in exact integer
// sums is a fault, which they must show), the AMX-BF16 ones where they agree
// (the SDM's TDPBF16PS is not yet checked on hardware). Compiled without
// ISA flags.
#include "kernels/x86/avx2/avx2.hpp"
#include "kernels/x86/avx512/avx512.hpp"
#include "kernels/x86/cpu.hpp"

namespace mmgpt::kernels::detail {
namespace {

bool amx_int8() {
  static const bool usable = amx_allowed() && x86::has_avx512vnni() && x86::has_amx_int8() && amx_int8_agrees();
  return usable;
}
bool amx_bf16() {
  static const bool usable = amx_allowed() && x86::has_avx512vnni() && x86::has_amx_bf16() && amx_bf16_agrees();
  return usable;
}

const QuantKernels& quant() {
  if (amx_int8()) return amx_int8_quant_kernels();
  return x86::has_avx512vnni() ? avx512vnni_quant_kernels() : avx2_quant_kernels();
}

const KernelSet* set(bool bf16dot) {
  if (!x86::runs_avx512()) return nullptr;
  static const KernelSet widen = avx512_base_set().use(quant());
  if (!bf16dot || !(x86::has_avx512bf16() || amx_bf16())) return &widen;
  static const KernelSet dot = KernelSet(widen).use(amx_bf16() ? amx_bf16_kernels() : avx512bf16_bf16dot_kernels());
  return &dot;
}

void runnable(std::vector<const QuantKernels*>& quant, std::vector<const MatmulKernels*>& bf16dot) {
  if (!x86::runs_avx512()) return;
  if (x86::has_avx512vnni()) quant.push_back(&avx512vnni_quant_kernels());
  if (x86::has_avx512vnni() && x86::has_amx_int8()) quant.push_back(&amx_int8_quant_kernels());
  if (x86::has_avx512bf16()) bf16dot.push_back(&avx512bf16_bf16dot_kernels());
  if (x86::has_avx512vnni()) bf16dot.push_back(&amx_bf16_vector_kernels());
  if (x86::has_avx512vnni() && x86::has_amx_bf16() && amx_bf16_agrees()) bf16dot.push_back(&amx_bf16_kernels());
}

}  // namespace

const Isa& avx512_isa() {
  static const Isa isa{"avx512", &set, &runnable, &amx_bf16};
  return isa;
}

}  // namespace mmgpt::kernels::detail
