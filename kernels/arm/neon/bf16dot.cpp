// bf16 weights times activations rounded to bf16, with the Arm BF16
// extension's BFDOT (FEAT_BF16: Armv8.6-A, and earlier cores such as
// Neoverse V1/N2, Apple M2 and later): 8 multiply-adds per 128-bit
// instruction, twice an f32 FMLA's. Compiled with -march=armv8.2-a+bf16
// (sources.cmake); set.cpp puts it in the NEON set only on CPUs whose HWCAP2
// reports BF16 (and not under MMGPT_BF16DOT=0).
//
// Numerics: BFDOT's, which are not VDPBF16PS's. Per f32 lane and pair of bf16
// (k = 2i, 2i+1) it rounds both products, their sum, and the sum added to the
// accumulator, each to odd (not to nearest), flushing subnormal inputs and
// results to zero (Arm ARM, BFDOT, with FPCR.EBF 0: Linux's default; a CPU
// with FEAT_EBF16 in a process that set FPCR.EBF would round differently).
// scalar/bf16dot_arm.cpp defines it; every output here is one accumulator
// chain over the pairs in order from zero, so the result is that reference's
// bit for bit whatever the tile, row block or thread split, and a row's
// result does not depend on M.
//
// Layout: a 64-byte line of a panel (panel_layout.hpp) is k and k+1 of its 16
// rows, k-major; BFDOT wants lane j = (w[j][2i], w[j][2i+1]), so ZIP1/ZIP2 of
// the two k-steps give the four column vectors (4 rows each) of a pair. An
// odd K's last k is alone in its 32 bytes: its pair is zero, as x's pad is.
// Activations: rows of bf16 pairs (bf16dot_round_rows); four pairs are one
// vector, each used by lane (BFDOT by element).
//
// Epilogue as the quantized NEON kernels' (tile_finish.hpp): v = acc + bias,
// the GELU through quant_gelu (the active set's vector GELU), y (+)= v.
#if !defined(__aarch64__)
#error "arm/neon/bf16dot.cpp is for aarch64 only"
#endif
#if !defined(__ARM_FEATURE_BF16_VECTOR_ARITHMETIC)
#error "arm/neon/bf16dot.cpp needs -march=armv8.2-a+bf16 (see sources.cmake)"
#endif
#include <arm_neon.h>

#include <cstring>

#include "kernels/arm/neon/neon.hpp"
#include "kernels/arm/neon/tile_finish.hpp"
#include "kernels/decode_prefetch.hpp"
#include "kernels/kernels.hpp"
#include "kernels/registry.hpp"

