#pragma once
// The matmul over panel-packed weights (panel_layout.hpp), written once
// against xsimd and instantiated per ISA through kernels_simd.hpp. Include
// only from there: everything here is compiled for the TU's ISA.
//
// Microkernel: MR rows of x against P panels (16P output columns). Per
// k-step it loads 16P floats of W (P cache lines), broadcasts one x value per
// row, and does MR x (16P / W) FMAs into register accumulators:
//   AVX2 (W = 8):     MR = 6, P = 1: 12 accumulators of 16 registers;
//   AVX-512 (W = 16): MR = 6, P = 2: 12 of 32 (8 rows over f32 panels, kGemmMR: 16);
//   NEON (W = 4):     MR = 6, P = 1: 24 of 32.
// Decode (M = 1) uses MR = 1 over one f32 panel or one pair of 16-bit panels
// at a time, which lie in one run of memory, prefetched ahead as
// decode_prefetch.hpp describes (1 to 8 accumulators, as the vector width
// gives). f32 batches of 2 to 16 rows read the weights the same way, every
// row against each panel in one pass on AVX-512 (run_batch).
//
// Numerics: every output is acc = fma(x[k], w[k], acc) for k = 0 .. K-1 from
// acc = 0, then the epilogue (epilogue.hpp), whatever the tile or thread it
// lands in. So a row's result does not depend on M (decode equals
// prefill equals a batch) nor on the number of threads.
//
// Weight types (template parameter WT): f32 panels are loaded as they are;
// bf16 and f16 panels hold the same k-steps in 2 bytes, their lines
// alternating between the two panels of a pair (panel_layout.hpp), and each
// vector of weights is widened to f32 in registers right after its load
// (widen_simd.hpp). Widening is exact, so a 16-bit matrix gives bit for bit
// the result of the f32 kernel on its widened values. In a GEMM of three
// tiles of rows or more, a tile's panels are widened once into f32 panels
// that every tile of rows then reads as the f32 GEMM reads its panels
// (micro_block): widening in the tile costs two more uops on the FMA ports
// for every 12 FMAs (bf16: VPMOVZXWD + VPSLLD; f16: VCVTPH2PS is two on Intel).
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include <xsimd/xsimd.hpp>

#include "core/panel_layout.hpp"
#include "kernels/decode_prefetch.hpp"
#include "kernels/epilogue.hpp"
#include "kernels/simd/widen_simd.hpp"

// The microkernels are flattened on their own and called, not inlined, from
// the flattened entries (kernels_simd.hpp, MMGPT_SIMD_ENTRY): a symbol of
// PanelGemm<Arch, ...> belongs to this ISA alone, and each tile shape is
// compiled once instead of at every call site.
#define MMGPT_SIMD_LEAF [[gnu::flatten, gnu::noinline]]

namespace mmgpt::kernels::simd {

// Act supplies the vector GELUs (so gemm and the elementwise kernels share them).
template <class Arch, class Act, class WT = WeightF32>
struct PanelGemm {
  using B = xsimd::batch<float, Arch>;
  using WE = typename WT::E;
  static constexpr size_t W = B::size;
  static constexpr size_t VP = kPanelWidth / W;  // vectors per panel k-step
  static constexpr size_t MR = 6;
  static constexpr size_t P = W == 16 ? 2 : 1;  // panels per GEMM tile
  // Rows of a GEMM tile over f32 panels (micro_block): 8 x 2 panels on
  // AVX-512 (16 accumulators; two lines of weights per 16 FMAs), MR elsewhere.
  static constexpr size_t kGemmMR = W == 16 ? 8 : MR;
  // Small batches stream as decode does (run(), below): 16-bit weights
  // where a GEMM tile is a pair of panels too.
  static constexpr bool kStreamBatches = sizeof(WE) == 2 && P == 2;
  // 16-bit weights from this many rows (three tiles): each block widened
  // once for all tiles (run_widened). The buffer pays off only when enough
  // tiles of rows share it; fewer rows widen in every tile (docs/kernels.md,
  // "The GEMM: blocking and microkernels").
  static constexpr size_t kWidenMinRows = 3 * MR;
  // f32 batches of 2 .. kBatchMaxRows rows (batched decode) read their
  // weights once, from memory under the decode prefetch (run_batch).
  static constexpr size_t kBatchMaxRows = 16;
  // Where a panel's k-step is more than one vector (AVX2, NEON): k-steps a
  // block, which every tile of rows multiplies while it is in L1.
  static constexpr size_t kBatchKSteps = 64;
  static_assert(kPanelWidth % W == 0, "a panel row must be whole vectors");

