// Block-quantized matmul (q8_0 / q4_0 weights x q8 activations) and the
// activation quantization for AVX2 without VNNI. Compiled with -mavx2 -mfma
// -mf16c (sources.cmake); set.cpp uses it on CPUs that run AVX2, and the
// AVX-512 set.cpp on AVX-512 CPUs without VNNI.
//
// A 64-byte k-group of a panel (quant_layout.hpp) is two ymm: rows 0..7 and
// rows 8..15, each row's 4 consecutive k in its 32-bit lane. Against 4
// activation bytes broadcast to every lane (xb):
//   q8_0: VPMADDUBSW needs an unsigned operand: |x| = sign(xb, xb) and
//         sign(w, xb) (w negated where x < 0, zeroed where x == 0) give
//         pairs |x| * (+-w) = x * w, summed in int16 without saturation
//         (both within [-127, 127]: |pair| <= 2 * 127 * 127 < 2^15), then
//         VPMADDWD with ones sums the pairs to the int32 lane.
//   q4_0: the nibbles (q + 8, 0..15) are unsigned already: VPMADDUBSW(nib, xb)
//         pairs are at most 2 * 15 * 127 = 3810, so all 8 of a block add up
//         in int16 (<= 30480 < 2^15) and one VPMADDWD per block widens them;
//         the block accumulator starts at -8 * sum_x, so it ends at isum.
// Float part per block, as the reference (scalar/quant.cpp):
//   acc = fma(float(isum), f16->f32(dw) * dx, acc)
// (exact int->float, exact f16->f32, dw * dx rounded to f32, one FMA per
// block in order), so without activation the output is bit for bit the
// reference's. GELU: quant_gelu (registry.hpp) on the finished tile.
#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__)
#error "x86/avx2/quant.cpp must be compiled with -mavx2 -mfma -mf16c"
#endif
#include <immintrin.h>

#include <cstring>
#include <limits>

#include "kernels/decode_prefetch.hpp"
#include "kernels/kernels.hpp"
#include "kernels/registry.hpp"
#include "kernels/x86/avx2/avx2.hpp"

