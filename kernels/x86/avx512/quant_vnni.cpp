// Block-quantized matmul (q8_0 / q4_0 weights x q8 activations) and the
// activation quantization, for AVX-512 with VNNI. Compiled with the AVX-512
// flags plus -mavx512vnni -mf16c (sources.cmake); set.cpp puts it in the
// AVX-512 set only on CPUs that report AVX512_VNNI (else AVX2's).
//
// Inner product: 64 bytes of a panel are 4 (q8_0) or 8 (q4_0) consecutive k
// of its 16 rows, row j in 32-bit lane j (quant_layout.hpp), so one VPDPBUSD
// against 4 activation bytes broadcast to every lane does 64 multiply-adds.
// VPDPBUSD multiplies UNSIGNED bytes (first operand) by signed ones, so the
// weights are offset to unsigned and the offset removed exactly in int32:
//   q8_0: w XOR 0x80 = w + 128  ->  sum (w + 128) x = isum + 128 * sum_x;
//   q4_0: nibbles are already q + 8 ->  sum (q + 8) x  = isum +   8 * sum_x.
// Each block's int32 accumulator starts at -offset * sum_x (sum_x comes with
// the quantized activations), so after its 8 VPDPBUSD it holds isum exactly
// (|intermediate| <= 32 * 255 * 127 < 2^31).
//
// Float part, per block, exactly the reference's arithmetic (scalar/quant.cpp):
//   acc = fma(float(isum), f16->f32(dw) * dx, acc)
// VCVTDQ2PS is exact (|isum| < 2^24), VCVTPH2PS is exact, the product dw * dx
// is rounded to f32 as in the reference, and there is one FMA per block in
// block order. So without an activation the result is bit for bit the
// reference's, whatever the tile shape, blocking or thread split.
//
// The tile's epilogue (bias, GELU, accumulate): tile_finish.hpp.
#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512VL__) || !defined(__AVX512VNNI__) || \
    !defined(__F16C__) || !defined(__FMA__)
#error \
    "x86/avx512/quant_vnni.cpp must be compiled with -mavx512f -mavx512bw -mavx512dq -mavx512vl -mavx512vnni -mfma -mf16c"
#endif
// GCC 12's AVX-512 intrinsics initialise "undefined" vectors from themselves
// (`__m512i __Y = __Y;`), which -Wmaybe-uninitialized reports once inlined:
// the compiler header's known false positive (as in this folder's kernels.cpp).
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstring>
#include <limits>

#include "kernels/decode_prefetch.hpp"
#include "kernels/kernels.hpp"
#include "kernels/registry.hpp"
#include "kernels/x86/avx512/avx512.hpp"
#include "kernels/x86/avx512/tile_finish.hpp"

