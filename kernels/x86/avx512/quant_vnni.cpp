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
// The tiles, their blockings and the float part: simd/quant_tile.hpp; the
// tile's epilogue (bias, GELU, accumulate): tile_finish.hpp.
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

#include "kernels/kernels.hpp"
#include "kernels/registry.hpp"
#include "kernels/simd/quant_tile.hpp"
#include "kernels/x86/avx512/avx512.hpp"
#include "kernels/x86/avx512/tile_finish.hpp"

namespace mmgpt::kernels::detail {
namespace {

// VPDPBUSD with 4 bytes of x broadcast from memory to every lane as its
// signed operand ({1to16}): one instruction where the intrinsics give two
// (GCC 12 does not fold _mm512_set1_epi32 of a load into VPDPBUSD).
typedef int32_t int32_may_alias __attribute__((may_alias));
[[gnu::always_inline]] inline __m512i dpbusd_x4(__m512i acc, __m512i w, const int8_t* x4) {
  __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*reinterpret_cast<const int32_may_alias*>(x4)));
  return acc;
}

// The operations quant_tile.hpp's matmul is written over. A panel line is one
// zmm. Prefill tiles are MR rows x NP panels (32 columns): 12 int32 block
// accumulators + 12 f32 accumulators + the weight vectors of a line stay in
// the 32 zmm registers.
//
// A tile one panel wide (decode, small batches, the last panel of prefill)
// has registers to spare and few products per load, so there q4_0 takes its
// high nibbles as 16 * (q + 8) by a mask, into an accumulator of their own
// that is shifted down by 4 at the end of the block (exact: a sum of
// multiples of 16), an instruction a line fewer than shift and mask; and with
// more than one row x's bytes are broadcast inside VPDPBUSD (dpbusd_x4), an
// instruction fewer a row and line. The integer sums are the same either way
// (docs/kernels.md, "Small batches stream like decode").
struct Ops {
  using F = __m512;
  static constexpr size_t kLanes = 16, kVectorsPerPanel = 1, kMR = 6, kNP = 2;
  // Decode prefetches a unit's scales after its first block's quants
  // (docs/kernels.md, "The scales' line").
  template <bool Q4>
  static constexpr bool kPrefetchScalesLast = true;

  struct Nibbles {  // V == 1: lo = n, hi = 16 n; else lo and hi = n
    __m512i lo, hi;
  };
  struct Split {  // q4_0, V == 1: sum of n x (less 8 sum_x), and of 16 n x
    __m512i lo, hi;
  };
  struct X4 {
    __m512i lo, hi;
  };

  static __m512i bcast4(const int8_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
  }
  // From memory inside VPDPBUSD: one panel wide with more than one row.
  template <size_t V, size_t R>
  static constexpr bool kFromMemory = V == 1 && R > 1;

  template <bool Q4, size_t V>
  [[gnu::always_inline]] static auto load(const uint8_t* p) {
    const __m512i w = _mm512_loadu_si512(p);
    if constexpr (!Q4) {  // w + 128, unsigned for VPDPBUSD
      return _mm512_xor_si512(w, _mm512_set1_epi8(static_cast<char>(0x80)));
    } else if constexpr (V == 1) {
      return Nibbles{_mm512_and_si512(w, _mm512_set1_epi8(0x0F)),
                     _mm512_and_si512(w, _mm512_set1_epi8(static_cast<char>(0xF0)))};
    } else {
      const __m512i nib = _mm512_set1_epi8(0x0F);
      return Nibbles{_mm512_and_si512(w, nib), _mm512_and_si512(_mm512_srli_epi16(w, 4), nib)};
    }
  }
  template <bool Q4, size_t V, size_t R>
  [[gnu::always_inline]] static auto bcast(const int8_t* xq) {
    if constexpr (kFromMemory<V, R>)
      return xq;
    else if constexpr (Q4)
      return X4{bcast4(xq), bcast4(xq + 4)};
    else
      return bcast4(xq);
  }
  // The weights are offset to unsigned (q8_0: w + 128; q4_0: q + 8): the
  // accumulator starts at -offset * sum_x, so it ends at isum.
  template <bool Q4, size_t V>
  [[gnu::always_inline]] static auto begin(int32_t sum_x) {
    const __m512i init = _mm512_set1_epi32(-(Q4 ? 8 : 128) * sum_x);
    if constexpr (Q4 && V == 1)
      return Split{init, _mm512_setzero_si512()};
    else
      return init;
  }
  static __m512i dot(__m512i a, __m512i w, __m512i x) { return _mm512_dpbusd_epi32(a, w, x); }
  static __m512i dot(__m512i a, __m512i w, const int8_t* x) { return dpbusd_x4(a, w, x); }
  static __m512i lo(const X4& x) { return x.lo; }
  static __m512i hi(const X4& x) { return x.hi; }
  static const int8_t* lo(const int8_t* x) { return x; }
  static const int8_t* hi(const int8_t* x) { return x + 4; }
  template <bool Q4, size_t V, class A, class W, class X>
  [[gnu::always_inline]] static void step(A& a, const W& w, const X& x) {
    if constexpr (!Q4) {
      a = dot(a, w, x);
    } else if constexpr (V == 1) {
      a.lo = dot(a.lo, w.lo, lo(x));
      a.hi = dot(a.hi, w.hi, hi(x));
    } else {
      a = dot(dot(a, w.lo, lo(x)), w.hi, hi(x));
    }
  }
  template <bool Q4, size_t V, class A>
  [[gnu::always_inline]] static __m512i end(const A& a, int32_t) {
    if constexpr (Q4 && V == 1)
      return _mm512_add_epi32(a.lo, _mm512_srai_epi32(a.hi, 4));
    else
      return a;
  }

  static F scales(const uint8_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  static F set1(float v) { return _mm512_set1_ps(v); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F cvt(__m512i v) { return _mm512_cvtepi32_ps(v); }
  static F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  template <size_t R, size_t V>
  [[gnu::always_inline]] static void finish(F (&acc)[R][V], const TileOut& o) {
    detail::finish<R, V>(acc, o);
  }
};

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
      quant_kernels<&quant_tile::gemm_panels<Ops, false>, &quant_tile::gemm_panels<Ops, true>>(
          "avx512vnni", &quantize_rows, &scalar_quant_kernels().matmul);
  return k;
}

}  // namespace mmgpt::kernels::detail
