// bf16 weights times activations rounded to bf16, with AVX512_BF16's
// VDPBF16PS: 32 multiply-adds per instruction, twice an f32 FMA's. Compiled
// with the AVX-512 flags plus -mavx512bf16 -mf16c (sources.cmake); set.cpp
// puts it in the AVX-512 set only on CPUs that report AVX512_BF16 (and not
// under MMGPT_BF16DOT=0).
//
// Numerics: VDPBF16PS adds to each f32 lane the products of one pair of bf16
// (k = 2i, 2i+1), odd element first, each with its own rounding, inputs DAZ,
// result FTZ: exactly the scalar reference's step (scalar/bf16dot.cpp). Every
// output here is one accumulator chain over the pairs in order from zero, so
// the result is the reference's bit for bit whatever the tile, row block or
// thread split; a row's result does not depend on M.
//
// Layout: a panel (panel_layout.hpp, the file format) holds per k the 16
// values W[16p + j][k], so a 64-byte line is k and k+1 of the 16 rows,
// k-major, and the lines of the two panels of a pair alternate. VDPBF16PS
// wants lane j = (w[j][2i], w[j][2i+1]): one VPERMW per line interleaves the
// two halves (amortized over the rows of a tile; decode on one thread widens
// the halves instead: decode_tile). An odd K's last k is alone in its 32
// bytes: loaded as half a vector, its pair is zero.
// Activations: rows of bf16 pairs (bf16dot_round_rows, zero-padded to even
// K); one 32-bit pair broadcast to every lane per row and pair.
//
// The tile's epilogue (bias, GELU, accumulate): tile_finish.hpp, shared
// with the VNNI kernels.
#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512VL__) || !defined(__AVX512BF16__)
#error \
    "x86/avx512/bf16dot.cpp must be compiled with -mavx512f -mavx512bw -mavx512dq -mavx512vl -mavx512bf16 -mfma -mf16c"
#endif
// GCC 12's AVX-512 intrinsics initialise "undefined" vectors from themselves
// (`__m512i __Y = __Y;`), which -Wmaybe-uninitialized reports once inlined:
// the compiler header's known false positive (as in this folder's kernels.cpp).
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "core/half.hpp"
#include "kernels/decode_prefetch.hpp"
#include "kernels/kernels.hpp"
#include "kernels/parallel.hpp"
#include "kernels/registry.hpp"
#include "kernels/x86/avx512/avx512.hpp"
#include "kernels/x86/avx512/bf16_lines.hpp"
#include "kernels/x86/avx512/tile_finish.hpp"