namespace mmgpt::kernels::detail {
namespace {

// Prefill microkernel: MR rows x NP panels (32 output columns) per tile:
// 12 int32 block accumulators + 12 f32 accumulators + the weight vectors of a
// k-group stay in the 32 zmm registers.
constexpr size_t MR = 6;
constexpr size_t NP = 2;
// Decode streams one panel at a time: the matrix is then read front to back
// as a single stream (a panel holds its scales beside its quants,
// quant_layout.hpp), each line prefetched kDecodeAheadBytes further on
// (decode_prefetch.hpp): one stream keeps closer to the memory's rate than
// several panels at once (docs/kernels.md, "The panel layout" and "Quantized
// panels with their scales inline").
// Rows of quantized activations kept in L2 while a panel pair sweeps them.
constexpr size_t kActivationL2Budget = 256 * 1024;

// 4 activation bytes as one int32 broadcast to all 16 lanes.
inline __m512i bcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

struct Panels {
  const uint8_t* w;  // first panel of the tile
  size_t stride;     // bytes between panels (a panel is one stream: quants and scales, quant_layout.hpp)
  size_t Kb;
};

// R rows (from row m of x) against P consecutive panels, all K; Q4 selects q4_0.
template <bool Q4, size_t R, size_t P>
[[gnu::always_inline]] inline void tile(const QuantizedRows& x, size_t m, const Panels& pn, const Out& o) {
  constexpr WeightType T = Q4 ? WeightType::Q4_0 : WeightType::Q8_0;
  constexpr int32_t kOffset = Q4 ? 8 : 128;
  const size_t Kb = pn.Kb, Kp = Kb * kQuantBlock;
  const __m512i nib = _mm512_set1_epi8(0x0F), flip = _mm512_set1_epi8(static_cast<char>(0x80));

  __m512 acc[R][P];
#pragma GCC unroll 8
  for (size_t i = 0; i < R; ++i)
#pragma GCC unroll 4
    for (size_t j = 0; j < P; ++j) acc[i][j] = _mm512_setzero_ps();

  for (size_t b = 0; b < Kb; ++b) {
    __m512i isum[R][P];
#pragma GCC unroll 8
    for (size_t i = 0; i < R; ++i) {
      const __m512i init = _mm512_set1_epi32(-kOffset * x.sum[(m + i) * Kb + b]);
#pragma GCC unroll 4
      for (size_t j = 0; j < P; ++j) isum[i][j] = init;
    }
    const size_t soff = quant_scale_offset(T, b);
    const uint8_t* wb = pn.w + quant_block_offset(T, b);
    if constexpr (Q4) {
      // Chunk c: low nibbles are k 8c .. 8c+3, high nibbles k 8c+4 .. 8c+7.
#pragma GCC unroll 4
      for (size_t c = 0; c < 4; ++c) {
        __m512i lo[P], hi[P];
#pragma GCC unroll 4
        for (size_t j = 0; j < P; ++j) {
          const uint8_t* src = wb + j * pn.stride + c * 64;
          const __m512i v = _mm512_loadu_si512(src);
          lo[j] = _mm512_and_si512(v, nib);
          hi[j] = _mm512_and_si512(_mm512_srli_epi16(v, 4), nib);
        }
#pragma GCC unroll 8
        for (size_t i = 0; i < R; ++i) {
          const int8_t* xq = x.q + (m + i) * Kp + b * kQuantBlock + c * 8;
          const __m512i xlo = bcast4(xq), xhi = bcast4(xq + 4);
#pragma GCC unroll 4
          for (size_t j = 0; j < P; ++j) {
            isum[i][j] = _mm512_dpbusd_epi32(isum[i][j], lo[j], xlo);
            isum[i][j] = _mm512_dpbusd_epi32(isum[i][j], hi[j], xhi);
          }
        }
      }
    } else {
      // Group g: k 4g .. 4g+3.
#pragma GCC unroll 8
      for (size_t g = 0; g < 8; ++g) {
        __m512i wv[P];
#pragma GCC unroll 4
        for (size_t j = 0; j < P; ++j) {
          const uint8_t* src = wb + j * pn.stride + g * 64;
          wv[j] = _mm512_xor_si512(_mm512_loadu_si512(src), flip);
        }
#pragma GCC unroll 8
        for (size_t i = 0; i < R; ++i) {
          const __m512i xb = bcast4(x.q + (m + i) * Kp + b * kQuantBlock + g * 4);
#pragma GCC unroll 4
          for (size_t j = 0; j < P; ++j) isum[i][j] = _mm512_dpbusd_epi32(isum[i][j], wv[j], xb);
        }
      }
    }
    // acc = fma(float(isum), dw * dx, acc), as the reference.
#pragma GCC unroll 4
    for (size_t j = 0; j < P; ++j) {
      const __m512 dw =
          _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(pn.w + j * pn.stride + soff)));
#pragma GCC unroll 8
      for (size_t i = 0; i < R; ++i) {
        const __m512 d = _mm512_mul_ps(dw, _mm512_set1_ps(x.scale[(m + i) * Kb + b]));
        acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[i][j]), d, acc[i][j]);
      }
    }
  }
  finish<R, P>(acc, o);
}

