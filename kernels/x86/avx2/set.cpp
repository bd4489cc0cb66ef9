// AVX2 + FMA + F16C: the xsimd kernels and the VPMADDUBSW quantized kernels.
// Compiled without ISA flags.
#include "kernels/x86/avx2/avx2.hpp"
#include "kernels/x86/cpu.hpp"

namespace mmgpt::kernels::detail {
namespace {

const KernelSet* set(bool /*bf16dot: AVX2 has none*/) {
  if (!x86::runs_avx2()) return nullptr;
  static const KernelSet s = avx2_base_set().use(avx2_quant_kernels());
  return &s;
}

void runnable(std::vector<const QuantKernels*>& quant, std::vector<const MatmulKernels*>&) {
  if (x86::runs_avx2()) quant.push_back(&avx2_quant_kernels());
}

}  // namespace

const Isa& avx2_isa() {
  static const Isa isa{"avx2", &set, &runnable};
  return isa;
}

}  // namespace mmgpt::kernels::detail
