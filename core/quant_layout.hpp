#pragma once
// The block-quantized weight formats q8_0 and q4_0 (file dtypes 3 and 4), in
// the panel16 arrangement the integer dot-product kernels read, and the 8-bit
// quantization of activations they multiply with. Byte-exact spec in
// docs/format.md ("Dtypes 3 and 4").
//
// Blocks: each output row n of W[N, K] is cut into Kb = ceil(K / 32) blocks
// of 32 consecutive k (k >= K padded with zero weights). A block stores 32
// small integers q and one scale d (IEEE binary16); its values are d * q.
//   q8_0: q in [-127, 127], one signed byte each;  d = max|w| / 127.
//   q4_0: q in [-8, 7], stored as the nibble q + 8; d = w_max / -8 where w_max
//         is the block's value of largest magnitude (so it maps to exactly -8).
//
// Panels: as for f32, rows are grouped 16 to a panel (rows past N are zero
// with scale 0). A panel is ceil(Kb / 2) units; unit u holds blocks 2u and
// 2u+1: the quants of block 2u, those of block 2u+1, then the two blocks'
// scales in one 64-byte line (a missing block 2u+1, when Kb is odd, is zero).
// With B = 512 (q8_0) or 256 (q4_0) bytes of quants per block and U = 2B + 64
// bytes per unit, block b's quants start at (b/2)*U + (b%2)*B and:
//   q8_0 quants: group g (0..7), row j (0..15), i (0..3) at byte
//                g*64 + j*4 + i of the block  holds q[16p+j][32b + 4g + i];
//   q4_0 quants: chunk c (0..3), row j, i (0..3) at byte
//                c*64 + j*4 + i of the block  holds q[16p+j][32b + 8c + i] + 8 in its
//                low nibble and q[16p+j][32b + 8c + 4 + i] + 8 in its high one;
//   scales:      row j's at byte (b/2)*U + 2B + (b%2)*32 + j*2, f16 little-endian.
// So 64 bytes of quants hold 4 (q8_0) or 8 (q4_0) consecutive k of 16 rows,
// row j in 32-bit lane j: exactly the operand of one 512-bit VPDPBUSD (or two
// 256-bit / four 128-bit SDOT) whose other operand broadcasts 4 bytes of x.
// And a panel is read front to back, scales included, as one stream: decode
// streams the whole matrix in memory order, with no second stream of scales
// (docs/kernels.md, "Quantized panels with their scales inline").
//
// Activations: each row of x[M, K] is quantized per block of 32 to q8 with
// an f32 scale (the QuantizedRows below); a product sums the exact integer
// dot products of block pairs, scaled in float (the scalar reference in
// scalar_quant.cpp is the definition every SIMD kernel matches bit for bit).
#include <cstddef>
#include <cstdint>

#include "core/panel_layout.hpp"

namespace mmgpt {

inline constexpr size_t kQuantBlock = 32;

inline size_t quant_blocks(size_t K) { return (K + kQuantBlock - 1) / kQuantBlock; }
// Bytes of one block's quants in a panel (B above), of a unit of two blocks
// with their scales (U), and of a panel of Kb blocks.
inline size_t quant_block_bytes(WeightType t) { return t == WeightType::Q8_0 ? 512 : 256; }
inline size_t quant_unit_bytes(WeightType t) { return 2 * quant_block_bytes(t) + 64; }
inline size_t quant_panel_bytes(WeightType t, size_t Kb) { return (Kb + 1) / 2 * quant_unit_bytes(t); }
// Offsets inside a panel of block b's quants and of its 16 scales.
inline size_t quant_block_offset(WeightType t, size_t b) {
  return b / 2 * quant_unit_bytes(t) + b % 2 * quant_block_bytes(t);
}
inline size_t quant_scale_offset(WeightType t, size_t b) {
  return b / 2 * quant_unit_bytes(t) + 2 * quant_block_bytes(t) + b % 2 * 32;
}

// Quantizes a row-major f32 W[N, K] into `out` (packed_weight_bytes(t, N, K)
// bytes, t = Q8_0 or Q4_0), padding included.
void quantize_panels(const float* w, size_t N, size_t K, WeightType t, uint8_t* out);
// Row n of a quantized packed W, dequantized (d * q, exactly as the kernels
// weigh it) into row[0, K).
void dequantize_panel_row(const uint8_t* packed, WeightType t, size_t K, size_t n, float* row);

// x[M, K] quantized per block of 32: row m, block b has the 32 values q[m*Kp + 32b ..]
// (Kp = 32*Kb; zeros past K), scale[m*Kb + b] and sum[m*Kb + b] = the sum of its 32 q.
//   a block holding an infinity or NaN: d = NaN, q = 0 (the products come out NaN, as in f32);
//   else amax = max |x|; amax == 0: d = 0, q = 0; else d = amax / 127, q = nearbyint(x * (127 / amax)).
struct QuantizedRows {
  const int8_t* q = nullptr;
  const float* scale = nullptr;
  const int32_t* sum = nullptr;
  size_t blocks = 0;  // Kb per row
};

// One block of n <= 32 activations (the rest of the 32 taken as zero), as
// defined above: writes q[0, 32) and *sum, returns the scale (NaN when x
// holds an infinity or NaN, so the products come out NaN as in f32).
float quantize_block_q8(const float* x, size_t n, int8_t* q, int32_t* sum);

}  // namespace mmgpt
