#pragma once
// The block-quantized kernels (q8_0 / q4_0 weights, q8 activations) for
// AArch64 Advanced SIMD, written once for both quantized sets:
//   quant.cpp          Dot = false: baseline Armv8-A (SMULL / SMLAL into
//                      int16, SADALP / SADDLP into int32);
//   quant_dotprod.cpp  Dot = true: the Armv8.2 dot product (SDOT by lane).
// Include only from those two files. Everything here has internal linkage (an
// unnamed namespace), so the two TUs, compiled with different -march, never
// share an inline function through the linker.
//
// Numerics: exactly the scalar reference (scalar/quant.cpp). Per output
// (m, n) and block b the integer dot product of the 32 weight and 32
// activation quants is exact in int32 whatever order it is summed in; its
// float is exact (|sum| < 2^24); then acc = fma(float(isum), dw * dx, acc) in
// block order (FMLA with the f16 scale widened by FCVTL, times dx, rounded to
// f32 first), then v = acc + bias, the activation, y (+)= v. So the tile a
// result lands in (decode or prefill, the panel split) never changes it.
//
// Panel layout (quant_layout.hpp): 64 bytes of quants = 16 rows x 4 (q8_0) or
// 8 (q4_0) consecutive k, row j in 32-bit lane j, i.e. four 128-bit vectors
// of 4 rows each; a "column vector" below is one of them (4 output columns).
//   q8_0: group g (k 4g..4g+3 of the block) at byte g*64 of the block, its
//         4-byte slice of x is lane g % 4 of x vector g / 4 (x: 2 x 16 bytes);
//   q4_0: chunk c at byte c*64: low nibbles are group 2c, high ones group
//         2c+1, stored as q + 8. The kernels multiply the nibbles (0..15) as
//         they are and subtract 8 * (sum of the block's x quants), which
//         QuantizedRows carries: sum (n - 8) x = sum n x - 8 sum x, exactly.
//
// Tiles: decode (M = 1) runs one row against several panels at once (their
// accumulators independent, so the FMA and load latencies overlap); prefill a
// register tile of R rows x half a panel (8 columns), so each weight vector
// loaded feeds R rows. Rows left over (M % R) take the one-row tile.
//
// Epilogue: v = acc + bias, then the GELU through quant_gelu (the active
// set's vector GELU, as the f32 matmul fuses it), then y (+)= v; so every
// result without a GELU is the reference's bit for bit, and a fused GELU is
// within the vector GELU's bound of it.
#if !defined(__aarch64__)
#error "arm/neon/quant_impl.hpp is for aarch64 only"
#endif
#include <arm_neon.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

#include "core/quant_layout.hpp"
#include "kernels/arm/neon/neon.hpp"
#include "kernels/arm/neon/tile_finish.hpp"
#include "kernels/kernels.hpp"
#include "kernels/registry.hpp"

