// The AMX matmuls: q8_0 / q4_0 weights with TDPBSSD (AMX-INT8) and bf16
// weights with TDPBF16PS (AMX-BF16), on the tile blockings of
// simd/amx_tile.hpp, plus the vector kernel that gives TDPBF16PS's
// arithmetic on AVX-512 FMAs for the products too small for tiles. Compiled
// with the AVX-512 flags plus -mavx512vnni -mf16c and the AMX ones
// (sources.cmake); set.cpp puts it in the AVX-512 set only where the CPU has
// AMX and Linux grants this process the tile state (x86/cpu.cpp).
//
// The tile instructions are written as inline assembly over template
// constants ("%c" prints the tile number): GCC's intrinsics paste their tile
// argument into the assembly as a token, so it cannot be a template
// parameter, and their LDTILECFG operand covers 8 of its 64 bytes.
#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512VL__) || !defined(__AVX512VNNI__) || \
    !defined(__F16C__) || !defined(__FMA__) || !(defined(__AMX_TILE__) || defined(__AMXTILE__))
#error \
    "x86/avx512/amx.cpp must be compiled with -mavx512f -mavx512bw -mavx512dq -mavx512vl -mavx512vnni -mfma -mf16c -mamx-tile -mamx-int8 -mamx-bf16"
#endif
// GCC 12's AVX-512 intrinsics initialise "undefined" vectors from themselves
// (`__m512i __Y = __Y;`), which -Wmaybe-uninitialized reports once inlined:
// the compiler header's known false positive (as in this folder's kernels.cpp).
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/half.hpp"
#include "kernels/decode_prefetch.hpp"
#include "kernels/kernels.hpp"
#include "kernels/registry.hpp"
#include "kernels/simd/amx_tile.hpp"
#include "kernels/simd/quant_tile.hpp"
#include "kernels/x86/avx512/avx512.hpp"
#include "kernels/x86/avx512/bf16_lines.hpp"
#include "kernels/x86/avx512/tile_finish.hpp"

