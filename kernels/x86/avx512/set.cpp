// AVX-512 F/BW/DQ/VL: the xsimd kernels; with VNNI the VPDPBUSD quantized
// kernels (else AVX2's); with AVX512_BF16 the VDPBF16PS bf16 kernels (else
// bf16 widened to f32). Compiled without ISA flags.
#include "kernels/x86/avx2/avx2.hpp"
#include "kernels/x86/avx512/avx512.hpp"
#include "kernels/x86/cpu.hpp"

namespace mmgpt::kernels::detail {
namespace {

const KernelSet* set(bool bf16dot) {
  if (!x86::runs_avx512()) return nullptr;
  static const KernelSet widen =
      avx512_base_set().use(x86::has_avx512vnni() ? avx512vnni_quant_kernels() : avx2_quant_kernels());
  if (!bf16dot || !x86::has_avx512bf16()) return &widen;
  static const KernelSet dot = KernelSet(widen).use(avx512bf16_bf16dot_kernels());
  return &dot;
}

void runnable(std::vector<const QuantKernels*>& quant, std::vector<const MatmulKernels*>& bf16dot) {
  if (!x86::runs_avx512()) return;
  if (x86::has_avx512vnni()) quant.push_back(&avx512vnni_quant_kernels());
  if (x86::has_avx512bf16()) bf16dot.push_back(&avx512bf16_bf16dot_kernels());
}

}  // namespace

const Isa& avx512_isa() {
  static const Isa isa{"avx512", &set, &runnable};
  return isa;
}

}  // namespace mmgpt::kernels::detail
