#include "kernels/panel_layout.hpp"

#include <algorithm>

namespace mmgpt::kernels {

void pack_panels(const float* w, size_t N, size_t K, float* out) {
    std::fill(out, out + panel_floats(N, K), 0.0f);
    for (size_t n = 0; n < N; ++n)
        for (size_t k = 0; k < K; ++k) out[panel_index(K, n, k)] = w[n * K + k];
}

void unpack_panel_row(const float* packed, size_t K, size_t n, float* row) {
    const float* p = packed + panel_index(K, n, 0);
    for (size_t k = 0; k < K; ++k) row[k] = p[k * kPanelWidth];
}

}  // namespace mmgpt::kernels