namespace mmgpt::kernels::detail {
namespace {

// ---- TDPBF16PS's arithmetic on FMAs ---------------------------------------
//
// The reference's chunked sum (scalar/bf16dot.cpp): per chunk of 16 pairs an
// even and an odd chain, then acc + (even + odd). With MXCSR's DAZ and FTZ
// set, an FMA or an add of f32 vectors rounds and flushes exactly as the
// instruction does (a product of two bf16 is exact in f32). Used for
// products of fewer rows than a tile, a product's last M % 16 rows, and K
// that is not a multiple of 32.

constexpr size_t kVecMR = 4;  // rows of a vector tile: 3 accumulators a row and panel

// R rows of x (from row m, row stride ldx) times panels p .. p + P - 1, all
// K, into sums[R][P * 16] (before the epilogue). DAZ and FTZ set by the caller.
template <size_t R, size_t P, Ahead Prefetch, DecodePrefetch H>
[[gnu::always_inline]] inline void chunk_tile(const uint16_t* x, size_t ldx, const uint16_t* wp, size_t N, size_t K,
                                              size_t p, float* sums) {
  __m512 acc[R][P];
#pragma GCC unroll 8
  for (size_t i = 0; i < R; ++i)
#pragma GCC unroll 2
    for (size_t j = 0; j < P; ++j) acc[i][j] = _mm512_setzero_ps();
  PanelSteps st[P];
  const uint16_t* line[P];
#pragma GCC unroll 2
  for (size_t j = 0; j < P; ++j) st[j] = half_panel_steps(N, K, p + j), line[j] = wp + st[j].first;
  const size_t pairs = (K + 1) / 2, full = K / 2;  // pairs of the padded row; with both k in W
  for (size_t c = 0; c < pairs; c += kTdpbf16psChunkPairs) {
    const size_t end = pairs - c < kTdpbf16psChunkPairs ? pairs : c + kTdpbf16psChunkPairs;
    __m512 ev[R][P], od[R][P];
#pragma GCC unroll 8
    for (size_t i = 0; i < R; ++i)
#pragma GCC unroll 2
      for (size_t j = 0; j < P; ++j) ev[i][j] = od[i][j] = _mm512_setzero_ps();
    for (size_t q = c; q < end; ++q) {
      __m512 we[P], wo[P];
#pragma GCC unroll 2
      for (size_t j = 0; j < P; ++j) {
        if (q < full) {
          if constexpr (Prefetch == Ahead::Decode) prefetch_decode<H>(line[j]);
          we[j] = widen_bf16(line[j]), wo[j] = widen_bf16(line[j] + kPanelWidth);
          line[j] += st[j].pitch;
        } else {  // the last k alone (odd K): its pair in w is zero, and still added
          we[j] = widen_bf16(wp + st[j].tail), wo[j] = _mm512_setzero_ps();
        }
      }
#pragma GCC unroll 8
      for (size_t i = 0; i < R; ++i) {
        const __m512 xe = _mm512_set1_ps(bf16_to_f32(x[i * ldx + 2 * q]));
        const __m512 xo = _mm512_set1_ps(bf16_to_f32(x[i * ldx + 2 * q + 1]));
#pragma GCC unroll 2
        for (size_t j = 0; j < P; ++j) {
          ev[i][j] = _mm512_fmadd_ps(xe, we[j], ev[i][j]);
          od[i][j] = _mm512_fmadd_ps(xo, wo[j], od[i][j]);
        }
      }
    }
#pragma GCC unroll 8
    for (size_t i = 0; i < R; ++i)
#pragma GCC unroll 2
      for (size_t j = 0; j < P; ++j) acc[i][j] = _mm512_add_ps(acc[i][j], _mm512_add_ps(ev[i][j], od[i][j]));
  }
#pragma GCC unroll 8
  for (size_t i = 0; i < R; ++i)
#pragma GCC unroll 2
    for (size_t j = 0; j < P; ++j) _mm512_storeu_ps(sums + (i * P + j) * kPanelWidth, acc[i][j]);
}

// The sums under DAZ and FTZ, then the epilogue in the caller's mode.
template <size_t R, size_t P, Ahead Prefetch, DecodePrefetch H>
void chunk_tile_finished(const uint16_t* x, size_t ldx, const uint16_t* wp, size_t N, size_t K, size_t p,
                         const TileOut& o) {
  alignas(64) float sums[R * P * kPanelWidth];
  const unsigned csr = _mm_getcsr();
  _mm_setcsr(csr | _MM_FLUSH_ZERO_ON | _MM_DENORMALS_ZERO_ON);
  chunk_tile<R, P, Prefetch, H>(x, ldx, wp, N, K, p, sums);
  _mm_setcsr(csr);
  __m512 acc[R][P];
#pragma GCC unroll 8
  for (size_t i = 0; i < R; ++i)
#pragma GCC unroll 2
    for (size_t j = 0; j < P; ++j) acc[i][j] = _mm512_load_ps(sums + (i * P + j) * kPanelWidth);
  finish<R, P>(acc, o);
}

// Panels [p0, p1) of the bf16 product in TDPBF16PS's arithmetic, any M, on
// vectors: row tiles of up to kVecMR rows, each over the range's panels a
// pair at a time (one stream, for_panel_pairs); a single row tile (decode,
// small batches) prefetches under the decode hint.
void tdpbf16ps_rows(const PreparedX& px, const void* w, const float* bias, float* y, size_t M, size_t K, size_t N,
                    size_t p0, size_t p1, Epilogue e) {
  if (M == 0 || p0 >= p1) return;
  const uint16_t* x = px.bf16;
  const auto* wp = static_cast<const uint16_t*>(w);
  const size_t Kp = bf16dot_row_elems(K);
  with_decode_hint([&](auto hint) {
    constexpr DecodePrefetch H = decltype(hint)::value;
    for (size_t m = 0; m < M; m += kVecMR) {
      const size_t rows = M - m < kVecMR ? M - m : kVecMR;
      quant_tile::with_rows<kVecMR>(rows, [&](auto r) {
        constexpr size_t R = decltype(r)::value;
        const uint16_t* xm = x + m * Kp;
        auto out = [&](size_t p, size_t np) { return amx_tile::tile_out(y, bias, N, e, m, p, np); };
        if (M <= kVecMR)
          for_panel_pairs(
              p0, p1, [&](size_t p) { chunk_tile_finished<R, 1, Ahead::Decode, H>(xm, Kp, wp, N, K, p, out(p, 1)); },
              [&](size_t p) { chunk_tile_finished<R, 2, Ahead::Decode, H>(xm, Kp, wp, N, K, p, out(p, 2)); });
        else
          for_panel_pairs(
              p0, p1, [&](size_t p) { chunk_tile_finished<R, 1, Ahead::None, H>(xm, Kp, wp, N, K, p, out(p, 1)); },
              [&](size_t p) { chunk_tile_finished<R, 2, Ahead::None, H>(xm, Kp, wp, N, K, p, out(p, 2)); });
      });
    }
  });
}

// ---- The tile operations ------------------------------------------------

typedef int32_t int32_may_alias __attribute__((may_alias));

struct Ops {
  static constexpr size_t kMinRows = amx_tile::kTileRows;
  using F = __m512;

