#pragma once
// The matmuls on AMX tiles (q8_0 / q4_0 weights with TDPBSSD, bf16 weights
// with TDPBF16PS), written once over a set of tile and f32 operations
// (`Ops`): x86/avx512/amx.cpp gives them with the AMX and AVX-512
// intrinsics, tests/amx_tile_emulated.hpp with plain C++ models of each
// instruction as the Intel SDM defines it, so the tile configuration, the
// blockings and the edges below are tested on every host.
//
// Tiles pay from a tile's 16 rows up: products of fewer rows than
// Ops::kMinRows, and the last M % 16 rows of larger ones, run on the set's
// vector kernels (Ops::quant_rows / Ops::bf16_rows: VNNI's and VDPBF16PS's),
// which give the same bits: every output is the same chain of roundings
// whichever kernel computes it, so a row's result still depends neither on
// M nor on the thread split.
//
// The tile configuration is loaded at the start of every call, on the thread
// that runs it, and released at its end: oneTBB's workers need no set-up of
// their own, and whatever else in the process may have configured the tiles
// in between (another library's AMX code) cannot leave a wrong shape behind.
//
// q8_0 / q4_0 (numerics of scalar/quant.cpp): a 64-byte line of a panel is
// 4 consecutive k of its 16 rows, row j at bytes 4j .. 4j+3, which is one row
// of a TDPBSSD B tile as it is; a block's 8 lines are a B tile of 8 rows, so
// q8_0 tiles load from the file. q4_0 lines are unpacked once per panel and
// row block into signed bytes (nibble - 8), the low nibbles (k 8c .. 8c+3)
// before the high ones (8c+4 .. 8c+7), in k order. The A tile is 16 rows of
// a block's 32 activation bytes. Each block's C tile is its exact int32 isum
// for 16 rows x 16 columns; it is stored and scaled in f32 exactly as the
// reference does, acc = fma(float(isum), dw * dx, acc) per block in block
// order, from 16 accumulator vectors (one per row). Two C tiles alternate, so
// a block's TDPBSSD runs while the previous block is scaled.
//
// bf16 (numerics of scalar/bf16dot.cpp's TDPBF16PS reference): the C tile is
// the f32 accumulator of every output over all K. One TDPBF16PS over 16 pairs
// of k sums, per output, the even elements' products in one chain and the odd
// ones' in another (each step rounded, DAZ and FTZ), then adds the two, then
// adds that to the tile: so a C tile carries the reference's chunked sum
// from zero across its 32-k steps. B rows must be pairs (w[n][2i],
// w[n][2i+1]) for 16 columns, while a file line holds k for 16 rows then k+1
// for 16 rows: a panel's lines are interleaved once per row block into a
// buffer of the thread. Tiles are 32 rows x 2 panels (4 C tiles, 2 A tiles,
// 2 B tiles). K must be a multiple of 32 (a tile's 16 pairs, the reference's
// chunk); other K run on the vector kernel.
//
// What an Ops provides (all static):
//   kMinRows                                   the smallest M that takes tiles
//   configure(const TileConfig&), release()    LDTILECFG, TILERELEASE
//   zero<T>(), load<T>(p, stride), store<T>(p, stride)
//   dpbssd<C, A, B>(), dpbf16ps<C, A, B>()
//   F, set1, mul, fma, cvt(const int32_t*)     f32 vectors of 16 lanes
//   load(const float*), scales(const uint8_t*) (16 f16 widened)
//   finish<R, P>(F (&)[R][P], TileOut)         the epilogue
//   unpack_q4(const uint8_t* line, int8_t* lo, int8_t* hi)
//   interleave(const uint16_t* line, uint16_t* row)
//   quant_rows<Q4>(PreparedX, ...), bf16_rows(PreparedX, ...)   the vector kernels
#include <cstddef>
#include <cstdint>
#include <bit>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/panel_layout.hpp"
#include "core/quant_layout.hpp"
#include "kernels/epilogue.hpp"
#include "kernels/prepared_x.hpp"
#include "kernels/registry.hpp"

