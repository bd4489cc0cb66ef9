// Scalar reference of the bf16 dot-product matmul (bf16 weights times
// activations rounded to bf16): the definition the AVX512_BF16 kernels
// (x86/avx512/bf16dot.cpp) reproduce bit for bit. It is the arithmetic of
// VCVTNE2PS2BF16 and VDPBF16PS as the Intel SDM defines them:
//  - x is rounded to bf16 once (bf16dot_round_rows): nearest, ties to even;
//    NaN stays NaN (quiet); an f32 subnormal becomes a zero of its sign. A row
//    of odd K gets a zero after its last value, so rows are pairs of k.
//  - For output (m, n), over the pairs i = 0, 1, .. of k (2i, 2i+1) in order:
//      acc = 0;
//      acc = ftz(fma(daz(x[2i+1]), daz(w[2i+1]), acc));   (the ODD element first)
//      acc = ftz(fma(daz(x[2i]),   daz(w[2i]),   acc));
//    daz: a subnormal bf16 input reads as a zero of its sign; ftz: a subnormal
//    result becomes a zero of its sign; the product of two bf16 is exact in
//    f32, so each step rounds once (to nearest even). w past K is zero.
//  - then the epilogue as for f32: v = acc + bias; v = act(v); y (+)= v.
//
// And the arithmetic of AMX's TDPBF16PS as the SDM defines it (the AMX-BF16
// kernels, x86/avx512/amx.cpp): over chunks of 16 pairs of k (32 k, a tile's
// row; the last chunk may be shorter), for output (m, n):
//      acc = 0;  per chunk: even = 0, odd = 0;
//        per pair i of the chunk: even = ftz(fma(daz(x[2i]),   daz(w[2i]),   even));
//                                 odd  = ftz(fma(daz(x[2i+1]), daz(w[2i+1]), odd));
//        acc = ftz(acc + ftz(even + odd));
//
// tests/test_kernels_bf16dot.cpp checks, where the CPU has AVX512_BF16, that
// VDPBF16PS gives this bit for bit on random data and on subnormals,
// infinities and NaNs (only the payload of a NaN result can differ), and
// VCVTNE2PS2BF16 this rounding.
#include <bit>
#include <cmath>

#include "kernels/kernels.hpp"
#include "kernels/registry.hpp"
#include "kernels/scalar/bf16dot_loop.hpp"

namespace mmgpt::kernels {
namespace {

void gemm_panels_bf16dot(const uint16_t* x, const uint16_t* wp, const float* bias, float* y, size_t M, size_t K,
                         size_t N, size_t p0, size_t p1, Epilogue e) {
  auto step = [](float acc, float x0, float w0, float x1, float w1) {
    acc = detail::flush_subnormal(std::fma(x1, w1, acc));  // the odd element first
    return detail::flush_subnormal(std::fma(x0, w0, acc));
  };
  detail::bf16dot_reference_gemm(x, wp, bias, y, M, K, N, p0, p1, e, step);
}

// TDPBF16PS's arithmetic (above): two chains per chunk of 16 pairs.
void gemm_panels_tdpbf16ps(const uint16_t* x, const uint16_t* wp, const float* bias, float* y, size_t M, size_t K,
                           size_t N, size_t p0, size_t p1, Epilogue e) {
  using detail::flush_subnormal;
  auto widen = [](uint16_t b) { return flush_subnormal(bf16_to_f32(b)); };
  const size_t Kp = detail::bf16dot_row_elems(K);
  const size_t n1 = p1 * kPanelWidth < N ? p1 * kPanelWidth : N;
  for (size_t m = 0; m < M; ++m) {
    const uint16_t* xm = x + m * Kp;
    for (size_t n = p0 * kPanelWidth; n < n1; ++n) {
      const uint16_t* wn = wp + n % kPanelWidth;
      const PanelSteps steps = half_panel_steps(N, K, n / kPanelWidth);
      auto w = [&](size_t k) { return k < K ? widen(wn[steps.at(K, k)]) : 0.0f; };
      float acc = 0.0f;
      for (size_t c = 0; c < Kp; c += 2 * detail::kTdpbf16psChunkPairs) {
        const size_t end = Kp - c < 2 * detail::kTdpbf16psChunkPairs ? Kp : c + 2 * detail::kTdpbf16psChunkPairs;
        float even = 0.0f, odd = 0.0f;
        for (size_t k = c; k < end; k += 2) {
          even = flush_subnormal(std::fma(widen(xm[k]), w(k), even));
          odd = flush_subnormal(std::fma(widen(xm[k + 1]), w(k + 1), odd));
        }
        acc = flush_subnormal(acc + flush_subnormal(even + odd));
      }
      scalar::store_epilogue(acc, bias ? bias + n : nullptr, e, y[m * N + n]);
    }
  }
}

}  // namespace

namespace detail {

const MatmulKernels& scalar_tdpbf16ps_kernels() {
  static const MatmulKernels k = bf16dot_kernels<&gemm_panels_tdpbf16ps>("scalar", nullptr);
  return k;
}

void bf16dot_round_rows(const float* x, size_t M, size_t K, uint16_t* out) {
  const size_t Kp = bf16dot_row_elems(K);
  for (size_t m = 0; m < M; ++m) {
    // Branch-free, so the compiler vectorizes it.
    for (size_t k = 0; k < K; ++k) {
      const uint32_t u = std::bit_cast<uint32_t>(x[m * K + k]);
      const uint32_t nearest = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;  // f32_to_bf16 (core/half.hpp)
      const uint32_t nan = (u >> 16) | 0x0040u;
      const uint32_t zero = (u >> 16) & 0x8000u;
      const uint32_t r = (u & 0x7fffffffu) > 0x7f800000u ? nan : (u & 0x7f800000u) == 0 ? zero : nearest;
      out[m * Kp + k] = static_cast<uint16_t>(r);
    }
    if (Kp != K) out[m * Kp + K] = 0;
  }
}

const MatmulKernels& scalar_bf16dot_kernels() {
  static const MatmulKernels k = bf16dot_kernels<&gemm_panels_bf16dot>("scalar", nullptr);
  return k;
}

}  // namespace detail
}  // namespace mmgpt::kernels