namespace mmgpt::kernels::detail {
namespace {

// Prefill microkernel: MR rows x NP panels (32 output columns) per tile: 16
// accumulators + the interleaved weights of a pair + a broadcast in the 32 zmm.
// The fastest of the tile shapes tried (docs/kernels.md, "The GEMM: blocking
// and microkernels").
constexpr size_t MR = 8;
constexpr size_t NP = 2;
// Decode (one row): one pair of panels at a time, which lie in one run of
// memory, so the matrix is read front to back as a single stream, each line
// prefetched ahead as decode_prefetch.hpp describes, two accumulator chains
// (one per panel), so one chain's latency does not bound the read
// (docs/kernels.md, "16-bit panels in pairs"). On one thread the same
// arithmetic runs on FMAs instead (decode_panels, below).
// Rows of rounded activations kept in L2 while a panel pair sweeps them.
constexpr size_t kActivationL2Budget = 256 * 1024;

// The pair x[k], x[k + 1] as one 32-bit value broadcast to all 16 lanes.
inline __m512i bcast_pair(const uint16_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

inline __m512 dot(__m512 acc, __m512i w, __m512i x) { return _mm512_dpbf16_ps(acc, (__m512bh)w, (__m512bh)x); }

// acc[i][j] += rows i of x (pair k, k + 1) . the interleaved pair wv[j] of panel j.
template <size_t R, size_t P>
[[gnu::always_inline]] inline void pair_step(__m512 (&acc)[R][P], const __m512i (&wv)[P], const uint16_t* x, size_t ldx,
                                             size_t k) {
#pragma GCC unroll 16
  for (size_t i = 0; i < R; ++i) {
    const __m512i xb = bcast_pair(x + i * ldx + k);
#pragma GCC unroll 16
    for (size_t j = 0; j < P; ++j) acc[i][j] = dot(acc[i][j], wv[j], xb);
  }
}

// R rows of x (from row m, row stride ldx) against panels p .. p + P - 1 of
// the packed W[N, K] at wp, all K.
template <size_t R, size_t P, Ahead Prefetch, DecodePrefetch H = DecodePrefetch::Nta>
[[gnu::always_inline]] inline void tile(const uint16_t* x, size_t ldx, const uint16_t* wp, size_t N, size_t K, size_t p,
                                        const TileOut& o) {
  const __m512i idx = _mm512_load_si512(kInterleave);
  __m512 acc[R][P];
#pragma GCC unroll 16
  for (size_t i = 0; i < R; ++i)
#pragma GCC unroll 16
    for (size_t j = 0; j < P; ++j) acc[i][j] = _mm512_setzero_ps();

  PanelSteps st[P];
  const uint16_t* line[P];
#pragma GCC unroll 16
  for (size_t j = 0; j < P; ++j) st[j] = half_panel_steps(N, K, p + j), line[j] = wp + st[j].first;
  const size_t pairs = K / 2;
  for (size_t k = 0; k < 2 * pairs; k += 2) {
    __m512i wv[P];
#pragma GCC unroll 16
    for (size_t j = 0; j < P; ++j) {
      const uint16_t* src = line[j];
      if constexpr (Prefetch == Ahead::Decode) prefetch_decode<H>(src);
      wv[j] = _mm512_permutexvar_epi16(idx, _mm512_loadu_si512(src));
      line[j] += st[j].pitch;
    }
    pair_step<R, P>(acc, wv, x, ldx, k);
  }
  if (K & 1) {  // the last k alone: its pair (in w and in x) is zero
    const size_t k = K - 1;
    __m512i wv[P];
#pragma GCC unroll 16
    for (size_t j = 0; j < P; ++j) {
      const __m256i half = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wp + st[j].tail));
      wv[j] = _mm512_permutexvar_epi16(idx, _mm512_zextsi256_si512(half));
    }
    pair_step<R, P>(acc, wv, x, ldx, k);
  }
  finish<R, P>(acc, o);
}

// Decode (one row): the same arithmetic on FMAs. VDPBF16PS's step is two
// FMAs, odd element first, with subnormal inputs read as zeros and subnormal
// results flushed (the product of two bf16 is exact in f32, so each FMA
// rounds once, as the instruction does): with MXCSR's DAZ and FTZ set, an
// FMA does exactly that, so this gives VDPBF16PS's result bit for bit
// (tests/test_kernels_bf16dot.cpp checks it against the reference, with
// subnormals, infinities and NaNs). A line needs no VPERMW (the widening of
// its two halves is a zero-extend and a shift each); it takes more
// instructions than VDPBF16PS's three, and is the faster on one thread only
// (gemm_panels; docs/kernels.md, "bf16 dot products").
//
// Panels p .. p + P - 1 into part (16 P floats, before the epilogue), with
// DAZ and FTZ set by the caller. xf: the rounded activation row widened to
// f32 (Kp values, the pad zero).
template <size_t P, DecodePrefetch H>
[[gnu::always_inline]] inline void decode_tile(const float* xf, const uint16_t* wp, size_t N, size_t K, size_t p,
                                               float* part) {
  __m512 acc[P];
  PanelSteps st[P];
  const uint16_t* line[P];
#pragma GCC unroll 16
  for (size_t j = 0; j < P; ++j) {
    acc[j] = _mm512_setzero_ps();
    st[j] = half_panel_steps(N, K, p + j), line[j] = wp + st[j].first;
  }
  const size_t pairs = K / 2;
  for (size_t k = 0; k < 2 * pairs; k += 2) {
    const __m512 xo = _mm512_set1_ps(xf[k + 1]), xe = _mm512_set1_ps(xf[k]);
#pragma GCC unroll 16
    for (size_t j = 0; j < P; ++j) {
      const uint16_t* src = line[j];
      prefetch_decode<H>(src);
      const __m512 we = widen_bf16(src), wo = widen_bf16(src + kPanelWidth);
      acc[j] = _mm512_fmadd_ps(xo, wo, acc[j]);
      acc[j] = _mm512_fmadd_ps(xe, we, acc[j]);
      line[j] += st[j].pitch;
    }
  }
  if (K & 1) {  // the last k alone: its pair (in w and in x) is zero, and still added
    const __m512 xo = _mm512_set1_ps(xf[K]), xe = _mm512_set1_ps(xf[K - 1]);
#pragma GCC unroll 16
    for (size_t j = 0; j < P; ++j) {
      acc[j] = _mm512_fmadd_ps(xo, _mm512_setzero_ps(), acc[j]);
      acc[j] = _mm512_fmadd_ps(xe, widen_bf16(wp + st[j].tail), acc[j]);
    }
  }
#pragma GCC unroll 16
  for (size_t j = 0; j < P; ++j) _mm512_storeu_ps(part + j * kPanelWidth, acc[j]);
}

// Decode of panels [p0, p1): every tile's sums with DAZ and FTZ set (once
// per call, not per tile), then the epilogues in the caller's mode.
void decode_panels(const uint16_t* x, const uint16_t* wp, size_t K, size_t N, size_t p0, size_t p1, const auto& out) {
  const size_t Kp = bf16dot_row_elems(K);
  thread_local std::vector<float> xf, part;
  if (xf.size() < Kp) xf.resize(Kp);
  if (part.size() < (p1 - p0) * kPanelWidth) part.resize((p1 - p0) * kPanelWidth);
  for (size_t k = 0; k < Kp; ++k) xf[k] = bf16_to_f32(x[k]);
  float* at = part.data();  // panel p's sums at at + 16 (p - p0)
  const unsigned csr = _mm_getcsr();
  _mm_setcsr(csr | _MM_FLUSH_ZERO_ON | _MM_DENORMALS_ZERO_ON);
  with_decode_hint([&](auto hint) {
    constexpr DecodePrefetch H = decltype(hint)::value;
    for_panel_pairs(
        p0, p1, [&](size_t p) { decode_tile<1, H>(xf.data(), wp, N, K, p, at + (p - p0) * kPanelWidth); },
        [&](size_t p) { decode_tile<2, H>(xf.data(), wp, N, K, p, at + (p - p0) * kPanelWidth); });
  });
  _mm_setcsr(csr);
  auto finish_panels = [&]<size_t P>(size_t p) {
    __m512 acc[1][P];
#pragma GCC unroll 16
    for (size_t j = 0; j < P; ++j) acc[0][j] = _mm512_loadu_ps(at + (p - p0 + j) * kPanelWidth);
    finish<1, P>(acc, out(0, p, P));
  };
  for_panel_pairs(
      p0, p1, [&](size_t p) { finish_panels.template operator()<1>(p); },
      [&](size_t p) { finish_panels.template operator()<2>(p); });
}

// tile<rows, ...> for rows in 1 .. R.
template <size_t P, Ahead Prefetch, DecodePrefetch H = DecodePrefetch::Nta, size_t R = MR>
void tile_rows(size_t rows, const uint16_t* x, size_t ldx, const uint16_t* wp, size_t N, size_t K, size_t p,
               const TileOut& o) {
  if constexpr (R > 0) {
    if (rows == R) return tile<R, P, Prefetch, H>(x, ldx, wp, N, K, p, o);
    tile_rows<P, Prefetch, H, R - 1>(rows, x, ldx, wp, N, K, p, o);
  }
}

void gemm_panels(const uint16_t* x, const uint16_t* wp, const float* bias, float* y, size_t M, size_t K, size_t N,
                 size_t p0, size_t p1, Epilogue e) {
  if (M == 0 || p0 >= p1) return;
  const size_t Kp = bf16dot_row_elems(K);
  auto out = [&](size_t m, size_t p, size_t np) {
    const size_t col = p * kPanelWidth, left = N - col;
    return TileOut{y + m * N + col, N, left < np * kPanelWidth ? left : np * kPanelWidth, bias ? bias + col : nullptr,
                   e};
  };

  // Decode (one row) on one thread runs on FMAs (decode_panels), on more
  // with VDPBF16PS below: the same bits either way, so this is speed only.
  // The FMA form is the faster on one thread, VDPBF16PS (fewer instructions
  // a line) on two; why two threads prefer it is not established
  // (docs/kernels.md, "bf16 dot products").
  if (M == 1 && thread_budget() == 1) return decode_panels(x, wp, K, N, p0, p1, out);

  // Decode and small batches (a single row tile): memory-bound, the weights
  // read once, a pair of panels at a time (for_panel_pairs: one stream),
  // each line under the decode hint.
  if (M <= MR) {
    with_decode_hint([&](auto hint) {
      constexpr DecodePrefetch H = decltype(hint)::value;
      for_panel_pairs(
          p0, p1, [&](size_t p) { tile_rows<1, Ahead::Decode, H>(M, x, Kp, wp, N, K, p, out(0, p, 1)); },
          [&](size_t p) { tile_rows<2, Ahead::Decode, H>(M, x, Kp, wp, N, K, p, out(0, p, 2)); });
    });
    return;
  }

  // Prefill: row blocks of activations that fit L2; within one, each panel
  // pair (L1/L2-resident) sweeps all its rows in MR-row tiles.
  size_t mc = kActivationL2Budget / (2 * (Kp ? Kp : 1)) / MR * MR;
  if (mc < MR) mc = MR;
  for (size_t mc0 = 0; mc0 < M; mc0 += mc) {
    const size_t mc1 = M - mc0 < mc ? M : mc0 + mc;
    for (size_t p = p0; p < p1;) {
      const size_t np = p + NP <= p1 ? NP : 1;
      for (size_t m = mc0; m < mc1;) {
        const size_t rows = mc1 - m < MR ? mc1 - m : MR;
        const uint16_t* xm = x + m * Kp;
        if (np == NP)
          tile_rows<NP, Ahead::None>(rows, xm, Kp, wp, N, K, p, out(m, p, NP));
        else
          tile_rows<1, Ahead::None>(rows, xm, Kp, wp, N, K, p, out(m, p, 1));
        m += rows;
      }
      p += np;
    }
  }
}

}  // namespace

const MatmulKernels& avx512bf16_bf16dot_kernels() {
  static const MatmulKernels k = bf16dot_kernels<&gemm_panels>("avx512bf16", &scalar_bf16dot_kernels());
  return k;
}

}  // namespace mmgpt::kernels::detail