  static void configure(const amx_tile::TileConfig& c) { __asm__ volatile("ldtilecfg %0" : : "m"(c)); }
  static void release() { __asm__ volatile("tilerelease" ::: "memory"); }
  template <int T>
  static void zero() {
    __asm__ volatile("tilezero %%tmm%c0" : : "i"(T));
  }
  template <int T>
  static void load(const void* p, size_t stride) {
    __asm__ volatile("tileloadd (%0,%1,1), %%tmm%c2" : : "r"(p), "r"(stride), "i"(T) : "memory");
  }
  template <int T>
  static void store(void* p, size_t stride) {
    __asm__ volatile("tilestored %%tmm%c2, (%0,%1,1)" : : "r"(p), "r"(stride), "i"(T) : "memory");
  }
  template <int C, int A, int B>
  static void dpbssd() {
    static_assert(C != A && C != B && A != B);
    __asm__ volatile("tdpbssd %%tmm%c2, %%tmm%c1, %%tmm%c0" : : "i"(C), "i"(A), "i"(B));
  }
  template <int C, int A, int B>
  static void dpbf16ps() {
    static_assert(C != A && C != B && A != B);
    __asm__ volatile("tdpbf16ps %%tmm%c2, %%tmm%c1, %%tmm%c0" : : "i"(C), "i"(A), "i"(B));
  }

  static F set1(float v) { return _mm512_set1_ps(v); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F cvt(const int32_t* p) { return _mm512_cvtepi32_ps(_mm512_load_si512(p)); }
  static F load(const float* p) { return _mm512_load_ps(p); }
  static F scales(const uint8_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  template <size_t R, size_t P>
  [[gnu::always_inline]] static void finish(F (&acc)[R][P], const TileOut& o) {
    detail::finish<R, P>(acc, o);
  }

  // 64 bytes of q4_0 (4 k of 16 rows in each nibble) to two B-tile rows of
  // signed bytes: the low nibbles (k 8c .. 8c+3), then the high ones.
  static void unpack_q4(const uint8_t* line, int8_t* lo, int8_t* hi) {
    const __m512i w = _mm512_loadu_si512(line), nib = _mm512_set1_epi8(0x0F), eight = _mm512_set1_epi8(8);
    _mm512_store_si512(lo, _mm512_sub_epi8(_mm512_and_si512(w, nib), eight));
    _mm512_store_si512(hi, _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(w, 4), nib), eight));
  }
  // A line of a bf16 panel (k for 16 rows, then k+1) to a B-tile row: lane j
  // = (w[j][k], w[j][k+1]).
  static void interleave(const uint16_t* line, uint16_t* row) {
    _mm512_store_si512(row, _mm512_permutexvar_epi16(_mm512_load_si512(kInterleave), _mm512_loadu_si512(line)));
  }

  template <bool Q4>
  static void quant_rows(const PreparedX& x, const void* w, const float* bias, float* y, size_t M, size_t K, size_t N,
                         size_t p0, size_t p1, Epilogue e) {
    avx512vnni_quant_kernels().matmul.panels[static_cast<size_t>(Q4 ? WeightType::Q4_0 : WeightType::Q8_0)](
        x, w, bias, y, M, K, N, p0, p1, e);
  }
  static void bf16_rows(const PreparedX& x, const void* w, const float* bias, float* y, size_t M, size_t K, size_t N,
                        size_t p0, size_t p1, Epilogue e) {
    tdpbf16ps_rows(x, w, bias, y, M, K, N, p0, p1, e);
  }
};

}  // namespace

const QuantKernels& amx_int8_quant_kernels() {
  static const QuantKernels k = [] {
    QuantKernels q{{"amx-int8", XForm::Q8Blocks, {}, &scalar_quant_kernels().matmul},
                   avx512vnni_quant_kernels().quantize_rows};
    q.matmul.panels[static_cast<size_t>(WeightType::Q8_0)] = &amx_tile::quant_panels<Ops, false>;
    q.matmul.panels[static_cast<size_t>(WeightType::Q4_0)] = &amx_tile::quant_panels<Ops, true>;
    return q;
  }();
  return k;
}

const MatmulKernels& amx_bf16_kernels() {
  static const MatmulKernels k = [] {
    MatmulKernels m{"amx-bf16", XForm::Bf16Rows, {}, &scalar_tdpbf16ps_kernels()};
    m.panels[static_cast<size_t>(WeightType::BF16)] = &amx_tile::bf16_panels<Ops>;
    return m;
  }();
  return k;
}

const MatmulKernels& amx_bf16_vector_kernels() {
  static const MatmulKernels k = [] {
    MatmulKernels m{"amx-bf16-vector", XForm::Bf16Rows, {}, &scalar_tdpbf16ps_kernels()};
    m.panels[static_cast<size_t>(WeightType::BF16)] = &tdpbf16ps_rows;
    return m;
  }();
  return k;
}

bool amx_int8_agrees() { return amx_tile::int8_agrees(amx_int8_quant_kernels().matmul); }
bool amx_bf16_agrees() { return amx_tile::bf16_agrees(amx_bf16_kernels()); }

}  // namespace mmgpt::kernels::detail
