#pragma once
// The block-quantized matmul (q8_0 / q4_0 weights x q8 activations), written
// once over an instruction set's integer dot-product operations (`Ops`):
// x86/avx2/quant.cpp gives them with VPMADDUBSW, x86/avx512/quant_vnni.cpp
// with VPDPBUSD, and tests/quant_tile_emulated.hpp with plain C++ lanes, so
// the blockings below are tested on every host.
//
// One design for every M: a tile is R rows of activations x P consecutive
// panels, over all K, block by block. Decode and small batches (M <= kMR) are
// a single row tile that streams the weights once, panel by panel in memory
// order, each line prefetched under the decode hint (decode_prefetch.hpp);
// prefill takes L2-sized row blocks of activations and sweeps each group of
// kNP panels over them in kMR-row tiles.
//
// Panel layout (quant_layout.hpp): 64 bytes of quants hold 4 (q8_0) or 8
// (q4_0) consecutive k of the panel's 16 rows, row j in 32-bit lane j; a
// vector of Ops::kLanes int32 lanes covers kLanes of those rows, so a panel is
// kVectorsPerPanel vectors a line.
//
// Numerics, per output and block b, exactly the scalar reference's
// (scalar/quant.cpp): the integer dot product of the block's 32 weight and 32
// activation quants is exact in int32 whatever order the Ops sum it in; its
// float is exact (|isum| < 2^24), f16 -> f32 of the scale is exact, dw * dx is
// rounded to f32, and acc = fma(float(isum), dw * dx, acc) once per block in
// block order. So without an activation every result is the reference's bit
// for bit, whatever the tile, blocking or thread split. The epilogue (bias,
// GELU through quant_gelu, accumulate) is Ops::finish.
//
// What an Ops provides (all static):
//   F, kLanes, kVectorsPerPanel, kMR, kNP       f32 vector, geometry, tiles
//   kPrefetchScalesLast<Q4>                     decode: prefetch a unit's scales after
//                                               its block's quants, not before
//   load<Q4, V>(p) -> W                         a weight vector, prepared
//   bcast<Q4, V, R>(xq) -> X                    the row's activation bytes of a line
//   begin<Q4, V>(sum_x) -> A                    a block accumulator
//   step<Q4, V>(A&, W, X)                       one 64-byte line
//   end<Q4, V>(A, sum_x) -> int32 vector        the block's exact isum
//   scales(p) -> F                              kLanes f16 scales widened
//   mul, set1, cvt, fma                         f32 arithmetic
//   finish<R, C>(F (&)[R][C], TileOut)          the epilogue
// V (vectors per row of the tile) and R let an ISA choose per tile shape.
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "core/panel_layout.hpp"
#include "core/quant_layout.hpp"
#include "kernels/decode_prefetch.hpp"
#include "kernels/epilogue.hpp"

