// Scalar reference of the block-quantized matmul (q8_0 / q4_0 weights,
// activations quantized to q8 per block of 32): the definition every SIMD
// kernel reproduces bit for bit. For output (m, n):
//   acc = 0;  for each block b in order:
//     acc = fma(float(sum_i qw[n][32b+i] * qx[m][32b+i]), dw[n][b] * dx[m][b], acc)
// (the integer sum is exact: |sum| <= 32 * 127 * 127 < 2^24, so its float is
// too), then the epilogue as for f32: v = acc + bias; v = act(v); y (+)= v.
#include <cmath>
#include <cstring>

#include "core/half.hpp"
#include "core/quant_layout.hpp"
#include "kernels/kernels.hpp"
#include "kernels/registry.hpp"

namespace mmgpt::kernels::scalar {
namespace {

void gemm_panels_quant(const QuantizedRows& x, const uint8_t* wp, WeightType t, const float* bias, float* y, size_t M,
                       size_t K, size_t N, size_t p0, size_t p1, Epilogue e) {
  const size_t Kb = quant_blocks(K);
  const size_t panel_bytes = quant_panel_bytes(t, Kb);
  const size_t n1 = p1 * kPanelWidth < N ? p1 * kPanelWidth : N;
  for (size_t m = 0; m < M; ++m) {
    const int8_t* xq = x.q + m * Kb * kQuantBlock;
    for (size_t n = p0 * kPanelWidth; n < n1; ++n) {
      const uint8_t* panel = wp + (n / kPanelWidth) * panel_bytes;
      const size_t j = n % kPanelWidth;
      float acc = 0.0f;
      for (size_t b = 0; b < Kb; ++b) {
        const uint8_t* block = panel + quant_block_offset(t, b);
        int32_t isum = 0;
        for (size_t r = 0; r < kQuantBlock; ++r) {
          int qw;
          if (t == WeightType::Q8_0) {
            qw = static_cast<int8_t>(block[(r / 4) * 64 + j * 4 + r % 4]);
          } else {
            const uint8_t byte = block[(r / 8) * 64 + j * 4 + r % 4];
            qw = ((r % 8) >= 4 ? byte >> 4 : byte & 0x0f) - 8;
          }
          isum += qw * xq[b * kQuantBlock + r];
        }
        uint16_t bits = 0;
        std::memcpy(&bits, panel + quant_scale_offset(t, b) + j * 2, 2);
        acc = std::fma(static_cast<float>(isum), f16_to_f32(bits) * x.scale[m * Kb + b], acc);
      }
      store_epilogue(acc, bias ? bias + n : nullptr, e, y[m * N + n]);
    }
  }
}

}  // namespace

void gemm_panels_q8_0(const QuantizedRows& x, const uint8_t* wp, const float* bias, float* y, size_t M, size_t K,
                      size_t N, size_t p0, size_t p1, Epilogue e) {
  gemm_panels_quant(x, wp, WeightType::Q8_0, bias, y, M, K, N, p0, p1, e);
}

void gemm_panels_q4_0(const QuantizedRows& x, const uint8_t* wp, const float* bias, float* y, size_t M, size_t K,
                      size_t N, size_t p0, size_t p1, Epilogue e) {
  gemm_panels_quant(x, wp, WeightType::Q4_0, bias, y, M, K, N, p0, p1, e);
}

void quantize_rows(const float* x, size_t M, size_t K, int8_t* q, float* scale, int32_t* sum) {
  const size_t Kb = quant_blocks(K);
  for (size_t m = 0; m < M; ++m)
    for (size_t b = 0; b < Kb; ++b) {
      const size_t k0 = b * kQuantBlock, n = K - k0 < kQuantBlock ? K - k0 : kQuantBlock;
      scale[m * Kb + b] = quantize_block_q8(x + m * K + k0, n, q + (m * Kb + b) * kQuantBlock, &sum[m * Kb + b]);
    }
}

}  // namespace mmgpt::kernels::scalar

namespace mmgpt::kernels::detail {

void quant_gelu(Activation act, float* v, size_t n) {
  const KernelSet& t = active_set();
  if (act == Activation::GeluErf) t.gelu_erf(v, n);
  if (act == Activation::GeluTanh) t.gelu_tanh(v, n);
  if (act == Activation::ReluSquared) scalar::relu_squared(v, n);
}

const QuantKernels& scalar_quant_kernels() {
  static const QuantKernels k =
      quant_kernels<&scalar::gemm_panels_q8_0, &scalar::gemm_panels_q4_0>("scalar", &scalar::quantize_rows, nullptr);
  return k;
}

}  // namespace mmgpt::kernels::detail
