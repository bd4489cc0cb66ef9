#pragma once
// The panel layout (file layout id 1, "panel16"): how the matmul kernels want
// a weight matrix W[N, K] ("out, in") in memory.
//
// W is cut into ceil(N / 16) panels of 16 output rows. Panel p holds, for
// k = 0 .. K-1 in order, the 16 values W[16p + j][k] (j = 0 .. 15); rows past
// N are zero. So one k-step of a panel is exactly one 64-byte cache line, a
// matmul streams each panel front to back, and the vector registers of every
// ISA (4, 8 or 16 floats) hold whole columns of a panel row.
//
// The same layout holds 16-bit weights (file dtypes bf16 and f16): identical
// element order, 2 bytes per element, so a panel k-step is half a cache line.
#include <cstddef>
#include <cstdint>

namespace mmgpt::kernels {

inline constexpr size_t kPanelWidth = 16;

// Element type of a packed weight matrix. The kernels widen bf16 and f16 to
// f32 in registers (exactly); activations and sums are always f32.
//   BF16: bfloat16, the top 16 bits of an IEEE binary32;  F16: IEEE binary16.
//   Q8_0, Q4_0: blocks of 32 small integers with an f16 scale, in their own
//   panel arrangement (quant_layout.hpp); activations are quantized to 8 bits.
enum class WeightType { F32 = 0, BF16 = 1, F16 = 2, Q8_0 = 3, Q4_0 = 4 };

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
// The same for a packed W of any weight type (`packed` points at its first
// element), widened to f32 exactly (q8_0 / q4_0: dequantized, d * q).
void unpack_panel_row(const void* packed, WeightType type, size_t K, size_t n, float* row);
// Rounds `n` floats to bf16 / f16 (nearest, ties to even), e.g. a whole packed
// matrix after pack_panels: the zero padding stays zero.
void narrow_to_bf16(const float* in, size_t n, uint16_t* out);
void narrow_to_f16(const float* in, size_t n, uint16_t* out);

}  // namespace mmgpt::kernels
