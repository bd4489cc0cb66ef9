// Scalar reference of the bf16 dot-product matmul as Arm's BFDOT computes it:
// the definition the NEON BF16 kernels (arm/neon/bf16dot.cpp) reproduce bit
// for bit. Same inputs as the VDPBF16PS reference (scalar/bf16dot.cpp: x
// rounded to bf16 once by bf16dot_round_rows, rows of pairs, w past K zero),
// different arithmetic. The Arm ARM's BFDOT with FPCR.EBF 0 (Linux's
// default), per output (m, n), over the pairs i = 0, 1, .. of k in order:
//     acc = 0;
//     acc = ro(acc + ro(ro(x[2i] w[2i]) + ro(x[2i+1] w[2i+1])));
// ro: round to odd (an inexact result is the value truncated toward zero with
// its last bit set; an overflow is an infinity of its sign), then a result
// below the smallest normal (before rounding) becomes a zero of its sign;
// inputs that are subnormal read as zeros of their sign; a NaN result is the
// default NaN. The product of two bf16 is exact unless it leaves the normal
// range. Then the epilogue as for f32: v = acc + bias; v = act(v); y (+)= v.
// Each step is evaluated exactly in double (a sum of two floats is exact
// there unless their exponents are far apart, and then its rounding error
// decides the direction: ro_to_float).
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/kernels.hpp"
#include "kernels/registry.hpp"
#include "kernels/scalar/bf16dot_loop.hpp"

namespace mmgpt::kernels {
namespace {

// ro of the exact value s + err (s a double, err its rounding error, 0 when s
// is exact): rounded to odd, an overflow to infinity, and a result below
// 2^-126 in magnitude flushed to a zero of its sign.
float ro_to_float(double s, double err) {
  if (std::isnan(s)) return std::numeric_limits<float>::quiet_NaN();
  if (std::isinf(s)) return static_cast<float>(s);
  if (std::fabs(s) < 0x1p-126) return std::signbit(s) ? -0.0f : 0.0f;
  constexpr float inf = std::numeric_limits<float>::infinity();
  if (std::fabs(s) >= 0x1p128) return s > 0 ? inf : -inf;
  float f = static_cast<float>(s);  // nearest; may be infinity just below 2^128
  const bool exact = err == 0 && static_cast<double>(f) == s;
  if (exact) return f;
  // Truncate toward zero: f is past the exact value when |f| > |s|, or when
  // f == s and the error points back toward zero.
  const bool past = std::isinf(f) || std::fabs(static_cast<double>(f)) > std::fabs(s) ||
                    (static_cast<double>(f) == s && (s > 0 ? err < 0 : err > 0));
  if (past) f = std::nextafter(f, 0.0f);
  return std::bit_cast<float>(std::bit_cast<uint32_t>(f) | 1u);
}

// ro(a + b) for floats a, b (Knuth's TwoSum gives the double sum's error).
float ro_add(float a, float b) {
  const double x = a, y = b, s = x + y;
  const double bv = s - x, err = (x - (s - bv)) + (y - bv);  // NaN when s is not finite: unused then
  return ro_to_float(s, err);
}

// ro(a * b) for bf16 values a, b (their product is exact in double).
float ro_mul(float a, float b) { return ro_to_float(static_cast<double>(a) * static_cast<double>(b), 0); }

void gemm_panels_bfdot(const uint16_t* x, const uint16_t* wp, const float* bias, float* y, size_t M, size_t K, size_t N,
                       size_t p0, size_t p1, Epilogue e) {
  auto step = [](float acc, float x0, float w0, float x1, float w1) {
    return ro_add(acc, ro_add(ro_mul(x0, w0), ro_mul(x1, w1)));  // the pair's sum first
  };
  detail::bf16dot_reference_gemm(x, wp, bias, y, M, K, N, p0, p1, e, step);
}

}  // namespace

namespace detail {

const MatmulKernels& scalar_arm_bf16dot_kernels() {
  static const MatmulKernels k = bf16dot_kernels<&gemm_panels_bfdot>("scalar (BFDOT)", nullptr);
  return k;
}

}  // namespace detail
}  // namespace mmgpt::kernels
