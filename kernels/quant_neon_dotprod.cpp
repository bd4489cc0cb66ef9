// PLACEHOLDER (being written): forwards to the scalar reference.
#include "kernels/isa_table.hpp"
#include "kernels/kernels.hpp"

namespace mmgpt::kernels::detail {

const QuantKernels& neon_dotprod_quant_kernels() {
    static const QuantKernels k{"neon_dotprod", &scalar::gemm_panels_q8_0, &scalar::gemm_panels_q4_0, &scalar::quantize_rows};
    return k;
}

}  // namespace mmgpt::kernels::detail