namespace mmgpt::kernels::detail {
namespace {
namespace quant_tile {

struct Panels {
  const uint8_t* w;  // first panel of the tile
  size_t stride;     // bytes between panels (a panel is one stream: quants and scales)
  size_t Kb;
};

// Calls f(std::integral_constant<size_t, rows>{}) for 1 <= rows <= MR.
template <size_t MR, class F>
[[gnu::always_inline]] inline void with_rows(size_t rows, F&& f) {
  if constexpr (MR > 1)
    if (rows < MR) return with_rows<MR - 1>(rows, std::forward<F>(f));
  f(std::integral_constant<size_t, MR>{});
}

// R rows (from row m of x) against P consecutive panels, all K; Q4 selects
// q4_0. Ahead::Decode prefetches each line under the decode hint H.
template <class Ops, bool Q4, size_t R, size_t P, Ahead Prefetch, DecodePrefetch H = DecodePrefetch::Nta>
[[gnu::always_inline]] inline void tile(const QuantizedRows& x, size_t m, const Panels& pn, const TileOut& o) {
  using F = typename Ops::F;
  constexpr size_t VP = Ops::kVectorsPerPanel, V = P * VP, kVectorBytes = 64 / VP;
  static_assert(Ops::kLanes * VP == kPanelWidth, "a panel line is kVectorsPerPanel vectors of kLanes rows");
  constexpr WeightType T = Q4 ? WeightType::Q4_0 : WeightType::Q8_0;
  constexpr size_t kLines = Q4 ? 4 : 8;                 // 64-byte lines of quants per block
  constexpr size_t kLineK = Q4 ? 8 : 4;                 // k per line
  constexpr size_t kScaleBytes = 2 * kPanelWidth / VP;  // the f16 scales of one vector's rows
  const size_t Kb = pn.Kb, Kp = Kb * kQuantBlock;

  // The line of scales of each unit (two blocks) is part of the stream too.
  auto prefetch_scales = [&](size_t b, size_t soff) __attribute__((always_inline)) {
    if (b % 2 == 0)
#pragma GCC unroll 4
      for (size_t j = 0; j < P; ++j) prefetch_decode<H>(pn.w + j * pn.stride, soff);
  };

  F acc[R][V];
#pragma GCC unroll 8
  for (size_t i = 0; i < R; ++i)
#pragma GCC unroll 8
    for (size_t v = 0; v < V; ++v) acc[i][v] = Ops::set1(0.0f);

  for (size_t b = 0; b < Kb; ++b) {
    const size_t qoff = quant_block_offset(T, b), soff = quant_scale_offset(T, b);
    const uint8_t* wb = pn.w + qoff;
    if constexpr (Prefetch == Ahead::Decode && !Ops::template kPrefetchScalesLast<Q4>) prefetch_scales(b, soff);
    using A = decltype(Ops::template begin<Q4, V>(0));
    A isum[R][V];
#pragma GCC unroll 8
    for (size_t i = 0; i < R; ++i)
#pragma GCC unroll 8
      for (size_t v = 0; v < V; ++v) isum[i][v] = Ops::template begin<Q4, V>(x.sum[(m + i) * Kb + b]);
#pragma GCC unroll 8
    for (size_t l = 0; l < kLines; ++l) {
      using W = decltype(Ops::template load<Q4, V>(nullptr));
      W w[V];
#pragma GCC unroll 8
      for (size_t v = 0; v < V; ++v) {
        const size_t j = v / VP;
        if constexpr (Prefetch == Ahead::Decode)
          if (v % VP == 0) prefetch_decode<H>(pn.w + j * pn.stride, qoff + l * 64);
        w[v] = Ops::template load<Q4, V>(wb + j * pn.stride + l * 64 + (v % VP) * kVectorBytes);
      }
#pragma GCC unroll 8
      for (size_t i = 0; i < R; ++i) {
        const auto xb = Ops::template bcast<Q4, V, R>(x.q + (m + i) * Kp + b * kQuantBlock + l * kLineK);
#pragma GCC unroll 8
        for (size_t v = 0; v < V; ++v) Ops::template step<Q4, V>(isum[i][v], w[v], xb);
      }
    }
    if constexpr (Prefetch == Ahead::Decode && Ops::template kPrefetchScalesLast<Q4>) {
      prefetch_scales(b, soff);
    }
    // acc = fma(float(isum), dw * dx, acc), as the reference.
#pragma GCC unroll 8
    for (size_t v = 0; v < V; ++v) {
      const F dw = Ops::scales(pn.w + (v / VP) * pn.stride + soff + (v % VP) * kScaleBytes);
#pragma GCC unroll 8
      for (size_t i = 0; i < R; ++i) {
        const F d = Ops::mul(dw, Ops::set1(x.scale[(m + i) * Kb + b]));
        acc[i][v] = Ops::fma(Ops::cvt(Ops::template end<Q4, V>(isum[i][v], x.sum[(m + i) * Kb + b])), d, acc[i][v]);
      }
    }
  }
  Ops::template finish<R, V>(acc, o);
}

// Panels [p0, p1) of y[M, N] (+)= act(x W^T + bias) for q8_0 / q4_0 panels wp.
template <class Ops, bool Q4>
void gemm_panels(const QuantizedRows& x, const uint8_t* wp, const float* bias, float* y, size_t M, size_t K, size_t N,
                 size_t p0, size_t p1, Epilogue e) {
  constexpr size_t MR = Ops::kMR, NP = Ops::kNP;
  if (M == 0 || p0 >= p1) return;
  const size_t Kb = quant_blocks(K);
  const size_t stride = quant_panel_bytes(Q4 ? WeightType::Q4_0 : WeightType::Q8_0, Kb);
  auto panels = [&](size_t p) { return Panels{wp + p * stride, stride, Kb}; };
  auto out = [&](size_t m, size_t p, size_t np) {
    const size_t col = p * kPanelWidth, left = N - col;
    return TileOut{y + m * N + col, N, left < np * kPanelWidth ? left : np * kPanelWidth, bias ? bias + col : nullptr,
                   e};
  };

  // Decode and small batches: a single row tile reads the weights once, as one stream.
  if (M <= MR) {
    with_decode_hint([&](auto hint) {
      constexpr DecodePrefetch H = decltype(hint)::value;
      with_rows<MR>(M, [&](auto rows) {
        for (size_t p = p0; p < p1; ++p)
          tile<Ops, Q4, decltype(rows)::value, 1, Ahead::Decode, H>(x, 0, panels(p), out(0, p, 1));
      });
    });
    return;
  }

  // Prefill: row blocks of activations that fit L2; within one, each group of
  // NP panels (L1/L2-resident) sweeps all its rows in MR-row tiles.
  constexpr size_t kActivationL2Budget = 256 * 1024;
  const size_t Kp = Kb * kQuantBlock;
  size_t mc = kActivationL2Budget / (Kp ? Kp : 1) / MR * MR;
  if (mc < MR) mc = MR;
  for (size_t mc0 = 0; mc0 < M; mc0 += mc) {
    const size_t mc1 = M - mc0 < mc ? M : mc0 + mc;
    for (size_t p = p0; p < p1;) {
      const size_t np = p + NP <= p1 ? NP : 1;
      for (size_t m = mc0; m < mc1;) {
        const size_t rows = mc1 - m < MR ? mc1 - m : MR;
        with_rows<MR>(rows, [&](auto r) {
          constexpr size_t R = decltype(r)::value;
          if (np == NP)
            tile<Ops, Q4, R, NP, Ahead::None>(x, m, panels(p), out(m, p, NP));
          else if constexpr (NP > 1)
            tile<Ops, Q4, R, 1, Ahead::None>(x, m, panels(p), out(m, p, 1));
        });
        m += rows;
      }
      p += np;
    }
  }
}

}  // namespace quant_tile
}  // namespace
}  // namespace mmgpt::kernels::detail