namespace mmgpt::kernels::detail {
namespace {

// Prefill microkernel: MR rows x 1 panel (2 ymm per row): 6 int32 + 6 f32
// accumulators, 2 weight vectors and the constants fill the 16 ymm registers.
constexpr size_t MR = 3;
// Decode streams one panel at a time, so the matrix is read front to back as
// one stream (a panel holds its scales beside its quants, quant_layout.hpp),
// each line prefetched kDecodeAheadBytes ahead (decode_prefetch.hpp): one
// stream keeps closer to the memory's rate than two panels at once
// (docs/kernels.md, "The panel layout"). Prefill with a single row tile
// (M <= MR) reads the weights once: prefetched kPrefetchQuant ahead within
// each panel.
constexpr size_t kPrefetchQuant = 2048;
constexpr size_t kActivationL2Budget = 256 * 1024;

inline __m256i bcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

struct Out {
  float* y;           // row m, first column of the tile
  size_t ldy;         // N
  size_t ncols;       // valid columns (< 16 * panels only at the matrix edge)
  const float* bias;  // at the tile's first column, or null
  Epilogue e;
};

// v = acc + bias; v = gelu(v); y = accumulate ? y + v : v. Full tiles in
// registers; a partial one (matrix edge) the same float operations per element.
template <size_t R, size_t V>
[[gnu::always_inline]] inline void finish(__m256 (&acc)[R][V], const Out& o) {
  constexpr size_t C = V * 8;
  if (o.ncols == C && o.e.act == Activation::None) {
#pragma GCC unroll 8
    for (size_t i = 0; i < R; ++i)
#pragma GCC unroll 8
      for (size_t v = 0; v < V; ++v) {
        float* dst = o.y + i * o.ldy + v * 8;
        __m256 r = acc[i][v];
        if (o.bias) r = _mm256_add_ps(r, _mm256_loadu_ps(o.bias + v * 8));
        if (o.e.accumulate) r = _mm256_add_ps(_mm256_loadu_ps(dst), r);
        _mm256_storeu_ps(dst, r);
      }
    return;
  }
  alignas(32) float buf[R * C];
  for (size_t i = 0; i < R; ++i)
    for (size_t v = 0; v < V; ++v) _mm256_store_ps(buf + i * C + v * 8, acc[i][v]);
  for (size_t i = 0; i < R; ++i) {
    float* row = buf + i * C;
    if (o.bias)
      for (size_t c = 0; c < o.ncols; ++c) row[c] = row[c] + o.bias[c];
    quant_gelu(o.e.act, row, o.ncols);
    float* dst = o.y + i * o.ldy;
    for (size_t c = 0; c < o.ncols; ++c) dst[c] = o.e.accumulate ? dst[c] + row[c] : row[c];
  }
}

struct Panels {
  const uint8_t* w;  // first panel of the tile
  size_t stride;     // bytes between panels (a panel is one stream: quants and scales, quant_layout.hpp)
  size_t Kb;
};

template <bool Q4, size_t R, size_t P, Ahead Prefetch, DecodePrefetch H = DecodePrefetch::Nta>
[[gnu::always_inline]] inline void tile(const QuantizedRows& x, size_t m, const Panels& pn, const Out& o) {
  constexpr size_t V = 2 * P;  // ymm per row
  constexpr WeightType T = Q4 ? WeightType::Q4_0 : WeightType::Q8_0;
  const size_t Kb = pn.Kb, Kp = Kb * kQuantBlock;
  const __m256i ones = _mm256_set1_epi16(1), nib = _mm256_set1_epi8(0x0F);
  // Prefetches for the line of panel j at byte `at` of the panel.
  auto prefetch_line = [&](size_t j, size_t at) __attribute__((always_inline)) {
    const uint8_t* panel = pn.w + j * pn.stride;
    if constexpr (Prefetch == Ahead::InPanel)
      _mm_prefetch(reinterpret_cast<const char*>(panel + at) + kPrefetchQuant, _MM_HINT_T0);
    if constexpr (Prefetch == Ahead::Decode) prefetch_decode<H>(panel, at);
  };

  __m256 acc[R][V];
#pragma GCC unroll 8
  for (size_t i = 0; i < R; ++i)
#pragma GCC unroll 8
    for (size_t v = 0; v < V; ++v) acc[i][v] = _mm256_setzero_ps();

  for (size_t b = 0; b < Kb; ++b) {
    __m256i isum[R][V];
    const size_t qoff = quant_block_offset(T, b), soff = quant_scale_offset(T, b);
    const uint8_t* wb = pn.w + qoff;
    if (b % 2 == 0)  // the line of scales of this unit is part of the stream too
#pragma GCC unroll 4
      for (size_t j = 0; j < P; ++j) prefetch_line(j, soff);
    if constexpr (Q4) {
      __m256i s16[R][V];
#pragma GCC unroll 8
      for (size_t i = 0; i < R; ++i)
#pragma GCC unroll 8
        for (size_t v = 0; v < V; ++v) s16[i][v] = _mm256_setzero_si256();
#pragma GCC unroll 4
      for (size_t c = 0; c < 4; ++c) {
        __m256i lo[V], hi[V];
#pragma GCC unroll 8
        for (size_t v = 0; v < V; ++v) {
          const uint8_t* src = wb + (v / 2) * pn.stride + c * 64 + (v % 2) * 32;
          if (v % 2 == 0) prefetch_line(v / 2, qoff + c * 64);
          const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src));
          lo[v] = _mm256_and_si256(w, nib);
          hi[v] = _mm256_and_si256(_mm256_srli_epi16(w, 4), nib);
        }
#pragma GCC unroll 8
        for (size_t i = 0; i < R; ++i) {
          const int8_t* xq = x.q + (m + i) * Kp + b * kQuantBlock + c * 8;
          const __m256i xlo = bcast4(xq), xhi = bcast4(xq + 4);
#pragma GCC unroll 8
          for (size_t v = 0; v < V; ++v)
            s16[i][v] = _mm256_add_epi16(
                s16[i][v], _mm256_add_epi16(_mm256_maddubs_epi16(lo[v], xlo), _mm256_maddubs_epi16(hi[v], xhi)));
        }
      }
#pragma GCC unroll 8
      for (size_t i = 0; i < R; ++i) {
        const __m256i init = _mm256_set1_epi32(-8 * x.sum[(m + i) * Kb + b]);
#pragma GCC unroll 8
        for (size_t v = 0; v < V; ++v) isum[i][v] = _mm256_add_epi32(init, _mm256_madd_epi16(s16[i][v], ones));
      }
    } else {
#pragma GCC unroll 8
      for (size_t i = 0; i < R; ++i)
#pragma GCC unroll 8
        for (size_t v = 0; v < V; ++v) isum[i][v] = _mm256_setzero_si256();
#pragma GCC unroll 8
      for (size_t g = 0; g < 8; ++g) {
        __m256i w[V];
#pragma GCC unroll 8
        for (size_t v = 0; v < V; ++v) {
          const uint8_t* src = wb + (v / 2) * pn.stride + g * 64 + (v % 2) * 32;
          if (v % 2 == 0) prefetch_line(v / 2, qoff + g * 64);
          w[v] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src));
        }
#pragma GCC unroll 8
        for (size_t i = 0; i < R; ++i) {
          const __m256i xb = bcast4(x.q + (m + i) * Kp + b * kQuantBlock + g * 4);
          const __m256i xa = _mm256_sign_epi8(xb, xb);
#pragma GCC unroll 8
          for (size_t v = 0; v < V; ++v) {
            const __m256i pr = _mm256_maddubs_epi16(xa, _mm256_sign_epi8(w[v], xb));
            isum[i][v] = _mm256_add_epi32(isum[i][v], _mm256_madd_epi16(pr, ones));
          }
        }
      }
    }