  using Out = detail::TileOut;

  static B activate(B v, Activation a) {
    switch (a) {
      case Activation::GeluErf: return Act::gelu_erf_vec(v);
      case Activation::GeluTanh: return Act::gelu_tanh_vec(v);
      case Activation::ReluSquared: {
        const B r = xsimd::max(v, B(0.0f));
        return r * r;
      }
      case Activation::None: break;
    }
    return v;
  }

  // The epilogue, once per tile: out of line, so the flattened microkernels
  // (one per row count, hint and weight type) share one copy per tile shape.
  template <size_t R, size_t NP>
  [[gnu::noinline]] static void finish(B (&acc)[R][NP * VP], const Out& o) {
    constexpr size_t V = NP * VP;
    constexpr size_t C = NP * kPanelWidth;
    if (o.ncols == C) {
#pragma GCC unroll 8
      for (size_t i = 0; i < R; ++i) {
        float* dst = o.y + i * o.ldy;
#pragma GCC unroll 8
        for (size_t j = 0; j < V; ++j) {
          B v = acc[i][j];
          if (o.bias) v = v + B::load_unaligned(o.bias + j * W);
          v = activate(v, o.e.act);
          if (o.e.accumulate) v = B::load_unaligned(dst + j * W) + v;
          v.store_unaligned(dst + j * W);
        }
      }
      return;
    }
    // Partial tile (the last panel of a matrix whose N is not a multiple
    // of 16): the same vector arithmetic on padded copies, then only the
    // valid columns are written.
    alignas(64) float bias_pad[C], row[C], prev[C];
    for (size_t c = 0; c < C; ++c) bias_pad[c] = o.bias && c < o.ncols ? o.bias[c] : 0.0f;
    for (size_t i = 0; i < R; ++i) {
      float* dst = o.y + i * o.ldy;
      for (size_t c = 0; c < C; ++c) prev[c] = o.e.accumulate && c < o.ncols ? dst[c] : 0.0f;
      for (size_t j = 0; j < V; ++j) {
        B v = acc[i][j];
        if (o.bias) v = v + B::load_aligned(bias_pad + j * W);
        v = activate(v, o.e.act);
        if (o.e.accumulate) v = B::load_aligned(prev + j * W) + v;
        v.store_aligned(row + j * W);
      }
      for (size_t c = 0; c < o.ncols; ++c) dst[c] = row[c];
    }
  }

  // acc[i][.] += x[i][k] * the k-step of each panel at w[p], whose weights
  // are of type LT (WT, or f32 for panels already widened): the one k-step
  // of every microkernel.
  template <class LT, size_t R, size_t NP>
  [[gnu::always_inline]] static void kstep(B (&acc)[R][NP * VP], const float* x, size_t ldx, size_t k,
                                           const typename LT::E* const (&w)[NP]) {
    B wv[NP * VP];
#pragma GCC unroll 8
    for (size_t p = 0; p < NP; ++p)
#pragma GCC unroll 8
      for (size_t v = 0; v < VP; ++v) wv[p * VP + v] = load_weights<LT, B>(w[p] + v * W);
#pragma GCC unroll 16
    for (size_t i = 0; i < R; ++i) {
      const B xb(x[i * ldx + k]);
#pragma GCC unroll 8
      for (size_t j = 0; j < NP * VP; ++j) acc[i][j] = xsimd::fma(xb, wv[j], acc[i][j]);
    }
  }

  // f(std::integral_constant<size_t, rows>{}), for 1 <= rows <= Max: a tile's
  // row count as a template argument.
  template <size_t Max, size_t R = 1, class F>
  [[gnu::always_inline]] static void with_rows(size_t rows, F&& f) {
    if constexpr (R <= Max) {
      if (rows == R) return f(std::integral_constant<size_t, R>{});
      with_rows<Max, R + 1>(rows, f);
    }
  }

