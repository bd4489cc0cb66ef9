// Scalar reference of the panel-packed matmul: the specification of
// gemm_simd.hpp. One output at a time, summed in float in index order, then
// the epilogue in the documented order (epilogue.hpp).
#include "kernels/isa_table.hpp"
#include "kernels/kernels.hpp"
#include "kernels/panel_layout.hpp"

namespace mmgpt::kernels::scalar {

void gemm_panels(const float* x, const float* wp, const float* bias, float* y, size_t M, size_t K, size_t N,
                 size_t p0, size_t p1, Epilogue e, float* /*scratch*/) {
    const size_t n1 = p1 * kPanelWidth < N ? p1 * kPanelWidth : N;
    for (size_t m = 0; m < M; ++m) {
        const float* xm = x + m * K;
        for (size_t n = p0 * kPanelWidth; n < n1; ++n) {
            const float* wn = wp + panel_index(K, n, 0);
            float acc = 0.0f;
            for (size_t k = 0; k < K; ++k) acc += xm[k] * wn[k * kPanelWidth];
            float v = bias ? acc + bias[n] : acc;
            if (e.act == Activation::GeluErf) gelu_erf(&v, 1);
            if (e.act == Activation::GeluTanh) gelu_tanh(&v, 1);
            float& dst = y[m * N + n];
            dst = e.accumulate ? dst + v : v;
        }
    }
}

void matmul_packed(const float* x, const float* wp, const float* bias, float* y, size_t M, size_t K, size_t N,
                   Epilogue e) {
    gemm_panels(x, wp, bias, y, M, K, N, 0, panel_count(N), e, nullptr);
}

}  // namespace mmgpt::kernels::scalar