namespace mmgpt::kernels::detail {
namespace {
namespace amx_tile {

// Palette 1's configuration, LDTILECFG's 64-byte operand.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};  // bytes per row of tile t (t < 8)
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

constexpr size_t kTileRows = 16, kTileBytes = 64;
// Bytes of activations in a row block, which the panels sweep while it
// stays in L2 (at least one tile's rows whatever K).
constexpr size_t kActivationL2Budget = 512 * 1024;

inline void set_tile(TileConfig& c, int t, size_t rows, size_t colsb) {
  c.rows[t] = static_cast<uint8_t>(rows);
  c.colsb[t] = static_cast<uint16_t>(colsb);
}

inline TileOut tile_out(float* y, const float* bias, size_t N, Epilogue e, size_t m, size_t p, size_t np) {
  const size_t col = p * kPanelWidth, left = N - col;
  return TileOut{y + m * N + col, N, left < np * kPanelWidth ? left : np * kPanelWidth, bias ? bias + col : nullptr, e};
}

// The rows from `m0` on of a prepared x, for the vector kernels.
inline PreparedX rows_from(const PreparedX& x, size_t m0, size_t K) {
  PreparedX r = x;
  if (x.q8.q) {
    const size_t Kb = quant_blocks(K);
    r.q8.q = x.q8.q + m0 * Kb * kQuantBlock;
    r.q8.scale = x.q8.scale + m0 * Kb;
    r.q8.sum = x.q8.sum + m0 * Kb;
  }
  if (x.bf16) r.bf16 = x.bf16 + m0 * (K + (K & 1));
  return r;
}

// ---- q8_0 / q4_0 ----------------------------------------------------------

// Tiles of the quantized kernel: two C, two A, two B, one of each per block
// parity.
constexpr int kQC[2] = {0, 1}, kQA[2] = {2, 3}, kQB[2] = {4, 5};

inline TileConfig quant_config() {
  TileConfig c;
  for (int i = 0; i < 2; ++i) {
    set_tile(c, kQC[i], kTileRows, kTileBytes);  // 16 rows x 16 int32
    set_tile(c, kQA[i], kTileRows, kQuantBlock);  // 16 rows x a block's 32 bytes
    set_tile(c, kQB[i], kQuantBlock / 4, kTileBytes);  // 8 groups of 4 k x 16 columns
  }
  return c;
}

// 16 rows of x (from row m) times one panel (its block b's 8 B-tile rows at
// wq(b), its scales in `panel`), all blocks, into the epilogue.
template <class Ops, class Quants>
[[gnu::always_inline]] inline void quant_tile(const QuantizedRows& x, size_t K, size_t m, const uint8_t* panel, WeightType t,
                                              Quants wq, int32_t (&cbuf)[2][kTileRows * 16], const TileOut& o) {
  using F = typename Ops::F;
  const size_t Kb = quant_blocks(K), Kp = Kb * kQuantBlock;
  const int8_t* xa = x.q + m * Kp;
  F acc[kTileRows][1];
#pragma GCC unroll 16
  for (size_t r = 0; r < kTileRows; ++r) acc[r][0] = Ops::set1(0.0f);

  // Block b's integer sums into C tile c and then to cbuf[c].
  auto issue = [&]<int c>(size_t b, std::integral_constant<int, c>) __attribute__((always_inline)) {
    Ops::template zero<kQC[c]>();
    Ops::template load<kQA[c]>(xa + b * kQuantBlock, Kp);
    Ops::template load<kQB[c]>(wq(b), kTileBytes);
    Ops::template dpbssd<kQC[c], kQA[c], kQB[c]>();
    Ops::template store<kQC[c]>(cbuf[c], kTileBytes);
  };
  // acc = fma(float(isum), dw * dx, acc), as the reference, for each row.
  auto scale = [&](size_t b, const int32_t* c) __attribute__((always_inline)) {
    const F dw = Ops::scales(panel + quant_scale_offset(t, b));
    const float* dx = x.scale + m * Kb + b;
#pragma GCC unroll 16
    for (size_t r = 0; r < kTileRows; ++r)
      acc[r][0] = Ops::fma(Ops::cvt(c + r * 16), Ops::mul(dw, Ops::set1(dx[r * Kb])), acc[r][0]);
  };

  issue(0, std::integral_constant<int, 0>{});
  for (size_t b = 0; b < Kb; b += 2) {
    if (b + 1 < Kb) issue(b + 1, std::integral_constant<int, 1>{});
    scale(b, cbuf[0]);
    if (b + 1 < Kb) {
      if (b + 2 < Kb) issue(b + 2, std::integral_constant<int, 0>{});
      scale(b + 1, cbuf[1]);
    }
  }
  Ops::template finish<kTileRows, 1>(acc, o);
}

// Panels [p0, p1) of y[M, N] (+)= act(x W^T + bias) for q8_0 / q4_0 panels.
template <class Ops, bool Q4>
void quant_panels(const PreparedX& px, const void* w, const float* bias, float* y, size_t M, size_t K, size_t N,
                  size_t p0, size_t p1, Epilogue e) {
  if (M == 0 || p0 >= p1) return;
  const size_t tiled = M < Ops::kMinRows ? 0 : M / kTileRows * kTileRows;
  if (tiled < M) Ops::template quant_rows<Q4>(rows_from(px, tiled, K), w, bias, y + tiled * N, M - tiled, K, N, p0, p1, e);
  if (tiled == 0) return;

  constexpr WeightType T = Q4 ? WeightType::Q4_0 : WeightType::Q8_0;
  const QuantizedRows& x = px.q8;
  const size_t Kb = quant_blocks(K), Kp = Kb * kQuantBlock;
  const size_t stride = quant_panel_bytes(T, Kb);
  const auto* wp = static_cast<const uint8_t*>(w);
  alignas(64) int32_t cbuf[2][kTileRows * 16];
  thread_local std::vector<int8_t> unpacked;  // q4_0: one panel's blocks as signed bytes, 512 a block
  if constexpr (Q4)
    if (unpacked.size() < Kb * 512 + 64) unpacked.resize(Kb * 512 + 64);
  int8_t* q4 = Q4 ? reinterpret_cast<int8_t*>((reinterpret_cast<uintptr_t>(unpacked.data()) + 63) & ~uintptr_t(63))
                  : nullptr;

  size_t mc = kActivationL2Budget / (Kp ? Kp : 1) / kTileRows * kTileRows;
  if (mc < kTileRows) mc = kTileRows;
  const TileConfig cfg = quant_config();
  Ops::configure(cfg);
  for (size_t mc0 = 0; mc0 < tiled; mc0 += mc) {
    const size_t mc1 = tiled - mc0 < mc ? tiled : mc0 + mc;
    for (size_t p = p0; p < p1; ++p) {
      const uint8_t* panel = wp + p * stride;
      if constexpr (Q4) {
        for (size_t b = 0; b < Kb; ++b) {
          const uint8_t* src = panel + quant_block_offset(T, b);
          for (size_t c = 0; c < 4; ++c) Ops::unpack_q4(src + c * 64, q4 + b * 512 + 128 * c, q4 + b * 512 + 128 * c + 64);
        }
      }
      auto wq = [&](size_t b) -> const void* {
        if constexpr (Q4)
          return q4 + b * 512;
        else
          return panel + quant_block_offset(T, b);
      };
      for (size_t m = mc0; m < mc1; m += kTileRows)
        quant_tile<Ops>(x, K, m, panel, T, wq, cbuf, tile_out(y, bias, N, e, m, p, 1));
    }
  }
  Ops::release();
}

// ---- bf16 ----------------------------------------------------------------

// Tiles of the bf16 kernel: C[i][j] for row tile i and panel j, A[i], B[j].
constexpr int kBC[2][2] = {{0, 1}, {2, 3}}, kBA[2] = {4, 5}, kBB[2] = {6, 7};
constexpr size_t kPairsPerTile = kTileBytes / 4;  // 16 pairs of k: 32 k

inline TileConfig bf16_config() {
  TileConfig c;
  for (int t = 0; t < 8; ++t) set_tile(c, t, kTileRows, kTileBytes);
  return c;
}

// RT row tiles (16 rows each, from row m; row stride ldx elements) x P
// panels whose B rows are at b[j] (K/2 rows of 32 values), all K.
template <class Ops, size_t RT, size_t P>
[[gnu::always_inline]] inline void bf16_tile(const uint16_t* x, size_t ldx, size_t m, const uint16_t* const (&b)[2],
                                             size_t K, float* cbuf, float* y, const float* bias, size_t N, Epilogue e,
                                             size_t p) {
  using F = typename Ops::F;
  // Tile numbers are template arguments: each (row tile, panel) spelled out.
  auto each_c = [&](auto f) __attribute__((always_inline)) {
    f(std::integral_constant<size_t, 0>{}, std::integral_constant<size_t, 0>{});
    if constexpr (P == 2) f(std::integral_constant<size_t, 0>{}, std::integral_constant<size_t, 1>{});
    if constexpr (RT == 2) f(std::integral_constant<size_t, 1>{}, std::integral_constant<size_t, 0>{});
    if constexpr (RT == 2 && P == 2) f(std::integral_constant<size_t, 1>{}, std::integral_constant<size_t, 1>{});
  };
  each_c([&](auto i, auto j) { Ops::template zero<kBC[i][j]>(); });
  for (size_t kc = 0; kc < K / (2 * kPairsPerTile); ++kc) {
    Ops::template load<kBA[0]>(x + m * ldx + kc * 2 * kPairsPerTile, ldx * 2);
    if constexpr (RT == 2) Ops::template load<kBA[1]>(x + (m + kTileRows) * ldx + kc * 2 * kPairsPerTile, ldx * 2);
    Ops::template load<kBB[0]>(b[0] + kc * kPairsPerTile * 32, kTileBytes);
    if constexpr (P == 2) Ops::template load<kBB[1]>(b[1] + kc * kPairsPerTile * 32, kTileBytes);
    Ops::template dpbf16ps<kBC[0][0], kBA[0], kBB[0]>();
    if constexpr (P == 2) Ops::template dpbf16ps<kBC[0][1], kBA[0], kBB[1]>();
    if constexpr (RT == 2) Ops::template dpbf16ps<kBC[1][0], kBA[1], kBB[0]>();
    if constexpr (RT == 2 && P == 2) Ops::template dpbf16ps<kBC[1][1], kBA[1], kBB[1]>();
  }
  // cbuf: RT * 16 rows of P * 16 floats.
  each_c([&](auto i, auto j) {
    Ops::template store<kBC[i][j]>(cbuf + i * kTileRows * P * 16 + j * 16, P * kTileBytes);
  });
  for (size_t i = 0; i < RT; ++i) {
    F acc[kTileRows][P];
#pragma GCC unroll 16
    for (size_t r = 0; r < kTileRows; ++r)
#pragma GCC unroll 2
      for (size_t j = 0; j < P; ++j) acc[r][j] = Ops::load(cbuf + (i * kTileRows + r) * P * 16 + j * 16);
    Ops::template finish<kTileRows, P>(acc, tile_out(y, bias, N, e, m + i * kTileRows, p, P));
  }
}

// Panels [p0, p1) of y[M, N] (+)= act(x W^T + bias) for bf16 panel pairs,
// x rounded to bf16 (bf16dot_round_rows).
template <class Ops>
void bf16_panels(const PreparedX& px, const void* w, const float* bias, float* y, size_t M, size_t K, size_t N,
                 size_t p0, size_t p1, Epilogue e) {
  if (M == 0 || p0 >= p1) return;
  const size_t tiled = M < Ops::kMinRows || K % (2 * kPairsPerTile) != 0 ? 0 : M / kTileRows * kTileRows;
  if (tiled < M) Ops::bf16_rows(rows_from(px, tiled, K), w, bias, y + tiled * N, M - tiled, K, N, p0, p1, e);
  if (tiled == 0) return;

  const uint16_t* x = px.bf16;  // K even here: rows of K values
  const auto* wp = static_cast<const uint16_t*>(w);
  const size_t pairs = K / 2;
  thread_local std::vector<uint16_t> rows;  // B rows of up to two panels, 32 values each
  if (rows.size() < 2 * pairs * 32 + 32) rows.resize(2 * pairs * 32 + 32);
  uint16_t* base = reinterpret_cast<uint16_t*>((reinterpret_cast<uintptr_t>(rows.data()) + 63) & ~uintptr_t(63));
  const uint16_t* const b[2] = {base, base + pairs * 32};
  alignas(64) float cbuf[2 * kTileRows * 2 * 16];

  size_t mc = kActivationL2Budget / (2 * K) / (2 * kTileRows) * (2 * kTileRows);
  if (mc < 2 * kTileRows) mc = 2 * kTileRows;
  const TileConfig cfg = bf16_config();
  Ops::configure(cfg);
  for (size_t mc0 = 0; mc0 < tiled; mc0 += mc) {
    const size_t mc1 = tiled - mc0 < mc ? tiled : mc0 + mc;
    for (size_t p = p0; p < p1;) {
      // A pair of panels from an even one (as the file pairs them), else one.
      const size_t np = p % 2 == 0 && p + 2 <= p1 ? 2 : 1;
      for (size_t j = 0; j < np; ++j) {
        const PanelSteps st = half_panel_steps(N, K, p + j);
        for (size_t i = 0; i < pairs; ++i) Ops::interleave(wp + st.first + i * st.pitch, base + j * pairs * 32 + i * 32);
      }
      size_t m = mc0;
      if (np == 2) {
        for (; m + 2 * kTileRows <= mc1; m += 2 * kTileRows) bf16_tile<Ops, 2, 2>(x, K, m, b, K, cbuf, y, bias, N, e, p);
        if (m < mc1) bf16_tile<Ops, 1, 2>(x, K, m, b, K, cbuf, y, bias, N, e, p);
      } else {
        for (; m + 2 * kTileRows <= mc1; m += 2 * kTileRows) bf16_tile<Ops, 2, 1>(x, K, m, b, K, cbuf, y, bias, N, e, p);
        if (m < mc1) bf16_tile<Ops, 1, 1>(x, K, m, b, K, cbuf, y, bias, N, e, p);
      }
      p += np;
    }
  }
  Ops::release();
}

// ---- Probes: whether a kernel set gives its reference's bits -------------

// Whether `k` gives the scalar reference's bits for q8_0 and q4_0 on a small
// product that takes tiles: 32 rows and 5 on vectors, 3 panels (the last
// partial), 3 blocks. The integer sums are exact, so a difference is a fault.
inline bool int8_agrees(const MatmulKernels& k) {
  constexpr size_t M = 37, N = 40, K = 96;
  uint32_t state = 54321;
  auto value = [&] {
    state = state * 1664525u + 1013904223u;
    return static_cast<float>(static_cast<int32_t>(state >> 8) % 2001) / 1000.0f;
  };
  std::vector<float> x(M * K), w(N * K);
  for (float& v : x) v = value();
  for (float& v : w) v = value();
  const size_t Kb = quant_blocks(K);
  std::vector<int8_t> q(M * Kb * kQuantBlock);
  std::vector<float> scale(M * Kb);
  std::vector<int32_t> sum(M * Kb);
  scalar_quant_kernels().quantize_rows(x.data(), M, K, q.data(), scale.data(), sum.data());
  PreparedX px;
  px.q8 = QuantizedRows{q.data(), scale.data(), sum.data(), Kb};
  for (WeightType t : {WeightType::Q8_0, WeightType::Q4_0}) {
    std::vector<uint8_t> wp(packed_weight_bytes(t, N, K));
    quantize_panels(w.data(), N, K, t, wp.data());
    std::vector<float> got(M * N), want(M * N);
    const size_t i = static_cast<size_t>(t);
    k.panels[i](px, wp.data(), nullptr, got.data(), M, K, N, 0, panel_count(N), {});
    scalar_quant_kernels().matmul.panels[i](px, wp.data(), nullptr, want.data(), M, K, N, 0, panel_count(N), {});
    if (std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) != 0) return false;
  }
  return true;
}

// Whether `k` gives the TDPBF16PS reference's bits on a product built so
// that another order of its roundings shows (one chain, odd or even element
// first, or each pair summed first give other bits at many outputs).
inline bool bf16_agrees(const MatmulKernels& k) {
  // 32 rows x 2 panels x 64 k (two tile steps, all four C tiles): values of
  // both signs over 2^-20 .. 2^20, and a subnormal weight (DAZ).
  constexpr size_t M = 32, N = 32, K = 64;
  uint32_t state = 12345;
  auto next = [&] { return state = state * 1664525u + 1013904223u; };
  auto value = [&] {
    const uint32_t r = next();
    const int e = static_cast<int>(r % 41) - 20;
    return std::ldexp(1.0f + static_cast<float>((r >> 8) & 0x7f) / 128.0f, e) * ((r >> 16) & 1 ? -1.0f : 1.0f);
  };
  std::vector<float> x(M * K), w(N * K);
  for (float& v : x) v = value();
  for (float& v : w) v = value();
  w[5] = std::bit_cast<float>(0x00010000u);
  std::vector<uint16_t> xr(M * K), wp(panel_floats(N, K));
  bf16dot_round_rows(x.data(), M, K, xr.data());
  pack_half_panels(w.data(), N, K, WeightType::BF16, wp.data());
  PreparedX px;
  px.bf16 = xr.data();
  std::vector<float> got(M * N), want(M * N);
  const size_t t = static_cast<size_t>(WeightType::BF16);
  k.panels[t](px, wp.data(), nullptr, got.data(), M, K, N, 0, panel_count(N), {});
  scalar_tdpbf16ps_kernels().panels[t](px, wp.data(), nullptr, want.data(), M, K, N, 0, panel_count(N), {});
  return std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0;
}

}  // namespace amx_tile
}  // namespace
}  // namespace mmgpt::kernels::detail