  // R rows of x (row stride ldx) against panels p .. p + NP - 1 of the
  // packed W[N, K] at wp: accumulators from zero over k = 0 .. K-1, then the
  // epilogue to o. The k-steps go two at a time, a line of 16-bit weights
  // (two of f32). Decode: the NP panels are one memory stream (one panel, or
  // a 16-bit pair), each line prefetched kDecodeAheadBytes ahead with hint H
  // (decode_prefetch.hpp).
  template <size_t R, size_t NP, bool Decode, DecodePrefetch H = DecodePrefetch::Nta>
  MMGPT_SIMD_LEAF static void micro(const float* x, size_t ldx, const WE* wp, size_t N, size_t K, size_t p,
                                    const Out& o) {
    constexpr size_t V = NP * VP;
    B acc[R][V];
#pragma GCC unroll 8
    for (size_t i = 0; i < R; ++i)
#pragma GCC unroll 8
      for (size_t j = 0; j < V; ++j) acc[i][j] = B(0.0f);

    PanelSteps st[NP];
    const WE* line[NP];
#pragma GCC unroll 8
    for (size_t j = 0; j < NP; ++j) {
      st[j] = panel_steps_of<WE>(N, K, p + j);  // panel_layout.hpp
      line[j] = wp + st[j].first;
    }
    size_t k = 0;
    for (; k + 2 <= K; k += 2) {  // k even and k + 1 < K: both in the paired lines (panel_layout.hpp)
      const WE* odd[NP];
#pragma GCC unroll 8
      for (size_t j = 0; j < NP; ++j) {
        if constexpr (Decode)
#pragma GCC unroll 2
          for (size_t b = 0; b < 2 * kPanelWidth * sizeof(WE); b += 64) detail::prefetch_decode<H>(line[j], b);
        odd[j] = line[j] + kPanelWidth;
      }
      kstep<WT, R, NP>(acc, x, ldx, k, line);
      kstep<WT, R, NP>(acc, x, ldx, k + 1, odd);
#pragma GCC unroll 8
      for (size_t j = 0; j < NP; ++j) line[j] += st[j].pitch;
    }
    if (k < K) {  // the last k-step of an odd K
      const WE* at[NP];
#pragma GCC unroll 8
      for (size_t j = 0; j < NP; ++j) at[j] = wp + st[j].at(K, k);
      kstep<WT, R, NP>(acc, x, ldx, k, at);
    }
    finish<R, NP>(acc, o);
  }

  // NP panels from p, widened into `wide` as NP f32 panels of K k-steps:
  // panel j's k-step k at wide + (j * K + k) * 16, as micro_block reads them.
  template <size_t NP>
  MMGPT_SIMD_LEAF static void widen_panels(const WE* wp, size_t N, size_t K, size_t p, float* wide) {
    PanelSteps st[NP];
#pragma GCC unroll 8
    for (size_t j = 0; j < NP; ++j) st[j] = panel_steps_of<WE>(N, K, p + j);
    for (size_t k = 0; k < K; ++k)
#pragma GCC unroll 8
      for (size_t j = 0; j < NP; ++j) {
        const WE* at = wp + st[j].at(K, k);
        float* to = wide + (j * K + k) * kPanelWidth;
#pragma GCC unroll 8
        for (size_t v = 0; v < VP; ++v) load_weights<WT, B>(at + v * W).store_aligned(to + v * W);
      }
  }

  // micro over f32 panels whose k-steps follow one another, 16 floats each:
  // panel j's k-step k at w + j * pstride + (k - k0) * 16. An f32 matrix's
  // panels are so (panel_layout.hpp: its paired lines are consecutive
  // k-steps), and so are those widen_panels and widen_block wrote. One
  // k-step an iteration from one pointer a panel: the same FMAs in the same
  // order as micro, so the same bits. The loop of the f32 GEMM, of widened
  // 16-bit weights and of batched decode.
  //
  // Over k-steps k0 .. k1 - 1: the accumulators start from zero at k0 == 0,
  // else from the partial sums in part (R rows of NP * 16 floats), and go
  // back there unless k1 == K, where the epilogue writes them to o. No
  // part: all of k = 0 .. K-1 (k0 == 0, k1 == K). A float
  // stored and reloaded is the same float, so every output is still one FMA
  // chain over k = 0 .. K-1 from zero. Ahead::Decode: the tile that reads
  // the panels from memory prefetches its lines as decode does.
  template <size_t R, size_t NP, detail::Ahead A = detail::Ahead::None, DecodePrefetch H = DecodePrefetch::None>
  MMGPT_SIMD_LEAF static void micro_block(const float* x, size_t ldx, const float* w, size_t pstride, size_t k0,
                                          size_t k1, size_t K, float* part, const Out& o) {
    constexpr size_t V = NP * VP;
    B acc[R][V];
#pragma GCC unroll 16
    for (size_t i = 0; i < R; ++i)
#pragma GCC unroll 8
      for (size_t j = 0; j < V; ++j) acc[i][j] = !part || k0 == 0 ? B(0.0f) : B::load_aligned(part + (i * V + j) * W);
    const float* at[NP];
#pragma GCC unroll 8
    for (size_t p = 0; p < NP; ++p) at[p] = w + p * pstride;
    for (size_t k = k0; k < k1; ++k) {
#pragma GCC unroll 8
      for (size_t p = 0; p < NP; ++p)
        if constexpr (A == detail::Ahead::Decode) detail::prefetch_decode<H>(at[p]);
      kstep<WeightF32, R, NP>(acc, x, ldx, k, at);
#pragma GCC unroll 8
      for (size_t p = 0; p < NP; ++p) at[p] += kPanelWidth;
    }
    if (!part || k1 == K) return finish<R, NP>(acc, o);
#pragma GCC unroll 16
    for (size_t i = 0; i < R; ++i)
#pragma GCC unroll 8
      for (size_t j = 0; j < V; ++j) acc[i][j].store_aligned(part + (i * V + j) * W);
  }