// VPDPBUSD with 4 bytes of x broadcast from memory to every lane as its
// signed operand ({1to16}): one instruction where the intrinsics give two
// (GCC 12 does not fold _mm512_set1_epi32 of a load into VPDPBUSD).
typedef int32_t int32_may_alias __attribute__((may_alias));
[[gnu::always_inline]] inline __m512i dpbusd_x4(__m512i acc, __m512i w, const int8_t* x4) {
  __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*reinterpret_cast<const int32_may_alias*>(x4)));
  return acc;
}

// Decode and small batches (M <= MR): the R rows of x against one panel, all K,
// the panel's lines read in memory order and each prefetched
// kDecodeAheadBytes ahead under the decode hint (past the panel's end that is
// the next panel, which is read next), so the matrix is one stream. q4_0
// takes its high nibbles as 16 * (q + 8) by a mask, into an accumulator of
// their own that is shifted down by 4 at the end of the block (exact: a sum
// of multiples of 16), one instruction a line fewer than shift and mask. The
// integer sums are the same, so the result is tile<Q4, R, 1>'s bit for bit.
// With more than one row x's bytes are broadcast inside VPDPBUSD
// (dpbusd_x4), an instruction fewer a row and line where the rows multiply
// the arithmetic; one row keeps the broadcasts in registers, the faster with
// a prefetch per line (docs/kernels.md, "Decode: prefetching ahead, and the
// hint per CPU", and "Small batches stream like decode").
template <bool Q4, size_t R, DecodePrefetch H>
[[gnu::always_inline]] inline void decode_tile(const QuantizedRows& x, const uint8_t* panel, size_t Kb, const Out& o) {
  constexpr WeightType T = Q4 ? WeightType::Q4_0 : WeightType::Q8_0;
  constexpr int32_t kOffset = Q4 ? 8 : 128;
  const size_t Kp = Kb * kQuantBlock;
  const __m512i lo_mask = _mm512_set1_epi8(0x0F), hi_mask = _mm512_set1_epi8(static_cast<char>(0xF0));
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  auto line = [&](size_t at) __attribute__((always_inline)) {
    prefetch_decode<H>(panel, at);
    return _mm512_loadu_si512(panel + at);
  };

  __m512 acc[R][1];
#pragma GCC unroll 8
  for (size_t i = 0; i < R; ++i) acc[i][0] = _mm512_setzero_ps();
  for (size_t b = 0; b < Kb; ++b) {
    const size_t qoff = quant_block_offset(T, b), soff = quant_scale_offset(T, b);
    __m512i lo[R], hi[R];
#pragma GCC unroll 8
    for (size_t i = 0; i < R; ++i) {
      lo[i] = _mm512_set1_epi32(-kOffset * x.sum[i * Kb + b]);
      hi[i] = _mm512_setzero_si512();
    }
    if constexpr (Q4) {
#pragma GCC unroll 4
      for (size_t c = 0; c < 4; ++c) {
        const __m512i v = line(qoff + c * 64);
        const __m512i vlo = _mm512_and_si512(v, lo_mask), vhi = _mm512_and_si512(v, hi_mask);
#pragma GCC unroll 8
        for (size_t i = 0; i < R; ++i) {
          const int8_t* xq = x.q + i * Kp + b * kQuantBlock + c * 8;
          if constexpr (R == 1) {
            lo[i] = _mm512_dpbusd_epi32(lo[i], vlo, bcast4(xq));
            hi[i] = _mm512_dpbusd_epi32(hi[i], vhi, bcast4(xq + 4));
          } else {
            lo[i] = dpbusd_x4(lo[i], vlo, xq);
            hi[i] = dpbusd_x4(hi[i], vhi, xq + 4);
          }
        }
      }
    } else {
#pragma GCC unroll 8
      for (size_t g = 0; g < 8; ++g) {
        const __m512i w = _mm512_xor_si512(line(qoff + g * 64), flip);
#pragma GCC unroll 8
        for (size_t i = 0; i < R; ++i) {
          const int8_t* xq = x.q + i * Kp + b * kQuantBlock + g * 4;
          lo[i] = R == 1 ? _mm512_dpbusd_epi32(lo[i], w, bcast4(xq)) : dpbusd_x4(lo[i], w, xq);
        }
      }
    }
    if (b % 2 == 0) prefetch_decode<H>(panel, soff);  // the unit's line of scales is in the stream too
    // acc = fma(float(isum), dw * dx, acc), as the reference.
    const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(panel + soff)));
