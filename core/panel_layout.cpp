#include "core/panel_layout.hpp"

#include <algorithm>

#include "core/half.hpp"
#include "core/quant_layout.hpp"

namespace mmgpt {

void pack_panels(const float* w, size_t N, size_t K, float* out) {
  std::fill(out, out + panel_floats(N, K), 0.0f);
  for (size_t n = 0; n < N; ++n)
    for (size_t k = 0; k < K; ++k) out[panel_index(K, n, k)] = w[n * K + k];
}

void pack_half_panels(const float* w, size_t N, size_t K, WeightType type, uint16_t* out) {
  std::fill(out, out + panel_floats(N, K), uint16_t{0});  // +0 in both bf16 and f16
  for (size_t n = 0; n < N; ++n)
    for (size_t k = 0; k < K; ++k)
      out[half_panel_index(N, K, n, k)] =
          type == WeightType::BF16 ? f32_to_bf16(w[n * K + k]) : f32_to_f16(w[n * K + k]);
}

void unpack_panel_row(const float* packed, size_t K, size_t n, float* row) {
  const float* p = packed + panel_index(K, n, 0);
  for (size_t k = 0; k < K; ++k) row[k] = p[k * kPanelWidth];
}

void unpack_panel_row(const void* packed, WeightType type, size_t N, size_t K, size_t n, float* row) {
  if (type == WeightType::F32) return unpack_panel_row(static_cast<const float*>(packed), K, n, row);
  if (is_quantized(type)) return dequantize_panel_row(static_cast<const uint8_t*>(packed), type, K, n, row);
  const uint16_t* p = static_cast<const uint16_t*>(packed) + n % kPanelWidth;
  const PanelSteps steps = half_panel_steps(N, K, n / kPanelWidth);
  if (type == WeightType::BF16)
    for (size_t k = 0; k < K; ++k) row[k] = bf16_to_f32(p[steps.at(K, k)]);
  else
    for (size_t k = 0; k < K; ++k) row[k] = f16_to_f32(p[steps.at(K, k)]);
}

void narrow_to_bf16(const float* in, size_t n, uint16_t* out) {
  for (size_t i = 0; i < n; ++i) out[i] = f32_to_bf16(in[i]);
}

void narrow_to_f16(const float* in, size_t n, uint16_t* out) {
  for (size_t i = 0; i < n; ++i) out[i] = f32_to_f16(in[i]);
}

}  // namespace mmgpt