  // micro_block over all K k-steps, R = rows (1 .. Max).
  template <size_t Max, size_t NP, detail::Ahead A = detail::Ahead::None, DecodePrefetch H = DecodePrefetch::None>
  static void micro_linear_rows(size_t rows, const float* x, size_t ldx, const float* w, size_t pstride, size_t K,
                                const Out& o) {
    with_rows<Max>(rows, [&](auto r) { micro_block<r, NP, A, H>(x, ldx, w, pstride, 0, K, K, nullptr, o); });
  }

  // k-steps k0 .. k1 - 1 of NP 16-bit panels from p, widened into `wide`
  // as NP f32 panels of kBatchKSteps k-steps (panel j's k-step k at wide +
  // (j * kBatchKSteps + k - k0) * 16), each source line prefetched ahead as
  // decode prefetches it (NP = 2: a pair's lines are one stream).
  template <size_t NP, DecodePrefetch H>
  MMGPT_SIMD_LEAF static void widen_block(const WE* wp, size_t N, size_t K, size_t p, size_t k0, size_t k1,
                                          float* wide) {
    PanelSteps st[NP];
#pragma GCC unroll 8
    for (size_t j = 0; j < NP; ++j) st[j] = panel_steps_of<WE>(N, K, p + j);
    for (size_t k = k0; k < k1; ++k)
#pragma GCC unroll 8
      for (size_t j = 0; j < NP; ++j) {
        const WE* at = wp + st[j].at(K, k);
        if (k % 2 == 0) detail::prefetch_decode<H>(at);
        float* to = wide + (j * kBatchKSteps + k - k0) * kPanelWidth;
#pragma GCC unroll 8
        for (size_t v = 0; v < VP; ++v) load_weights<WT, B>(at + v * W).store_aligned(to + v * W);
      }
  }

  template <size_t NP, bool Decode = false, DecodePrefetch H = DecodePrefetch::Nta>
  static void micro_rows(size_t rows, const float* x, size_t ldx, const WE* wp, size_t N, size_t K, size_t p,
                         const Out& o) {
    with_rows<MR>(rows, [&](auto r) { micro<r, NP, Decode, H>(x, ldx, wp, N, K, p, o); });
  }

  // run() for 16-bit weights and kWidenMinRows rows or more: each tile's
  // panels widened once (widen_panels) into f32 panels that the f32 GEMM's
  // loop (micro_block) multiplies for every tile of rows. Not inlined into
  // run(): GCC's inlining of the whole GEMM shifts with any change to it, so
  // this path stays out of line and leaves the code of the decode and f32
  // paths in run() as it is.
  [[gnu::noinline]] static void run_widened(const float* x, const WE* wp, const float* bias, float* y, size_t M,
                                            size_t K, size_t N, size_t p0, size_t p1, Epilogue e) {
    // One buffer per thread, kept between calls: K * 16P floats.
    thread_local std::vector<float, xsimd::aligned_allocator<float, 64>> wide;
    if (wide.size() < K * P * kPanelWidth) wide.resize(K * P * kPanelWidth);
    for (size_t p = p0; p < p1;) {
      const size_t np = p + P <= p1 ? P : 1;
      np == P ? widen_panels<P>(wp, N, K, p, wide.data()) : widen_panels<1>(wp, N, K, p, wide.data());
      for (size_t m = 0; m < M;) {
        const size_t rows = M - m < kGemmMR ? M - m : kGemmMR;
        np == P ? micro_linear_rows<kGemmMR, P>(rows, x + m * K, K, wide.data(), K * kPanelWidth, K,
                                       tile_out(y, bias, e, N, m, p, P))
                : micro_linear_rows<kGemmMR, 1>(rows, x + m * K, K, wide.data(), K * kPanelWidth, K,
                                       tile_out(y, bias, e, N, m, p, 1));
        m += rows;
      }
      p += np;
    }
  }

