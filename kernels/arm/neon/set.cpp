// Advanced SIMD (mandatory on AArch64): the xsimd kernels; the quantized
// kernels with SDOT where the CPU has the dot product; BFDOT for bf16 where
// it has the BF16 extension (else bf16 widened to f32). Compiled without ISA
// flags; features from what the system reports (core/platform.hpp).
#include "core/platform.hpp"
#include "kernels/arm/neon/neon.hpp"

namespace mmgpt::kernels::detail {
namespace {

bool has_dotprod() { return platform::arm_has_dotprod(); }
bool has_bf16() { return platform::arm_has_bf16(); }

const KernelSet* set(bool bf16dot) {
  static const KernelSet widen =
      neon_base_set().use(has_dotprod() ? neon_dotprod_quant_kernels() : neon_quant_kernels());
  if (!bf16dot || !has_bf16()) return &widen;
  static const KernelSet dot = KernelSet(widen).use(neon_bf16_bf16dot_kernels());
  return &dot;
}

void runnable(std::vector<const QuantKernels*>& quant, std::vector<const MatmulKernels*>& bf16dot) {
  quant.push_back(&neon_quant_kernels());
  if (has_dotprod()) quant.push_back(&neon_dotprod_quant_kernels());
  if (has_bf16()) bf16dot.push_back(&neon_bf16_bf16dot_kernels());
}

}  // namespace

const Isa& neon_isa() {
  static const Isa isa{"neon", &set, &runnable};
  return isa;
}

}  // namespace mmgpt::kernels::detail