namespace mmgpt::kernels::detail {
namespace {
namespace qneon {

// The 4 bytes of lane L of x, in all four 32-bit lanes.
template <int L>
inline int8x16_t dup_group(int8x16_t x) {
  return vreinterpretq_s8_s32(vdupq_laneq_s32(vreinterpretq_s32_s8(x), L));
}

// is[r][c] = the exact int32 dot products, over one block, of x rows r (xv[r]:
// its 32 quants) with the 4 weight rows of column vector c (wp[c]: the
// vector's first bytes in the block; group / chunk i at wp[c] + i * 64).
// q4_0: without the -8 offset of the nibbles (the caller subtracts it).
template <bool Dot, WeightType T, size_t R, size_t C>
inline __attribute__((always_inline)) void block_dot(const int8x16_t (&xv)[R][2], const uint8_t* const (&wp)[C],
                                                     int32x4_t (&is)[R][C]) {
  if constexpr (Dot) {
#if defined(__ARM_FEATURE_DOTPROD)
    for (size_t r = 0; r < R; ++r)
      for (size_t c = 0; c < C; ++c) is[r][c] = vdupq_n_s32(0);
    if constexpr (T == WeightType::Q8_0) {
      static_for<8>([&](auto g) {
        constexpr int G = decltype(g)::value;
#pragma GCC unroll 16
        for (size_t c = 0; c < C; ++c) {
          const int8x16_t w = vld1q_s8(reinterpret_cast<const int8_t*>(wp[c] + G * 64));
#pragma GCC unroll 8
          for (size_t r = 0; r < R; ++r) is[r][c] = vdotq_laneq_s32(is[r][c], w, xv[r][G / 4], G % 4);
        }
      });
    } else {
      const uint8x16_t low4 = vdupq_n_u8(0x0f);
      static_for<4>([&](auto ch) {
        constexpr int Ch = decltype(ch)::value;
        constexpr int G0 = 2 * Ch, G1 = 2 * Ch + 1;
#pragma GCC unroll 16
        for (size_t c = 0; c < C; ++c) {
          const uint8x16_t w = vld1q_u8(wp[c] + Ch * 64);
          const int8x16_t lo = vreinterpretq_s8_u8(vandq_u8(w, low4));
          const int8x16_t hi = vreinterpretq_s8_u8(vshrq_n_u8(w, 4));
#pragma GCC unroll 8
          for (size_t r = 0; r < R; ++r) {
            is[r][c] = vdotq_laneq_s32(is[r][c], lo, xv[r][G0 / 4], G0 % 4);
            is[r][c] = vdotq_laneq_s32(is[r][c], hi, xv[r][G1 / 4], G1 % 4);
          }
        }
      });
    }
#else
    static_assert(!Dot, "the dot-product kernels need -march=armv8.2-a+dotprod");
#endif
  } else if constexpr (T == WeightType::Q8_0) {
    // Products of two groups summed in int16 (|q| <= 127 on x, <= 128 on w:
    // 2 * 128 * 127 = 32512 fits), then pairwise into int32: lo holds rows
    // 0, 1 of the vector (two partial sums each), hi rows 2, 3.
    int32x4_t lo[R][C], hi[R][C];
    for (size_t r = 0; r < R; ++r)
      for (size_t c = 0; c < C; ++c) lo[r][c] = hi[r][c] = vdupq_n_s32(0);
    static_for<4>([&](auto h) {
      constexpr int G0 = 2 * decltype(h)::value, G1 = G0 + 1;
      int8x16_t x0[R], x1[R];
#pragma GCC unroll 8
      for (size_t r = 0; r < R; ++r) {
        x0[r] = dup_group<G0 % 4>(xv[r][G0 / 4]);
        x1[r] = dup_group<G1 % 4>(xv[r][G1 / 4]);
      }
#pragma GCC unroll 16
      for (size_t c = 0; c < C; ++c) {
        const int8x16_t w0 = vld1q_s8(reinterpret_cast<const int8_t*>(wp[c] + G0 * 64));
        const int8x16_t w1 = vld1q_s8(reinterpret_cast<const int8_t*>(wp[c] + G1 * 64));
#pragma GCC unroll 8
        for (size_t r = 0; r < R; ++r) {
          int16x8_t pl = vmull_s8(vget_low_s8(w0), vget_low_s8(x0[r]));
          pl = vmlal_s8(pl, vget_low_s8(w1), vget_low_s8(x1[r]));
          int16x8_t ph = vmull_high_s8(w0, x0[r]);
          ph = vmlal_high_s8(ph, w1, x1[r]);
          lo[r][c] = vpadalq_s16(lo[r][c], pl);
          hi[r][c] = vpadalq_s16(hi[r][c], ph);
        }
      }
    });
    for (size_t r = 0; r < R; ++r)
      for (size_t c = 0; c < C; ++c) is[r][c] = vpaddq_s32(lo[r][c], hi[r][c]);
  } else {
    // q4_0: nibbles 0..15 times |x| <= 127 (128 at worst): all 8 products
    // of a lane fit int16 (8 * 15 * 128 = 15360).
    int16x8_t pl[R][C], ph[R][C];
    for (size_t r = 0; r < R; ++r)
      for (size_t c = 0; c < C; ++c) pl[r][c] = ph[r][c] = vdupq_n_s16(0);
    const uint8x16_t low4 = vdupq_n_u8(0x0f);
    static_for<4>([&](auto ch) {
      constexpr int G0 = 2 * decltype(ch)::value, G1 = G0 + 1;
      int8x16_t x0[R], x1[R];
#pragma GCC unroll 8
      for (size_t r = 0; r < R; ++r) {
        x0[r] = dup_group<G0 % 4>(xv[r][G0 / 4]);
        x1[r] = dup_group<G1 % 4>(xv[r][G1 / 4]);
      }
#pragma GCC unroll 16
      for (size_t c = 0; c < C; ++c) {
        const uint8x16_t w = vld1q_u8(wp[c] + decltype(ch)::value * 64);
        const int8x16_t lo = vreinterpretq_s8_u8(vandq_u8(w, low4));
        const int8x16_t hi = vreinterpretq_s8_u8(vshrq_n_u8(w, 4));
#pragma GCC unroll 8
        for (size_t r = 0; r < R; ++r) {
          pl[r][c] = vmlal_s8(pl[r][c], vget_low_s8(lo), vget_low_s8(x0[r]));
          pl[r][c] = vmlal_s8(pl[r][c], vget_low_s8(hi), vget_low_s8(x1[r]));
          ph[r][c] = vmlal_high_s8(ph[r][c], lo, x0[r]);
          ph[r][c] = vmlal_high_s8(ph[r][c], hi, x1[r]);
        }
      }
    });
    for (size_t r = 0; r < R; ++r)
      for (size_t c = 0; c < C; ++c) is[r][c] = vpaddq_s32(vpaddlq_s16(pl[r][c]), vpaddlq_s16(ph[r][c]));
  }
}

struct Geometry {
  size_t Kb;           // blocks per row
  size_t panel_bytes;  // one panel, quants and scales (quant_layout.hpp)
};

// y[m0 .. m0+R) x the columns of NP consecutive panels from panel0, V column
// vectors per panel starting at vector v0 (V = 4: whole panels; V = 2: half).
// Columns n0 .. n0 + ncols of y are written (ncols < NP * 4V only at the end
// of the matrix).
template <bool Dot, WeightType T, size_t R, size_t NP, size_t V>
void tile(const QuantizedRows& x, const uint8_t* panel0, const Geometry& g, size_t v0, size_t m0, const float* bias,
          float* y, size_t N, size_t n0, size_t ncols, Epilogue e) {
  constexpr size_t C = NP * V;
  const size_t Kb = g.Kb, Kp = Kb * kQuantBlock;
  float32x4_t acc[R][C];
  for (size_t r = 0; r < R; ++r)
    for (size_t c = 0; c < C; ++c) acc[r][c] = vdupq_n_f32(0.0f);

  const int8_t* xq[R];
  const float* dx[R];
  const int32_t* sx[R];
  for (size_t r = 0; r < R; ++r) {
    xq[r] = x.q + (m0 + r) * Kp;
    dx[r] = x.scale + (m0 + r) * Kb;
    sx[r] = x.sum + (m0 + r) * Kb;
  }
  const uint8_t* wq[C];  // quants of column vector c, less the block's offset
  const uint8_t* ws[C];  // its 4 f16 scales, less the block's scale offset
  for (size_t p = 0; p < NP; ++p)
    for (size_t v = 0; v < V; ++v) {
      const uint8_t* panel = panel0 + p * g.panel_bytes;
      wq[p * V + v] = panel + (v0 + v) * 16;
      ws[p * V + v] = panel + (v0 + v) * 8;
    }

  for (size_t b = 0; b < Kb; ++b) {
    int8x16_t xv[R][2];
#pragma GCC unroll 8
    for (size_t r = 0; r < R; ++r) {
      xv[r][0] = vld1q_s8(xq[r] + b * kQuantBlock);
      xv[r][1] = vld1q_s8(xq[r] + b * kQuantBlock + 16);
    }
    const uint8_t* wp[C];
    const size_t qoff = quant_block_offset(T, b), soff = quant_scale_offset(T, b);
    for (size_t c = 0; c < C; ++c) wp[c] = wq[c] + qoff;
    int32x4_t is[R][C];
    block_dot<Dot, T, R, C>(xv, wp, is);
    if constexpr (T == WeightType::Q4_0) {
#pragma GCC unroll 8
      for (size_t r = 0; r < R; ++r) {
        const int32x4_t off = vdupq_n_s32(8 * sx[r][b]);
#pragma GCC unroll 16
        for (size_t c = 0; c < C; ++c) is[r][c] = vsubq_s32(is[r][c], off);
      }
    }
    float32x4_t dw[C];
#pragma GCC unroll 16
    for (size_t c = 0; c < C; ++c) {
      uint16_t bits[4];
      std::memcpy(bits, ws[c] + soff, sizeof bits);
      dw[c] = vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(bits)));
    }
#pragma GCC unroll 8
    for (size_t r = 0; r < R; ++r) {
      const float32x4_t d = vdupq_n_f32(dx[r][b]);
#pragma GCC unroll 16
      for (size_t c = 0; c < C; ++c) acc[r][c] = vfmaq_f32(acc[r][c], vcvtq_f32_s32(is[r][c]), vmulq_f32(dw[c], d));
    }
  }