  // run() for f32 weights and 2 .. kBatchMaxRows rows (batched decode),
  // which is bound by the weights' bandwidth at a few rows and by the FMAs
  // at more: the weights stream from memory once, as decode streams them,
  // so that both stay busy. On AVX-512 all the rows take one pass over each
  // panel (micro_block over all K: an FMA a row per load of weights);
  // elsewhere a panel goes block by block of k-steps, which every tile of
  // rows multiplies while it is in L1 (micro_block, partial sums kept).
  [[gnu::noinline]] static void run_batch(const float* x, const float* wp, const float* bias, float* y, size_t M,
                                          size_t K, size_t N, size_t p0, size_t p1, Epilogue e) {
    detail::with_decode_hint([&](auto hint) {
      constexpr DecodePrefetch H = decltype(hint)::value;
      if constexpr (VP == 1) {
        for (size_t p = p0; p < p1; ++p)
          micro_linear_rows<kBatchMaxRows, 1, detail::Ahead::Decode, H>(M, x, K, wp + p * kPanelWidth * K, 0, K,
                                                                          tile_out(y, bias, e, N, 0, p, 1));
      } else {
        static_assert(P == 1, "a GEMM tile is one panel where a k-step is several vectors");
        alignas(64) float part[kBatchMaxRows * kPanelWidth];
        for (size_t p = p0; p < p1; ++p) {
          const float* w = wp + p * kPanelWidth * K;
          for (size_t k0 = 0;; k0 += kBatchKSteps) {
            const size_t k1 = K - k0 <= kBatchKSteps ? K : k0 + kBatchKSteps;
            for (size_t m = 0; m < M;) {
              const size_t rows = M - m < kGemmMR ? M - m : kGemmMR;
              const Out o = tile_out(y, bias, e, N, m, p, 1);
              float* pt = part + m * kPanelWidth;
              with_rows<kGemmMR>(rows, [&](auto r) {
                if (m == 0)
                  micro_block<r, 1, detail::Ahead::Decode, H>(x, K, w + k0 * kPanelWidth, 0, k0, k1, K, pt, o);
                else
                  micro_block<r, 1>(x + m * K, K, w + k0 * kPanelWidth, 0, k0, k1, K, pt, o);
              });
              m += rows;
            }
            if (k1 == K) break;
          }
        }
      }
    });
  }

  // run() for 16-bit weights on AVX-512 between the streamed small batches
  // and run_widened (MR < M < kWidenMinRows): a pair's lines stream from
  // memory once, as decode reads them, a block of kBatchKSteps k-steps at a
  // time widened into an f32 block in L1, which every tile of kGemmMR rows
  // then multiplies (micro_block, partial sums kept between blocks).
  [[gnu::noinline]] static void run_batch_widened(const float* x, const WE* wp, const float* bias, float* y, size_t M,
                                                  size_t K, size_t N, size_t p0, size_t p1, Epilogue e) {
    alignas(64) float wide[P * kBatchKSteps * kPanelWidth];
    alignas(64) float part[kWidenMinRows * P * kPanelWidth];
    detail::with_decode_hint([&](auto hint) {
      constexpr DecodePrefetch H = decltype(hint)::value;
      auto panels = [&]<size_t NP>(size_t p) {
        for (size_t k0 = 0;; k0 += kBatchKSteps) {
          const size_t k1 = K - k0 <= kBatchKSteps ? K : k0 + kBatchKSteps;
          widen_block<NP, H>(wp, N, K, p, k0, k1, wide);
          for (size_t m = 0; m < M;) {
            const size_t rows = M - m < kGemmMR ? M - m : kGemmMR;
            with_rows<kGemmMR>(rows, [&](auto r) {
              micro_block<r, NP>(x + m * K, K, wide, kBatchKSteps * kPanelWidth, k0, k1, K,
                                 part + m * NP * kPanelWidth, tile_out(y, bias, e, N, m, p, NP));
            });
            m += rows;
          }
          if (k1 == K) break;
        }
      };
      for_panel_pairs(
          p0, p1, [&](size_t p) { panels.template operator()<1>(p); },
          [&](size_t p) { panels.template operator()<2>(p); });
    });
  }

