#include "core/quant_layout.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/half.hpp"

namespace mmgpt {

namespace {

// Byte of quant (row j of its panel, k within the row) inside a panel.
size_t q8_byte(size_t j, size_t k) {
  return quant_block_offset(WeightType::Q8_0, k / 32) + (k % 32 / 4) * 64 + j * 4 + k % 4;
}
// q4_0: the byte, and whether the value is in its high nibble.
size_t q4_byte(size_t j, size_t k, bool* high) {
  const size_t r = k % 32;
  *high = (r % 8) >= 4;
  return quant_block_offset(WeightType::Q4_0, k / 32) + (r / 8) * 64 + j * 4 + r % 4;
}
// Byte of the scale of (row j, block b) inside a panel.
size_t scale_byte(WeightType t, size_t j, size_t b) { return quant_scale_offset(t, b) + j * 2; }

// The scale as stored (f16) and as the kernels read it (widened).
float stored_scale(float d, uint16_t* bits) {
  *bits = f32_to_f16(d);
  return f16_to_f32(*bits);
}

int clamp_round(float v, int lo, int hi) {
  const float r = std::nearbyint(v);
  return r < static_cast<float>(lo) ? lo : r > static_cast<float>(hi) ? hi : static_cast<int>(r);
}

}  // namespace

void quantize_panels(const float* w, size_t N, size_t K, WeightType t, uint8_t* out) {
  const size_t Kb = quant_blocks(K);
  const size_t panel_bytes = quant_panel_bytes(t, Kb);
  std::memset(out, 0, packed_weight_bytes(t, N, K));
  if (t == WeightType::Q4_0)  // zero weights (padding, and a missing last block of a unit) are the nibble 8
    for (size_t p = 0; p < panel_count(N); ++p)
      for (size_t b = 0; b < (Kb + 1) / 2 * 2; ++b)
        std::memset(out + p * panel_bytes + quant_block_offset(t, b), 0x88, quant_block_bytes(t));
  for (size_t n = 0; n < N; ++n) {
    uint8_t* panel = out + (n / kPanelWidth) * panel_bytes;
    const size_t j = n % kPanelWidth;
    const float* row = w + n * K;
    for (size_t b = 0; b < Kb; ++b) {
      const size_t k0 = b * kQuantBlock, k1 = std::min(K, k0 + kQuantBlock);
      // The block's value of largest magnitude (the first, on ties).
      float big = 0.0f;
      for (size_t k = k0; k < k1; ++k)
        if (std::fabs(row[k]) > std::fabs(big)) big = row[k];
      uint16_t bits = 0;
      const float d = stored_scale(t == WeightType::Q8_0 ? std::fabs(big) / 127.0f : big / -8.0f, &bits);
      std::memcpy(panel + scale_byte(t, j, b), &bits, 2);
      // Quantize against the scale as stored, so rounding the scale to f16
      // costs no extra error. A zero or non-finite scale stores zeros.
      const bool usable = d != 0.0f && std::isfinite(d);
      for (size_t k = k0; k < k1; ++k) {
        if (t == WeightType::Q8_0) {
          const int q = usable ? clamp_round(row[k] / d, -127, 127) : 0;
          panel[q8_byte(j, k)] = static_cast<uint8_t>(static_cast<int8_t>(q));
        } else {
          const int q = usable ? clamp_round(row[k] / d, -8, 7) : 0;
          bool high = false;
          uint8_t& byte = panel[q4_byte(j, k, &high)];
          const uint8_t nib = static_cast<uint8_t>(q + 8);
          byte = high ? static_cast<uint8_t>((byte & 0x0f) | (nib << 4)) : static_cast<uint8_t>((byte & 0xf0) | nib);
        }
      }
    }
  }
}

void dequantize_panel_row(const uint8_t* packed, WeightType t, size_t K, size_t n, float* row) {
  const size_t Kb = quant_blocks(K);
  const uint8_t* panel = packed + (n / kPanelWidth) * quant_panel_bytes(t, Kb);
  const size_t j = n % kPanelWidth;
  for (size_t k = 0; k < K; ++k) {
    uint16_t bits = 0;
    std::memcpy(&bits, panel + scale_byte(t, j, k / kQuantBlock), 2);
    int q = 0;
    if (t == WeightType::Q8_0) {
      q = static_cast<int8_t>(panel[q8_byte(j, k)]);
    } else {
      bool high = false;
      const uint8_t byte = panel[q4_byte(j, k, &high)];
      q = (high ? byte >> 4 : byte & 0x0f) - 8;
    }
    row[k] = f16_to_f32(bits) * static_cast<float>(q);
  }
}

float quantize_block_q8(const float* x, size_t n, int8_t* q, int32_t* sum) {
  float amax = 0.0f;
  bool finite = true;
  for (size_t i = 0; i < n; ++i) {
    amax = std::max(amax, std::fabs(x[i]));
    finite = finite && std::isfinite(x[i]);
  }
  *sum = 0;
  std::memset(q, 0, kQuantBlock);
  // Inf or NaN in the block: a NaN scale, so the products come out NaN as
  // they would in f32 (and no NaN is ever converted to an integer).
  if (!finite) return std::numeric_limits<float>::quiet_NaN();
  if (amax == 0.0f) return 0.0f;
  const float id = 127.0f / amax;
  int32_t s = 0;
  for (size_t i = 0; i < n; ++i) {
    const int v = clamp_round(x[i] * id, -127, 127);
    q[i] = static_cast<int8_t>(v);
    s += v;
  }
  *sum = s;
  return amax / 127.0f;
}

}  // namespace mmgpt