namespace mmgpt::kernels::detail {
namespace {

// Prefill tile: MR rows x one panel (16 accumulators, the panel's four zipped
// weight vectors and MR activation vectors in the 32 registers).
constexpr size_t MR = 4;

// The four column vectors (columns 4c .. 4c+3, lane j = the pair of k of
// column 4c + j) of k-steps `a` (16 values of k) and `b` (of k + 1).
[[gnu::always_inline]] inline void zip_pair(const uint16_t* a, const uint16_t* b, bfloat16x8_t (&z)[4]) {
  const uint16x8_t a0 = vld1q_u16(a), a1 = vld1q_u16(a + 8);
  const uint16x8_t b0 = b ? vld1q_u16(b) : vdupq_n_u16(0), b1 = b ? vld1q_u16(b + 8) : vdupq_n_u16(0);
  z[0] = vreinterpretq_bf16_u16(vzip1q_u16(a0, b0));
  z[1] = vreinterpretq_bf16_u16(vzip2q_u16(a0, b0));
  z[2] = vreinterpretq_bf16_u16(vzip1q_u16(a1, b1));
  z[3] = vreinterpretq_bf16_u16(vzip2q_u16(a1, b1));
}

// R rows of x (row stride ldx) against panels p .. p + P - 1 of the packed
// W[N, K], all K. Decode prefetches the stream ahead (decode_prefetch.hpp).
template <size_t R, size_t P, bool Decode, DecodePrefetch H = DecodePrefetch::Nta>
void tile(const uint16_t* x, size_t ldx, const uint16_t* wp, size_t N, size_t K, size_t p, const TileOut& o) {
  float32x4_t acc[R][4 * P];
  for (size_t r = 0; r < R; ++r)
    for (size_t c = 0; c < 4 * P; ++c) acc[r][c] = vdupq_n_f32(0.0f);
  PanelSteps st[P];
  for (size_t j = 0; j < P; ++j) st[j] = half_panel_steps(N, K, p + j);

  // Pair q of panel j into z, then every row's BFDOT with its pair, taken
  // by lane L from xv (the row's vector of pairs q - L .. q - L + 3).
  auto pair = [&](size_t q, auto lane, const bfloat16x8_t(&xv)[R]) __attribute__((always_inline)) {
    constexpr int L = decltype(lane)::value;
    const size_t k = 2 * q;
#pragma GCC unroll 2
    for (size_t j = 0; j < P; ++j) {
      const uint16_t* a = wp + st[j].at(K, k);
      if constexpr (Decode) prefetch_decode<H>(a);
      bfloat16x8_t z[4];
      zip_pair(a, k + 1 < K ? a + kPanelWidth : nullptr, z);
#pragma GCC unroll 8
      for (size_t r = 0; r < R; ++r)
#pragma GCC unroll 4
        for (size_t c = 0; c < 4; ++c) acc[r][4 * j + c] = vbfdotq_laneq_f32(acc[r][4 * j + c], z[c], xv[r], L);
    }
  };
  const size_t pairs = bf16dot_row_elems(K) / 2;
  size_t i = 0;
  for (; i + 4 <= pairs; i += 4) {
    bfloat16x8_t xv[R];
#pragma GCC unroll 8
    for (size_t r = 0; r < R; ++r) xv[r] = vreinterpretq_bf16_u16(vld1q_u16(x + r * ldx + 2 * i));
    static_for<4>([&](auto lane) { pair(i + decltype(lane)::value, lane, xv); });
  }
  for (; i < pairs; ++i) {  // the last pairs % 4, each broadcast to lane 0
    bfloat16x8_t xv[R];
    for (size_t r = 0; r < R; ++r) {
      uint32_t two;
      std::memcpy(&two, x + r * ldx + 2 * i, sizeof two);
      xv[r] = vreinterpretq_bf16_u32(vdupq_n_u32(two));
    }
    pair(i, std::integral_constant<int, 0>{}, xv);
  }

  finish<R, 4 * P>(acc, o.y, o.ldy, o.ncols, o.bias, o.e);  // tile_finish.hpp
}

// tile<rows, 1, false> for rows in 1 .. R.
template <size_t R = MR>
void tile_rows(size_t rows, const uint16_t* x, size_t ldx, const uint16_t* wp, size_t N, size_t K, size_t p,
               const TileOut& o) {
  if constexpr (R > 0) {
    if (rows == R) return tile<R, 1, false>(x, ldx, wp, N, K, p, o);
    tile_rows<R - 1>(rows, x, ldx, wp, N, K, p, o);
  }
}

void gemm_panels(const uint16_t* x, const uint16_t* wp, const float* bias, float* y, size_t M, size_t K, size_t N,
                 size_t p0, size_t p1, Epilogue e) {
  if (M == 0 || p0 >= p1) return;
  const size_t Kp = bf16dot_row_elems(K);
  auto out = [&](size_t m, size_t p, size_t np) {
    const size_t col = p * kPanelWidth, left = N - col;
    const size_t ncols = left < np * kPanelWidth ? left : np * kPanelWidth;
    return TileOut{y + m * N + col, N, ncols, bias ? bias + col : nullptr, e};
  };
  if (M == 1) {
    // Decode: a pair of panels at a time, whose lines alternate in memory
    // (one stream).
    with_decode_hint([&](auto hint) {
      constexpr DecodePrefetch H = decltype(hint)::value;
      for_panel_pairs(
          p0, p1, [&](size_t p) { tile<1, 1, true, H>(x, Kp, wp, N, K, p, out(0, p, 1)); },
          [&](size_t p) { tile<1, 2, true, H>(x, Kp, wp, N, K, p, out(0, p, 2)); });
    });
    return;
  }
  // Prefill: each panel (L1/L2-resident) sweeps all rows in MR-row tiles.
  for (size_t p = p0; p < p1; ++p)
    for (size_t m = 0; m < M; m += MR) {
      const size_t rows = M - m < MR ? M - m : MR;
      tile_rows(rows, x + m * Kp, Kp, wp, N, K, p, out(m, p, 1));
    }
}

}  // namespace

const MatmulKernels& neon_bf16_bf16dot_kernels() {
  static const MatmulKernels k = bf16dot_kernels<&gemm_panels>("neon_bf16", &scalar_arm_bf16dot_kernels());
  return k;
}

}  // namespace mmgpt::kernels::detail
