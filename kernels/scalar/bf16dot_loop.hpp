#pragma once
// The loop the two bf16 dot-product references share (scalar/bf16dot.cpp,
// VDPBF16PS's arithmetic; scalar/bf16dot_arm.cpp, BFDOT's): per output (m, n)
// of panels [p0, p1), acc = 0 and then, over the pairs of k in order,
// acc = step(acc, x[2i], w[2i], x[2i+1], w[2i+1]) with the bf16 values
// widened and subnormal inputs read as zeros of their sign (both instructions
// flush them); w past K is zero. Then the epilogue as for f32.
#include <bit>
#include <cstddef>
#include <cstdint>

#include "core/half.hpp"
#include "kernels/kernels.hpp"
#include "kernels/registry.hpp"

namespace mmgpt::kernels::detail {

// A subnormal (or zero) to the zero of its sign; anything else unchanged.
inline float flush_subnormal(float v) {
  const uint32_t u = std::bit_cast<uint32_t>(v);
  return (u & 0x7f800000u) == 0 ? std::bit_cast<float>(u & 0x80000000u) : v;
}

template <class Step>
void bf16dot_reference_gemm(const uint16_t* x, const uint16_t* wp, const float* bias, float* y, size_t M, size_t K,
                            size_t N, size_t p0, size_t p1, Epilogue e, Step step) {
  auto widen = [](uint16_t b) { return flush_subnormal(bf16_to_f32(b)); };
  const size_t Kp = bf16dot_row_elems(K);
  const size_t n1 = p1 * kPanelWidth < N ? p1 * kPanelWidth : N;
  for (size_t m = 0; m < M; ++m) {
    const uint16_t* xm = x + m * Kp;
    for (size_t n = p0 * kPanelWidth; n < n1; ++n) {
      const uint16_t* wn = wp + n % kPanelWidth;
      const PanelSteps steps = half_panel_steps(N, K, n / kPanelWidth);  // panel pairs (panel_layout.hpp)
      auto w = [&](size_t k) { return k < K ? widen(wn[steps.at(K, k)]) : 0.0f; };
      float acc = 0.0f;
      for (size_t k = 0; k < Kp; k += 2) acc = step(acc, widen(xm[k]), w(k), widen(xm[k + 1]), w(k + 1));
      scalar::store_epilogue(acc, bias ? bias + n : nullptr, e, y[m * N + n]);
    }
  }
}

}  // namespace mmgpt::kernels::detail