#pragma GCC unroll 8
    for (size_t i = 0; i < R; ++i) {
      const __m512i isum = Q4 ? _mm512_add_epi32(lo[i], _mm512_srai_epi32(hi[i], 4)) : lo[i];
      acc[i][0] =
          _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(dw, _mm512_set1_ps(x.scale[i * Kb + b])), acc[i][0]);
    }
  }
  finish<R, 1>(acc, o);
}

template <bool Q4, size_t P>
void tile_rows(size_t rows, const QuantizedRows& x, size_t m, const Panels& pn, const Out& o) {
  static_assert(MR == 6, "the cases below cover rows 1 .. 6");
  switch (rows) {
    case 6: tile<Q4, 6, P>(x, m, pn, o); break;
    case 5: tile<Q4, 5, P>(x, m, pn, o); break;
    case 4: tile<Q4, 4, P>(x, m, pn, o); break;
    case 3: tile<Q4, 3, P>(x, m, pn, o); break;
    case 2: tile<Q4, 2, P>(x, m, pn, o); break;
    case 1: tile<Q4, 1, P>(x, m, pn, o); break;
    default: break;
  }
}

template <bool Q4, DecodePrefetch H>
void decode_rows(size_t rows, const QuantizedRows& x, const uint8_t* panel, size_t Kb, const Out& o) {
  static_assert(MR == 6, "the cases below cover rows 1 .. 6");
  switch (rows) {
    case 6: decode_tile<Q4, 6, H>(x, panel, Kb, o); break;
    case 5: decode_tile<Q4, 5, H>(x, panel, Kb, o); break;
    case 4: decode_tile<Q4, 4, H>(x, panel, Kb, o); break;
    case 3: decode_tile<Q4, 3, H>(x, panel, Kb, o); break;
    case 2: decode_tile<Q4, 2, H>(x, panel, Kb, o); break;
    case 1: decode_tile<Q4, 1, H>(x, panel, Kb, o); break;
    default: break;
  }
}

template <bool Q4>
void gemm_panels(const QuantizedRows& x, const uint8_t* wp, const float* bias, float* y, size_t M, size_t K, size_t N,
                 size_t p0, size_t p1, Epilogue e) {
  if (M == 0 || p0 >= p1) return;
  const WeightType t = Q4 ? WeightType::Q4_0 : WeightType::Q8_0;
  const size_t Kb = quant_blocks(K);
  const size_t stride = quant_panel_bytes(t, Kb);
  auto panels = [&](size_t p) { return Panels{wp + p * stride, stride, Kb}; };
  auto out = [&](size_t m, size_t p, size_t np) {
    const size_t col = p * kPanelWidth, left = N - col;
    return Out{y + m * N + col, N, left < np * kPanelWidth ? left : np * kPanelWidth, bias ? bias + col : nullptr, e};
  };

  // Decode and small batches: a single row tile reads the weights once,
  // panel by panel in memory order under the decode hint.
  if (M <= MR) {
    with_decode_hint([&](auto hint) {
      constexpr DecodePrefetch H = decltype(hint)::value;
      for (size_t p = p0; p < p1; ++p) decode_rows<Q4, H>(M, x, wp + p * stride, Kb, out(0, p, 1));
    });
    return;
  }

  // Prefill: row blocks of quantized activations that fit L2; within one,
  // each panel pair (L1/L2-resident) sweeps all its rows in MR-row tiles.
  const size_t Kp = Kb * kQuantBlock;
  size_t mc = kActivationL2Budget / (Kp ? Kp : 1) / MR * MR;
  if (mc < MR) mc = MR;
  for (size_t mc0 = 0; mc0 < M; mc0 += mc) {
    const size_t mc1 = M - mc0 < mc ? M : mc0 + mc;
    for (size_t p = p0; p < p1;) {
      const size_t np = p + NP <= p1 ? NP : 1;
      for (size_t m = mc0; m < mc1;) {
        const size_t rows = mc1 - m < MR ? mc1 - m : MR;
        if (np == NP)
          tile_rows<Q4, NP>(rows, x, m, panels(p), out(m, p, NP));
        else
          tile_rows<Q4, 1>(rows, x, m, panels(p), out(m, p, 1));
        m += rows;
      }
      p += np;
    }
  }
}