#pragma GCC unroll 8
    for (size_t v = 0; v < V; ++v) {
      const __m256 dw = _mm256_cvtph_ps(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(pn.w + (v / 2) * pn.stride + soff + (v % 2) * 16)));
#pragma GCC unroll 8
      for (size_t i = 0; i < R; ++i) {
        const __m256 d = _mm256_mul_ps(dw, _mm256_set1_ps(x.scale[(m + i) * Kb + b]));
        acc[i][v] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[i][v]), d, acc[i][v]);
      }
    }
  }
  finish<R, V>(acc, o);
}

// q4_0 decode: one row of x against one panel, all K, with tile<true, 1, 1,
// Ahead::Decode>'s arithmetic in its order (so its result bit for bit), but
// walked one unit (two blocks and their line of scales) a step at constant
// offsets from a pointer instead of computing both offsets every block: fewer
// instructions a block, so the out-of-order window runs further ahead of the
// arithmetic. It is the faster under every prefetch hint; q8_0 walked so is
// slower, so it decodes with the tile (docs/kernels.md, "Decode: prefetching
// ahead, and the hint per CPU", and "Tried and not kept").
template <DecodePrefetch H>
[[gnu::always_inline]] inline void decode_tile_q4(const QuantizedRows& x, const uint8_t* panel, size_t Kb,
                                                  const Out& o) {
  constexpr size_t kBlock = 256, kUnit = 2 * kBlock + 64;  // quant_layout.hpp
  const __m256i ones = _mm256_set1_epi16(1), nib = _mm256_set1_epi8(0x0F);
  __m256 acc[1][2] = {{_mm256_setzero_ps(), _mm256_setzero_ps()}};
  auto block = [&](const uint8_t* q, const uint8_t* scales, size_t b) __attribute__((always_inline)) {
    const int8_t* xq = x.q + b * kQuantBlock;
    __m256i s16[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
#pragma GCC unroll 4
    for (size_t c = 0; c < 4; ++c) {
      prefetch_decode<H>(q, c * 64);
      const __m256i xlo = bcast4(xq + c * 8), xhi = bcast4(xq + c * 8 + 4);
#pragma GCC unroll 2
      for (size_t v = 0; v < 2; ++v) {
        const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + c * 64 + v * 32));
        const __m256i lo = _mm256_and_si256(w, nib), hi = _mm256_and_si256(_mm256_srli_epi16(w, 4), nib);
        s16[v] =
            _mm256_add_epi16(s16[v], _mm256_add_epi16(_mm256_maddubs_epi16(lo, xlo), _mm256_maddubs_epi16(hi, xhi)));
      }
    }
    const __m256i init = _mm256_set1_epi32(-8 * x.sum[b]);
#pragma GCC unroll 2
    for (size_t v = 0; v < 2; ++v) {
      const __m256i isum = _mm256_add_epi32(init, _mm256_madd_epi16(s16[v], ones));
      const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales + v * 16)));
      const __m256 d = _mm256_mul_ps(dw, _mm256_set1_ps(x.scale[b]));
      acc[0][v] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), d, acc[0][v]);
    }
  };
  const uint8_t* unit = panel;
  size_t b = 0;
  for (; b + 2 <= Kb; b += 2, unit += kUnit) {
    prefetch_decode<H>(unit, 2 * kBlock);  // the unit's line of scales is in the stream too
    block(unit, unit + 2 * kBlock, b);
    block(unit + kBlock, unit + 2 * kBlock + 32, b + 1);
  }
  if (b < Kb) {  // an odd block count: the last unit's first half
    prefetch_decode<H>(unit, 2 * kBlock);
    block(unit, unit + 2 * kBlock, b);
  }
  finish<1, 2>(acc, o);
}

