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
//         the block's int32 sum, less 8 * sum_x, is its isum.
// The tiles, their blockings and the float part: simd/quant_tile.hpp.
#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__)
#error "x86/avx2/quant.cpp must be compiled with -mavx2 -mfma -mf16c"
#endif
#include <immintrin.h>

#include <cstring>
#include <limits>

#include "kernels/kernels.hpp"
#include "kernels/registry.hpp"
#include "kernels/simd/quant_tile.hpp"
#include "kernels/x86/avx2/avx2.hpp"

namespace mmgpt::kernels::detail {
namespace {

// The operations quant_tile.hpp's matmul is written over. A panel line is
// two ymm (rows 0..7 and 8..15); MR rows x 1 panel in a prefill tile: 6 int32
// + 6 f32 accumulators, 2 weight vectors and the constants fill the 16 ymm.
struct Ops {
  using F = __m256;
  static constexpr size_t kLanes = 8, kVectorsPerPanel = 2, kMR = 3, kNP = 1;
  // Decode prefetches a unit's scales after its first block's quants for q4_0,
  // before them for q8_0 (docs/kernels.md, "The scales' line").
  template <bool Q4>
  static constexpr bool kPrefetchScalesLast = Q4;

  struct Nibbles {
    __m256i lo, hi;
  };
  struct X8 {  // q8_0: 4 bytes of x in every lane, and their absolute values
    __m256i x, ax;
  };
  struct X4 {  // q4_0: the 4 bytes of the low nibbles' k, and of the high ones'
    __m256i lo, hi;
  };
  struct Q4Acc {  // the 8 nibble products of a block, summed in int16
    __m256i s16;
  };

  static __m256i bcast4(const int8_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
  }

  template <bool Q4, size_t V>
  [[gnu::always_inline]] static auto load(const uint8_t* p) {
    const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    if constexpr (Q4) {
      const __m256i nib = _mm256_set1_epi8(0x0F);
      return Nibbles{_mm256_and_si256(w, nib), _mm256_and_si256(_mm256_srli_epi16(w, 4), nib)};
    } else {
      return w;
    }
  }
  template <bool Q4, size_t V, size_t R>
  [[gnu::always_inline]] static auto bcast(const int8_t* xq) {
    if constexpr (Q4) {
      return X4{bcast4(xq), bcast4(xq + 4)};
    } else {
      const __m256i x = bcast4(xq);
      return X8{x, _mm256_sign_epi8(x, x)};
    }
  }
  template <bool Q4, size_t V>
  [[gnu::always_inline]] static auto begin(int32_t) {
    if constexpr (Q4)
      return Q4Acc{_mm256_setzero_si256()};
    else
      return _mm256_setzero_si256();
  }
  // q4_0: nibble pairs <= 2 * 15 * 127, so a block's 8 lines add up in int16.
  [[gnu::always_inline]] static void step_q4(Q4Acc& a, const Nibbles& w, const X4& x) {
    a.s16 =
        _mm256_add_epi16(a.s16, _mm256_add_epi16(_mm256_maddubs_epi16(w.lo, x.lo), _mm256_maddubs_epi16(w.hi, x.hi)));
  }
  // q8_0: |x| * sign(w, x) = x * w, pairs within int16, then into int32.
  [[gnu::always_inline]] static void step_q8(__m256i& a, __m256i w, const X8& x) {
    const __m256i pr = _mm256_maddubs_epi16(x.ax, _mm256_sign_epi8(w, x.x));
    a = _mm256_add_epi32(a, _mm256_madd_epi16(pr, _mm256_set1_epi16(1)));
  }
  template <bool Q4, size_t V, class A, class W, class X>
  [[gnu::always_inline]] static void step(A& a, const W& w, const X& x) {
    if constexpr (Q4)
      step_q4(a, w, x);
    else
      step_q8(a, w, x);
  }
  template <bool Q4, size_t V, class A>
  [[gnu::always_inline]] static __m256i end(const A& a, int32_t sum_x) {
    if constexpr (Q4)  // the nibbles are q + 8: sum q x = sum n x - 8 sum x
      return _mm256_add_epi32(_mm256_set1_epi32(-8 * sum_x), _mm256_madd_epi16(a.s16, _mm256_set1_epi16(1)));
    else
      return a;
  }

  static F scales(const uint8_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static F set1(float v) { return _mm256_set1_ps(v); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F cvt(__m256i v) { return _mm256_cvtepi32_ps(v); }
  static F fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }

  // v = acc + bias; v = gelu(v); y = accumulate ? y + v : v. Full tiles in
  // registers; a partial one (matrix edge) the same float operations per element.
  template <size_t R, size_t V>
  [[gnu::always_inline]] static void finish(F (&acc)[R][V], const TileOut& o) {
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
};

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
      quant_kernels<&quant_tile::gemm_panels<Ops, false>, &quant_tile::gemm_panels<Ops, true>>(
          "avx2", &quantize_rows, &scalar_quant_kernels().matmul);
  return k;
}

}  // namespace mmgpt::kernels::detail
