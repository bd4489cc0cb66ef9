#pragma once
// The panel layout (file layout id 1, "panel16"): how the matmul kernels want
// a weight matrix W[N, K] ("out, in") in memory.
//
// W is cut into ceil(N / 16) panels of 16 output rows. Panel p holds, for
// k = 0 .. K-1 in order, the 16 values W[16p + j][k] (j = 0 .. 15); rows past
// N are zero. So one k-step of a panel is exactly one 64-byte cache line, a
// matmul streams each panel front to back, and the vector registers of every
// ISA (4, 8 or 16 floats) hold whole columns of a panel row.
#include <cstddef>

namespace mmgpt::kernels {

inline constexpr size_t kPanelWidth = 16;

inline size_t panel_count(size_t N) { return (N + kPanelWidth - 1) / kPanelWidth; }
// Floats a packed W[N, K] occupies (N rounded up to whole panels).
inline size_t panel_floats(size_t N, size_t K) { return panel_count(N) * kPanelWidth * K; }
// Index of W[n][k] in the packed array.
inline size_t panel_index(size_t K, size_t n, size_t k) {
    return (n / kPanelWidth) * kPanelWidth * K + k * kPanelWidth + n % kPanelWidth;
}

// Packs a row-major W[N, K] into `out` (panel_floats(N, K) floats), zero padding included.
void pack_panels(const float* w, size_t N, size_t K, float* out);
// Copies row n of a packed W[N, K] (K strided floats) into `row`.
void unpack_panel_row(const float* packed, size_t K, size_t n, float* row);

}  // namespace mmgpt::kernels