void gemm_panels_q8_0(const QuantizedRows& x, const uint8_t* wp, const float* bias, float* y, size_t M, size_t K,
                      size_t N, size_t p0, size_t p1, Epilogue e) {
  gemm_panels<false>(x, wp, bias, y, M, K, N, p0, p1, e);
}

void gemm_panels_q4_0(const QuantizedRows& x, const uint8_t* wp, const float* bias, float* y, size_t M, size_t K,
                      size_t N, size_t p0, size_t p1, Epilogue e) {
  gemm_panels<true>(x, wp, bias, y, M, K, N, p0, p1, e);
}

// quantize_block_q8 (core/quant_layout.cpp), 32 values in two zmm:
// amax = max |x| and a non-finite check (|x| >= inf or unordered), then
// q = cvtps2dq(x * (127 / amax)) (round to nearest even in the default MXCSR,
// as nearbyint), clamped to [-127, 127] as the reference does (a no-op for
// finite amax, kept so the two cannot differ), narrowed to bytes.
void quantize_rows(const float* x, size_t M, size_t K, int8_t* q, float* scale, int32_t* sum) {
  const size_t Kb = quant_blocks(K);
  const __m512 inf = _mm512_set1_ps(std::numeric_limits<float>::infinity());
  const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
  for (size_t m = 0; m < M; ++m)
    for (size_t b = 0; b < Kb; ++b) {
      const float* src = x + m * K + b * kQuantBlock;
      const size_t n = K - b * kQuantBlock < kQuantBlock ? K - b * kQuantBlock : kQuantBlock;
      // Lanes past K load as zero: they change neither amax nor finiteness, and quantize to 0.
      const __mmask16 m0 = n >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << n) - 1);
      const __mmask16 m1 = n >= 32 ? 0xFFFF : n > 16 ? static_cast<__mmask16>((1u << (n - 16)) - 1) : 0;
      const __m512 x0 = _mm512_maskz_loadu_ps(m0, src), x1 = _mm512_maskz_loadu_ps(m1, src + 16);
      const __m512 a0 = _mm512_abs_ps(x0), a1 = _mm512_abs_ps(x1);
      int8_t* qb = q + (m * Kb + b) * kQuantBlock;
      float& d = scale[m * Kb + b];
      int32_t& s = sum[m * Kb + b];
      const __mmask16 bad = _mm512_cmp_ps_mask(a0, inf, _CMP_NLT_UQ) | _mm512_cmp_ps_mask(a1, inf, _CMP_NLT_UQ);
      const float amax = _mm512_reduce_max_ps(_mm512_max_ps(a0, a1));
      if (bad || amax == 0.0f) {
        std::memset(qb, 0, kQuantBlock);
        s = 0;
        d = bad ? std::numeric_limits<float>::quiet_NaN() : 0.0f;
        continue;
      }
      const __m512 id = _mm512_set1_ps(127.0f / amax);
      const __m512i q0 = _mm512_min_epi32(_mm512_max_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(x0, id)), lo), hi);
      const __m512i q1 = _mm512_min_epi32(_mm512_max_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(x1, id)), lo), hi);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(qb), _mm512_cvtepi32_epi8(q0));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(qb + 16), _mm512_cvtepi32_epi8(q1));
      s = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
      d = amax / 127.0f;
    }
}

}  // namespace

const QuantKernels& avx512vnni_quant_kernels() {
  static const QuantKernels k =
      quant_kernels<&gemm_panels_q8_0, &gemm_panels_q4_0>("avx512vnni", &quantize_rows, &scalar_quant_kernels().matmul);
  return k;
}

}  // namespace mmgpt::kernels::detail
