// PLACEHOLDER (being written): forwards to the scalar reference.
#include "kernels/isa_table.hpp"
#include "kernels/kernels.hpp"

namespace mmgpt::kernels::detail {

const QuantKernels& avx512vnni_quant_kernels() {
    static const QuantKernels k{"avx512vnni", &scalar::gemm_panels_q8_0, &scalar::gemm_panels_q4_0, &scalar::quantize_rows};
    return k;
}

}  // namespace mmgpt::kernels::detail
