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
// 16-bit weights (file dtypes bf16 and f16; file layout id 3, "panel16x2")
// hold the same panels, 2 bytes per element, so a panel k-step is half a
// cache line and a line is two k-steps (k even, k + 1) of one panel. The
// panels go in pairs (2q, 2q + 1) whose lines alternate: line i of panel 2q,
// line i of panel 2q + 1, line i + 1 of panel 2q, ... When K is odd, the last
// k-step of each panel is half a line: panel 2q's, then 2q + 1's, end the
// pair. A last panel without a partner (an odd panel count) is stored as f32
// panels are. Why: a decode kernel reads a pair front to back as one memory
// stream while keeping two accumulator chains, one per panel, each with two
// dependent multiply-adds per line; one panel alone would wait on its chain
// (docs/kernels.md, "16-bit panels in pairs"). Sizes are those of the f32
// layout, 2 bytes per element.
#include <cstddef>
#include <cstdint>

#include "core/weight_type.hpp"

namespace mmgpt {

inline constexpr size_t kPanelWidth = 16;

inline size_t panel_count(size_t N) { return (N + kPanelWidth - 1) / kPanelWidth; }
// Floats a packed W[N, K] occupies (N rounded up to whole panels).
inline size_t panel_floats(size_t N, size_t K) { return panel_count(N) * kPanelWidth * K; }
// Index of W[n][k] in the packed array.
inline size_t panel_index(size_t K, size_t n, size_t k) {
  return (n / kPanelWidth) * kPanelWidth * K + k * kPanelWidth + n % kPanelWidth;
}

// Where panel p's k-steps lie in a packed W[N, K], in elements from the
// matrix's first element: k-step k (16 consecutive elements, one per row) is at
// first + (k / 2) * pitch + (k % 2) * 16 for k < K & ~1, and the last k-step
// of an odd K at tail. f32 panels are contiguous (pitch 32); paired 16-bit
// panels interleave lines (pitch 64).
struct PanelSteps {
  size_t first, pitch, tail;
  size_t at(size_t K, size_t k) const {
    return k < (K & ~size_t(1)) ? first + (k / 2) * pitch + (k % 2) * kPanelWidth : tail;
  }
};
inline PanelSteps panel_steps(size_t K, size_t p) {  // f32
  const size_t first = p * kPanelWidth * K;
  return {first, 2 * kPanelWidth, first + (K & ~size_t(1)) * kPanelWidth};
}
inline PanelSteps half_panel_steps(size_t N, size_t K, size_t p) {  // bf16, f16
  if (p % 2 == 1 || p + 1 < panel_count(N)) {
    const size_t pair = (p & ~size_t(1)) * kPanelWidth * K, side = p % 2;
    return {pair + side * 2 * kPanelWidth, 4 * kPanelWidth,
            pair + 2 * (K & ~size_t(1)) * kPanelWidth + side * kPanelWidth};
  }
  return panel_steps(K, p);  // the unpaired last panel
}
// The one of the two for a packed matrix of element type E (float, or a
// 16-bit type).
template <class E>
inline PanelSteps panel_steps_of(size_t N, size_t K, size_t p) {
  if constexpr (sizeof(E) == 4)
    return panel_steps(K, p);
  else
    return half_panel_steps(N, K, p);
}
// Panels [p0, p1) of a 16-bit matrix as decode reads them: each pair (2q,
// 2q+1) together, its lines one stream (two(2q)); a range that starts at an
// odd panel (a thread's share) or ends inside a pair, and the unpaired last
// panel, take that panel alone (one(p)).
template <class One, class Two>
inline void for_panel_pairs(size_t p0, size_t p1, One one, Two two) {
  size_t p = p0;
  if (p % 2 == 1 && p < p1) one(p++);
  for (; p + 2 <= p1; p += 2) two(p);
  if (p < p1) one(p);
}
// Index of W[n][k] in a packed 16-bit W[N, K].
inline size_t half_panel_index(size_t N, size_t K, size_t n, size_t k) {
  return half_panel_steps(N, K, n / kPanelWidth).at(K, k) + n % kPanelWidth;
}

// Packs a row-major W[N, K] into `out` (panel_floats(N, K) floats), zero padding included.
void pack_panels(const float* w, size_t N, size_t K, float* out);
// Packs a row-major W[N, K] as bf16 or f16 (`type`; rounded to nearest even)
// panel pairs into `out` (panel_floats(N, K) elements), zero padding included.
void pack_half_panels(const float* w, size_t N, size_t K, WeightType type, uint16_t* out);
// Copies row n of a packed W[N, K] (K strided floats) into `row`.
void unpack_panel_row(const float* packed, size_t K, size_t n, float* row);
// The same for a packed W of any weight type (`packed` points at its first
// element), widened to f32 exactly (q8_0 / q4_0: dequantized, d * q).
void unpack_panel_row(const void* packed, WeightType type, size_t N, size_t K, size_t n, float* row);
// Rounds `n` floats to bf16 / f16 (nearest, ties to even).
void narrow_to_bf16(const float* in, size_t n, uint16_t* out);
void narrow_to_f16(const float* in, size_t n, uint16_t* out);

}  // namespace mmgpt