template <bool Q4, Ahead Prefetch>
void tile_rows(size_t rows, const QuantizedRows& x, size_t m, const Panels& pn, const Out& o) {
  static_assert(MR == 3, "the cases below cover rows 1 .. 3");
  switch (rows) {
    case 3: tile<Q4, 3, 1, Prefetch>(x, m, pn, o); break;
    case 2: tile<Q4, 2, 1, Prefetch>(x, m, pn, o); break;
    case 1: tile<Q4, 1, 1, Prefetch>(x, m, pn, o); break;
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

  if (M == 1) {  // decode: memory-bound, one prefetched stream
    with_decode_hint([&](auto hint) {
      constexpr DecodePrefetch H = decltype(hint)::value;
      for (size_t p = p0; p < p1; ++p) {
        if constexpr (Q4)
          decode_tile_q4<H>(x, wp + p * stride, Kb, out(0, p, 1));
        else
          tile<Q4, 1, 1, Ahead::Decode, H>(x, 0, panels(p), out(0, p, 1));
      }
    });
    return;
  }

  // Prefill: L2-sized row blocks of activations; each panel sweeps them.
  const size_t Kp = Kb * kQuantBlock;
  size_t mc = kActivationL2Budget / (Kp ? Kp : 1) / MR * MR;
  if (mc < MR) mc = MR;
  const bool stream = M <= MR;
  for (size_t mc0 = 0; mc0 < M; mc0 += mc) {
    const size_t mc1 = M - mc0 < mc ? M : mc0 + mc;
    for (size_t p = p0; p < p1; ++p)
      for (size_t m = mc0; m < mc1;) {
        const size_t rows = mc1 - m < MR ? mc1 - m : MR;
        if (stream)
          tile_rows<Q4, Ahead::InPanel>(rows, x, m, panels(p), out(m, p, 1));
        else
          tile_rows<Q4, Ahead::None>(rows, x, m, panels(p), out(m, p, 1));
        m += rows;
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

inline float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
  return _mm_cvtss_f32(m);
}

inline int32_t hsum(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

// quantize_block_q8 (core/quant_layout.cpp) on four ymm: max |x| and the
// non-finite check (|x| >= inf or unordered), q = cvtps2dq(x * (127 / amax))
// (nearest even, as nearbyint), clamped to [-127, 127] as the reference,
// packed to bytes (the in-lane packs reordered by one dword permute).
void quantize_rows(const float* x, size_t M, size_t K, int8_t* q, float* scale, int32_t* sum) {
  const size_t Kb = quant_blocks(K);
  const __m256 inf = _mm256_set1_ps(std::numeric_limits<float>::infinity());
  const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256i lo = _mm256_set1_epi32(-127), hi = _mm256_set1_epi32(127);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  alignas(32) float pad[kQuantBlock];
  for (size_t m = 0; m < M; ++m)
    for (size_t b = 0; b < Kb; ++b) {
      const float* src = x + m * K + b * kQuantBlock;
      const size_t n = K - b * kQuantBlock < kQuantBlock ? K - b * kQuantBlock : kQuantBlock;
      if (n < kQuantBlock) {  // the last block of a row: zeros past K (no effect on amax, quantize to 0)
        for (size_t i = 0; i < kQuantBlock; ++i) pad[i] = i < n ? src[i] : 0.0f;
        src = pad;
      }
      __m256 xv[4], mx = _mm256_setzero_ps();
      int bad = 0;
      for (size_t v = 0; v < 4; ++v) {
        xv[v] = _mm256_loadu_ps(src + 8 * v);
        const __m256 a = _mm256_and_ps(xv[v], absmask);
        bad |= _mm256_movemask_ps(_mm256_cmp_ps(a, inf, _CMP_NLT_UQ));
        mx = _mm256_max_ps(mx, a);
      }
      int8_t* qb = q + (m * Kb + b) * kQuantBlock;
      float& d = scale[m * Kb + b];
      int32_t& s = sum[m * Kb + b];
      const float amax = hmax(mx);
      if (bad || amax == 0.0f) {
        std::memset(qb, 0, kQuantBlock);
        s = 0;
        d = bad ? std::numeric_limits<float>::quiet_NaN() : 0.0f;
        continue;
      }
      const __m256 id = _mm256_set1_ps(127.0f / amax);
      __m256i qi[4];
      for (size_t v = 0; v < 4; ++v)
        qi[v] = _mm256_min_epi32(_mm256_max_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(xv[v], id)), lo), hi);
      const __m256i w01 = _mm256_packs_epi32(qi[0], qi[1]), w23 = _mm256_packs_epi32(qi[2], qi[3]);
      const __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(w01, w23), order);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(qb), bytes);
      s = hsum(_mm256_add_epi32(_mm256_add_epi32(qi[0], qi[1]), _mm256_add_epi32(qi[2], qi[3])));
      d = amax / 127.0f;
    }
}

}  // namespace

const QuantKernels& avx2_quant_kernels() {
  static const QuantKernels k =
      quant_kernels<&gemm_panels_q8_0, &gemm_panels_q4_0>("avx2", &quantize_rows, &scalar_quant_kernels().matmul);
  return k;
}

}  // namespace mmgpt::kernels::detail