  // Epilogue, in the reference's order (tile_finish.hpp).
  finish<R, C>(acc, y + m0 * N + n0, N, ncols, bias ? bias + n0 : nullptr, e);
}

template <bool Dot>
struct Shape {
  static constexpr size_t kDecodePanels = Dot ? 2 : 1;  // panels per decode tile
  static constexpr size_t kRows = Dot ? 4 : 2;          // rows per prefill tile (half a panel wide)
};

template <bool Dot, WeightType T>
void gemm_panels(const QuantizedRows& x, const uint8_t* wp, const float* bias, float* y, size_t M, size_t K, size_t N,
                 size_t p0, size_t p1, Epilogue e) {
  const size_t Kb = quant_blocks(K);
  const Geometry g{Kb, quant_panel_bytes(T, Kb)};
  auto columns = [&](size_t n0, size_t width) { return N - n0 < width ? N - n0 : width; };
  if (M == 1) {
    constexpr size_t NP = Shape<Dot>::kDecodePanels;
    size_t p = p0;
    for (; p + NP <= p1; p += NP) {
      const size_t n0 = p * kPanelWidth;
      tile<Dot, T, 1, NP, 4>(x, wp + p * g.panel_bytes, g, 0, 0, bias, y, N, n0, columns(n0, NP * kPanelWidth), e);
    }
    for (; p < p1; ++p) {
      const size_t n0 = p * kPanelWidth;
      tile<Dot, T, 1, 1, 4>(x, wp + p * g.panel_bytes, g, 0, 0, bias, y, N, n0, columns(n0, kPanelWidth), e);
    }
    return;
  }
  constexpr size_t R = Shape<Dot>::kRows;
  for (size_t p = p0; p < p1; ++p) {
    const uint8_t* panel = wp + p * g.panel_bytes;
    size_t m = 0;
    for (; m + R <= M; m += R)
      for (size_t v0 = 0; v0 < 4; v0 += 2) {
        const size_t n0 = p * kPanelWidth + v0 * 4;
        if (n0 >= N) break;
        tile<Dot, T, R, 1, 2>(x, panel, g, v0, m, bias, y, N, n0, columns(n0, 8), e);
      }
    for (; m < M; ++m) {
      const size_t n0 = p * kPanelWidth;
      tile<Dot, T, 1, 1, 4>(x, panel, g, 0, m, bias, y, N, n0, columns(n0, kPanelWidth), e);
    }
  }
}

// quantize_block_q8 (core/quant_layout.cpp) for whole rows, vectorized: the
// same max |x|, the same 127 / amax and amax / 127, and FCVTNS (round to
// nearest, ties to even: nearbyint in the default rounding mode) for the
// quants.
void quantize_rows(const float* x, size_t M, size_t K, int8_t* q, float* scale, int32_t* sum) {
  const size_t Kb = quant_blocks(K);
  const float32x4_t finite_max = vdupq_n_f32(std::numeric_limits<float>::max());
  for (size_t m = 0; m < M; ++m)
    for (size_t b = 0; b < Kb; ++b) {
      const size_t k0 = b * kQuantBlock, n = K - k0 < kQuantBlock ? K - k0 : kQuantBlock;
      const float* src = x + m * K + k0;
      float pad[kQuantBlock];
      if (n < kQuantBlock) {
        std::memset(pad, 0, sizeof pad);
        std::memcpy(pad, src, n * sizeof(float));
        src = pad;
      }
      float32x4_t v[8];
      for (int i = 0; i < 8; ++i) v[i] = vld1q_f32(src + 4 * i);
      // Finite: |x| <= FLT_MAX (false for infinities and NaNs).
      float32x4_t amax4 = vabsq_f32(v[0]);
      uint32x4_t finite = vcleq_f32(amax4, finite_max);
      for (int i = 1; i < 8; ++i) {
        const float32x4_t a = vabsq_f32(v[i]);
        finite = vandq_u32(finite, vcleq_f32(a, finite_max));
        amax4 = vmaxq_f32(amax4, a);
      }
      int8_t* dst = q + (m * Kb + b) * kQuantBlock;
      const size_t i_out = m * Kb + b;
      if (vminvq_u32(finite) == 0) {
        std::memset(dst, 0, kQuantBlock);
        sum[i_out] = 0;
        scale[i_out] = std::numeric_limits<float>::quiet_NaN();
        continue;
      }
      const float amax = vmaxvq_f32(amax4);
      if (amax == 0.0f) {
        std::memset(dst, 0, kQuantBlock);
        sum[i_out] = 0;
        scale[i_out] = 0.0f;
        continue;
      }
      const float32x4_t id = vdupq_n_f32(127.0f / amax);
      const int32x4_t lo = vdupq_n_s32(-127), hi = vdupq_n_s32(127);
      int32x4_t qi[8];
      int32x4_t s = vdupq_n_s32(0);
      for (int i = 0; i < 8; ++i) {
        qi[i] = vminq_s32(vmaxq_s32(vcvtnq_s32_f32(vmulq_f32(v[i], id)), lo), hi);
        s = vaddq_s32(s, qi[i]);
      }
      for (int i = 0; i < 2; ++i) {
        const int16x8_t a = vcombine_s16(vmovn_s32(qi[4 * i]), vmovn_s32(qi[4 * i + 1]));
        const int16x8_t c = vcombine_s16(vmovn_s32(qi[4 * i + 2]), vmovn_s32(qi[4 * i + 3]));
        vst1q_s8(dst + 16 * i, vcombine_s8(vmovn_s16(a), vmovn_s16(c)));
      }
      sum[i_out] = vaddvq_s32(s);
      scale[i_out] = amax / 127.0f;
    }
}

template <bool Dot>
const QuantKernels& make_table(const char* name) {
  static const QuantKernels k = quant_kernels<&gemm_panels<Dot, WeightType::Q8_0>, &gemm_panels<Dot, WeightType::Q4_0>>(
      name, &quantize_rows, &scalar_quant_kernels().matmul);
  return k;
}

}  // namespace qneon
}  // namespace
}  // namespace mmgpt::kernels::detail