  // Where a tile of rows m.. and np panels from p writes its outputs.
  static Out tile_out(float* y, const float* bias, Epilogue e, size_t N, size_t m, size_t p, size_t np) {
    const size_t col = p * kPanelWidth;
    const size_t left = N - col;
    return Out{y + m * N + col, N, left < np * kPanelWidth ? left : np * kPanelWidth, bias ? bias + col : nullptr, e};
  }

  // Output columns of panels [p0, p1): y[M, N] (+)= act(x[M, K] W^T + bias).
  static void run(const float* x, const WE* wp, const float* bias, float* y, size_t M, size_t K, size_t N, size_t p0,
                  size_t p1, Epilogue e) {
    if (M == 0 || p0 >= p1) return;
    auto out = [&](size_t m, size_t p, size_t np) { return tile_out(y, bias, e, N, m, p, np); };
    // Decode: one memory stream at a time, one panel, or a pair of 16-bit
    // panels (two accumulator chains: one would not keep up with two
    // dependent FMAs a line). A range that starts at an odd panel (a
    // thread's share) takes that one alone (for_panel_pairs). Small
    // batches of 16-bit weights on AVX-512 (where a GEMM tile is a pair
    // too, P == 2) stream the same way, under the decode hint: their rows
    // fit one tile, so each line is read from memory once. Larger batches
    // stream too, f32 up to kBatchMaxRows rows (run_batch) and 16-bit below
    // kWidenMinRows (run_batch_widened), so that a batch reads its weights
    // once rather than once per tile of rows (docs/kernels.md, "Small
    // batches stream like decode").
    if (M == 1 || (kStreamBatches && M <= MR)) {
      detail::with_decode_hint([&](auto hint) {
        constexpr DecodePrefetch H = decltype(hint)::value;
        auto stream = [&]<size_t NP>(size_t p) {
          if constexpr (kStreamBatches)
            micro_rows<NP, true, H>(M, x, K, wp, N, K, p, out(0, p, NP));
          else  // M == 1
            micro<1, NP, true, H>(x, K, wp, N, K, p, out(0, p, NP));
        };
        auto one = [&](size_t p) { stream.template operator()<1>(p); };
        if constexpr (sizeof(WE) == 2)
          for_panel_pairs(p0, p1, one, [&](size_t p) { stream.template operator()<2>(p); });
        else
          for (size_t p = p0; p < p1; ++p) one(p);
      });
      return;
    }

    if constexpr (sizeof(WE) == 4)
      if (M <= kBatchMaxRows) return run_batch(x, wp, bias, y, M, K, N, p0, p1, e);
    if constexpr (kStreamBatches)
      if (M < kWidenMinRows) return run_batch_widened(x, wp, bias, y, M, K, N, p0, p1, e);
    if constexpr (sizeof(WE) == 2)
      if (M >= kWidenMinRows) return run_widened(x, wp, bias, y, M, K, N, p0, p1, e);
    // A tile's panels (K k-steps of 16P floats) stay in L2 while every tile
    // of rows streams its rows of x past them.
    for (size_t p = p0; p < p1;) {
      const size_t np = p + P <= p1 ? P : 1;
      for (size_t m = 0; m < M;) {
        // micro_block's tiles for f32, micro's (MR rows) for 16-bit weights widened in the tile.
        const size_t mr = sizeof(WE) == 4 ? kGemmMR : MR;
        const size_t rows = M - m < mr ? M - m : mr;
        if constexpr (sizeof(WE) == 4) {  // f32 panels: consecutive k-steps (micro_block)
          const float* w = wp + p * kPanelWidth * K;
          np == P ? micro_linear_rows<kGemmMR, P>(rows, x + m * K, K, w, kPanelWidth * K, K, out(m, p, P))
                  : micro_linear_rows<kGemmMR, 1>(rows, x + m * K, K, w, kPanelWidth * K, K, out(m, p, 1));
        } else {
          np == P ? micro_rows<P>(rows, x + m * K, K, wp, N, K, p, out(m, p, P))
                  : micro_rows<1>(rows, x + m * K, K, wp, N, K, p, out(m, p, 1));
        }
        m += rows;
      }
      p += np;
    }
  }
};

}  // namespace mmgpt::kernels::simd
