#pragma once
// Causal attention of one query (decode) or of consecutive queries of a
// sequence (prefill, in tiles that share each row they read) for consecutive
// heads, written once against xsimd and instantiated per ISA through
// kernels_simd.hpp (include only from there): for each head h,
//   out_h[d] = sum_j softmax_j(scale * q_h . k_hj) v_hj[d]   for keys j < n
// (or, with a sliding window, the last `window` of them: the others' scores
// are computed and then given probability 0).
// Keys and values lie in the KV cache's blocks (kv_blocks.hpp KVBlocks): a block
// holds `block` positions of every head, each head's rows contiguous, heads
// one after another. Elements are f32, or bf16 / f16 (a 16-bit KV cache,
// template parameter KT), widened to f32 exactly as they are loaded: a 16-bit
// cache gives bit for bit what the f32 kernel gives on the widened rows.
//
// Scores: W keys at a time, each with its own vector accumulator over d,
// folded by one parallel horizontal add (column_sums) instead of W separate
// reductions. Weighted sum of values: the output stays in registers (up to
// 8 vectors) while a block's rows stream by, and is carried from block to
// block through `out`. Everything is sequenced per element (keys in groups of
// W from position 0, values in position order), so the result for a head
// depends neither on the block size (a multiple of kKVBlockMultiple, so of W)
// nor on the other heads of the call. Tails of rows that are not whole
// vectors use explicit fmaf, so the compiler's contraction choices cannot
// differ between the f32 and 16-bit instantiations.
//
// Decode reads the whole cache every step. The kernel walks it block by block
// and, within a block, head by head: the keys of the call's heads are then one
// run of memory per block, and with the heads of a group of the KV cache
// (engine/kv_cache.hpp: a group's blocks follow one another) one stream, then
// the values likewise. The hardware prefetcher streams that at about a bare
// read loop's rate, with no software prefetch; with one run per head per
// layer instead (short runs far apart) it would not get going
// (docs/kernels.md, "Attention and the KV cache").
#include <algorithm>
#include <cstddef>
#include <type_traits>

#include <xsimd/xsimd.hpp>

#include "kernels/kv_blocks.hpp"
#include "kernels/simd/widen_simd.hpp"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace mmgpt::kernels::simd {

#if defined(__AVX512F__)
// out[i] = sum of the 16 lanes of r[i]. xsimd 8.1.0 (Debian 12) returns the
// lanes of haddp permuted on avx512f (2,3 <-> 4,5 and 10,11 <-> 12,13), so
// this one is written out: pairwise within 128-bit lanes, then across lanes.
inline __m512 column_sums_avx512(const __m512* r) {
  __m512 s[8];
  for (int i = 0; i < 8; ++i)  // per lane: x0+x2, y0+y2, x1+x3, y1+y3
    s[i] = _mm512_add_ps(_mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]), _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]));
  __m512 u[4];
  for (int i = 0; i < 4; ++i)  // per lane: the lane's sum of rows 4i .. 4i+3
    u[i] = _mm512_add_ps(_mm512_shuffle_ps(s[2 * i], s[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_ps(s[2 * i], s[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  auto pair = [](__m512 a, __m512 b) {
    return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
  };
  return pair(pair(u[0], u[1]), pair(u[2], u[3]));  // lane m: rows 4m .. 4m+3
}
#endif

// out[i] = horizontal sum of acc[i], for i < batch size.
template <class Arch>
xsimd::batch<float, Arch> column_sums(const xsimd::batch<float, Arch>* acc) {
#if defined(__AVX512F__)
  if constexpr (std::is_base_of_v<xsimd::avx512f, Arch>) {
    __m512 r[16];
    for (int i = 0; i < 16; ++i) r[i] = acc[i];
    return column_sums_avx512(r);
  }
#endif
  return xsimd::haddp(acc);
}

template <class Arch, class Softmax, class KT = WeightF32>
struct AttentionHeads {
  using B = xsimd::batch<float, Arch>;
  using KE = typename KT::E;
  static constexpr size_t W = B::size;

  static B load(const KE* p) { return load_weights<KT, B>(p); }
  static float one(KE e) { return widen_one<KT, B>(e); }

  // s[0 .. m) = scale * q . k_j for m keys in rows of hd from k; the first is
  // key number j0 of the head, a multiple of W (groups of W as from key 0).
  static void scores(const float* q, const KE* k, size_t m, size_t hd, float scale, float* s) {
    const B sv(scale);
    const size_t dv = hd - hd % W;  // a row's whole vectors
    size_t j = 0;
    for (; j + W <= m; j += W) {
      B acc[W];
#pragma GCC unroll 16
      for (size_t i = 0; i < W; ++i) acc[i] = B(0.0f);
        // Row by row (memory order); each accumulator sums its row over d
        // in order.
#pragma GCC unroll 16
      for (size_t i = 0; i < W; ++i) {
        const KE* row = k + (j + i) * hd;
        for (size_t d = 0; d < dv; d += W) acc[i] = xsimd::fma(B::load_unaligned(q + d), load(row + d), acc[i]);
      }
      B sum = column_sums<Arch>(acc);
      if (dv < hd) {  // head sizes that are not a multiple of the vector width
        alignas(64) float t[W];
        sum.store_aligned(t);
        for (size_t i = 0; i < W; ++i)
          for (size_t dd = dv; dd < hd; ++dd) t[i] = __builtin_fmaf(q[dd], one(k[(j + i) * hd + dd]), t[i]);
        sum = B::load_aligned(t);
      }
      (sum * sv).store_unaligned(s + j);
    }
    for (; j < m; ++j) {  // the last m % W keys (of the last block), one at a time
      B acc(0.0f);
      size_t d = 0;
      for (; d + W <= hd; d += W) acc = xsimd::fma(B::load_unaligned(q + d), load(k + j * hd + d), acc);
      float t = xsimd::hadd(acc);
      for (; d < hd; ++d) t = __builtin_fmaf(q[d], one(k[j * hd + d]), t);
      s[j] = t * scale;
    }
  }

  // out[d0 .. d0 + NV*W) (+)= sum_j p[j] v[j][d0 ..] over m rows, in
  // registers; `carry`: out holds the sums of the blocks before.
  template <size_t NV>
  static void weighted_values(const float* p, const KE* v, size_t m, size_t hd, size_t d0, float* out, bool carry) {
    B acc[NV];
#pragma GCC unroll 8
    for (size_t i = 0; i < NV; ++i) acc[i] = carry ? B::load_unaligned(out + d0 + i * W) : B(0.0f);
    for (size_t j = 0; j < m; ++j) {
      const B pj(p[j]);
      const KE* vj = v + j * hd + d0;
#pragma GCC unroll 8
      for (size_t i = 0; i < NV; ++i) acc[i] = xsimd::fma(pj, load(vj + i * W), acc[i]);
    }
#pragma GCC unroll 8
    for (size_t i = 0; i < NV; ++i) acc[i].store_unaligned(out + d0 + i * W);
  }

  static void values(const float* p, const KE* v, size_t m, size_t hd, float* out, bool carry) {
    size_t d = 0;
    for (; d + 8 * W <= hd; d += 8 * W) weighted_values<8>(p, v, m, hd, d, out, carry);
    for (; d + 4 * W <= hd; d += 4 * W) weighted_values<4>(p, v, m, hd, d, out, carry);
    for (; d + W <= hd; d += W) weighted_values<1>(p, v, m, hd, d, out, carry);
    for (; d < hd; ++d) {
      float acc = carry ? out[d] : 0.0f;
      for (size_t j = 0; j < m; ++j) acc = __builtin_fmaf(p[j], one(v[j * hd + d]), acc);
      out[d] = acc;
    }
  }

  // Prefill: a tile of QT queries of one head reads each key and value row
  // once for all of them (a one-query kernel reads it once per query).
  // Registers: AVX2's 16 hold two queries' four vectors of values, the 32 of
  // AVX-512 and NEON four.
  static constexpr size_t QT = 4;
  static constexpr size_t NV = W == 8 ? 2 : 4;

  // scores for R <= QT queries (rows q[r]) and m keys from k, m a multiple of W
  // and the first key a multiple of W: each score's arithmetic is that of
  // scores(), so bit for bit the same. DV: the row's whole vectors, when
  // known at compile time (0: hd / W at run time).
  template <size_t DV, size_t R = QT>
  static void scores_tile(const float* const* q, const KE* k, size_t m, size_t hd, float scale, float* const* s) {
    const B sv(scale);
    const size_t dv = DV > 0 ? DV * W : hd - hd % W;
    for (size_t j = 0; j < m; j += W) {
      B acc[R][W];
      for (size_t i = 0; i < W; ++i) {
        const KE* row = k + (j + i) * hd;
        B a[R];
#pragma GCC unroll 4
        for (size_t r = 0; r < R; ++r) a[r] = B(0.0f);
        for (size_t d = 0; d < dv; d += W) {
          const B kv = load(row + d);
#pragma GCC unroll 4
          for (size_t r = 0; r < R; ++r) a[r] = xsimd::fma(B::load_unaligned(q[r] + d), kv, a[r]);
        }
#pragma GCC unroll 4
        for (size_t r = 0; r < R; ++r) acc[r][i] = a[r];
      }
      for (size_t r = 0; r < R; ++r) {
        B sum = column_sums<Arch>(acc[r]);
        if (dv < hd) {
          alignas(64) float t[W];
          sum.store_aligned(t);
          for (size_t i = 0; i < W; ++i)
            for (size_t dd = dv; dd < hd; ++dd) t[i] = __builtin_fmaf(q[r][dd], one(k[(j + i) * hd + dd]), t[i]);
          sum = B::load_aligned(t);
        }
        (sum * sv).store_unaligned(s[r] + j);
      }
    }
  }

  // values() for R <= QT queries (probabilities p[r], outputs out[r]) over the
  // same m rows: each output element's chain of multiply-adds is the same.
  template <size_t N, size_t R = QT>
  static void values_tile_at(const float* const* p, const KE* v, size_t m, size_t hd, size_t d0, float* const* out,
                             bool carry) {
    B acc[R][N];
#pragma GCC unroll 4
    for (size_t r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (size_t i = 0; i < N; ++i) acc[r][i] = carry ? B::load_unaligned(out[r] + d0 + i * W) : B(0.0f);
    for (size_t j = 0; j < m; ++j) {
      const KE* vj = v + j * hd + d0;
      B vv[N];
#pragma GCC unroll 4
      for (size_t i = 0; i < N; ++i) vv[i] = load(vj + i * W);
#pragma GCC unroll 4
      for (size_t r = 0; r < R; ++r) {
        const B pj(p[r][j]);
#pragma GCC unroll 4
        for (size_t i = 0; i < N; ++i) acc[r][i] = xsimd::fma(pj, vv[i], acc[r][i]);
      }
    }
#pragma GCC unroll 4
    for (size_t r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (size_t i = 0; i < N; ++i) acc[r][i].store_unaligned(out[r] + d0 + i * W);
  }

  template <size_t R = QT>
  static void values_tile(const float* const* p, const KE* v, size_t m, size_t hd, float* const* out, bool carry) {
    size_t d = 0;
    for (; d + NV * W <= hd; d += NV * W) values_tile_at<NV, R>(p, v, m, hd, d, out, carry);
    for (; d + W <= hd; d += W) values_tile_at<1, R>(p, v, m, hd, d, out, carry);
    for (; d < hd; ++d)
      for (size_t r = 0; r < R; ++r) {
        float acc = carry ? out[r][d] : 0.0f;
        for (size_t j = 0; j < m; ++j) acc = __builtin_fmaf(p[r][j], one(v[j * hd + d]), acc);
        out[r][d] = acc;
      }
  }

  // Softmax of a query's n scores over its last `window` of them (0: all);
  // the positions before get probability 0 (and add nothing to the values).
  static void softmax_window(float* s, size_t n, size_t window) {
    const size_t first = window != 0 && n > window ? n - window : 0;
    std::fill(s, s + first, 0.0f);
    Softmax::softmax(s + first, n - first);
  }

  // Calls f(block, first, count) for the runs of positions [j0, j1) that lie
  // in one block of the cache each.
  template <class F>
  static void for_runs(size_t j0, size_t j1, size_t block, F f) {
    while (j0 < j1) {
      const size_t b = j0 / block, e = std::min(j1, (b + 1) * block);
      f(b, j0, e - j0);
      j0 = e;
    }
  }

  // Queries i0 .. i0 + QT of head h (kernels.hpp attention_queries), with
  // at least one position each. Positions every query of the tile has (for
  // the scores, whole groups of W) are read once for all; each query's few
  // others by the one-query kernels, in the same order.
  template <size_t DV>
  static void tile(const float* q, size_t q_stride, const KE* k, const KE* v, size_t n, size_t queries, size_t i0,
                   size_t heads, size_t h, size_t hd, KVBlocks at, float scale, float* s, float* out,
                   size_t out_stride, size_t window) {
    const size_t S = n + queries - 1;
    const float* qr[QT];
    float *sr[QT], *orow[QT];
    for (size_t r = 0; r < QT; ++r) {
      const size_t i = i0 + r;
      qr[r] = q + i * q_stride + h * hd, sr[r] = s + (i * heads + h) * S, orow[r] = out + i * out_stride + h * hd;
    }
    const KE* kh = k + at.head_offset(h);
    const KE* vh = v + at.head_offset(h);
    const auto row = [&](const KE* base, size_t b, size_t j) {
      return base + b * at.block_stride + (j % at.block) * hd;
    };
    const size_t first = n + i0, whole = first - first % W;
    for_runs(0, whole, at.block, [&](size_t b, size_t j, size_t m) {
      float* sj[QT];
      for (size_t r = 0; r < QT; ++r) sj[r] = sr[r] + j;
      scores_tile<DV>(qr, row(kh, b, j), m, hd, scale, sj);
    });
    for (size_t r = 0; r < QT; ++r) {
      for_runs(whole, first + r, at.block,
               [&](size_t b, size_t j, size_t m) { scores(qr[r], row(kh, b, j), m, hd, scale, sr[r] + j); });
      softmax_window(sr[r], first + r, window);
    }
    for_runs(0, first, at.block, [&](size_t b, size_t j, size_t m) {
      const float* pj[QT];
      for (size_t r = 0; r < QT; ++r) pj[r] = sr[r] + j;
      values_tile(pj, row(vh, b, j), m, hd, orow, j > 0);
    });
    for (size_t r = 1; r < QT; ++r)
      for_runs(first, first + r, at.block,
               [&](size_t b, size_t j, size_t m) { values(sr[r] + j, row(vh, b, j), m, hd, orow[r], true); });
  }

  // Query i (q + i * q_stride, heads x hd floats) against the first n + i
  // positions, output at out + i * out_stride; s: queries x heads x
  // (n + queries - 1). Whole tiles of QT queries, the rest one at a time
  // (run(), as decode).
  static void run_queries(const float* q, size_t q_stride, const KE* k, const KE* v, size_t n, size_t queries,
                          size_t heads, size_t hd, KVBlocks at, float scale, float* s, float* out, size_t out_stride,
                          size_t window) {
    if (queries == 0) return;
    if (queries == 1) return run(q, k, v, n, heads, hd, at, scale, s, out, window);  // decode: every head in one walk
    const size_t S = n + queries - 1;
    if (n == 0) {  // the first query has no positions
      run(q, k, v, 0, heads, hd, at, scale, s, out, window);
      return run_queries(q + q_stride, q_stride, k, v, 1, queries - 1, heads, hd, at, scale, s + heads * S,
                         out + out_stride, out_stride, window);
    }
    const size_t tiled = queries - queries % QT;
    for (size_t h = 0; h < heads; ++h) {
      for (size_t i0 = 0; i0 < tiled; i0 += QT) {
        if (hd == 64)  // every GPT-2's head size
          tile<64 / W>(q, q_stride, k, v, n, queries, i0, heads, h, hd, at, scale, s, out, out_stride, window);
        else
          tile<0>(q, q_stride, k, v, n, queries, i0, heads, h, hd, at, scale, s, out, out_stride, window);
      }
      for (size_t i = tiled; i < queries; ++i)
        run(q + i * q_stride + h * hd, k + at.head_offset(h), v + at.head_offset(h), n + i, 1, hd, at, scale,
            s + (i * heads + h) * S, out + i * out_stride + h * hd, window);
    }
  }

  // Heads that read the same rows (the query heads of one key/value head
  // under grouped-query attention) are tiles of up to QT queries: each key
  // and value row is loaded once for the tile. Scores of R heads (q + r * hd)
  // over m rows from k, into s + r * n; each score has scores()'s arithmetic.
  template <size_t R>
  static void shared_scores(const float* q, const KE* k, size_t m, size_t hd, float scale, float* s, size_t n) {
    if constexpr (R == 1) {
      scores(q, k, m, hd, scale, s);
    } else {
      const float* qr[R];
      float* sr[R];
      for (size_t r = 0; r < R; ++r) qr[r] = q + r * hd, sr[r] = s + r * n;
      const size_t mw = m - m % W;  // whole groups of W keys: the tile; the rest one key at a time
      if (mw > 0) {
        if (hd == 64)
          scores_tile<64 / W, R>(qr, k, mw, hd, scale, sr);
        else
          scores_tile<0, R>(qr, k, mw, hd, scale, sr);
      }
      if (mw < m)
        for (size_t r = 0; r < R; ++r) scores(qr[r], k + mw * hd, m - mw, hd, scale, sr[r] + mw);
    }
  }

  // values() of R heads (probabilities p + r * n, outputs out + r * hd).
  template <size_t R>
  static void shared_values(const float* p, const KE* v, size_t m, size_t hd, float* out, size_t n, bool carry) {
    if constexpr (R == 1) {
      values(p, v, m, hd, out, carry);
    } else {
      const float* pr[R];
      float* orow[R];
      for (size_t r = 0; r < R; ++r) pr[r] = p + r * n, orow[r] = out + r * hd;
      values_tile<R>(pr, v, m, hd, orow, carry);
    }
  }

  // f(R, h) for heads [h, h + R): the runs of consecutive heads that read the
  // same rows, in tiles of at most QT.
  template <class F>
  static void for_head_tiles(size_t heads, const KVBlocks& at, F f) {
    static_assert(QT == 4);
    for (size_t h = 0; h < heads;) {
      size_t e = h + 1;
      while (e < heads && e - h < QT && at.head_offset(e) == at.head_offset(h)) ++e;
      switch (e - h) {
        case 4: f(std::integral_constant<size_t, 4>{}, h); break;
        case 3: f(std::integral_constant<size_t, 3>{}, h); break;
        case 2: f(std::integral_constant<size_t, 2>{}, h); break;
        default: f(std::integral_constant<size_t, 1>{}, h); break;
      }
      h = e;
    }
  }

  // q, out: heads x hd floats; k, v: the first head's block 0; s: heads x n.
  // Block by block, the call's key/value heads one after another: the keys
  // of a block are one run of memory, then its values.
  static void run(const float* q, const KE* k, const KE* v, size_t n, size_t heads, size_t hd, KVBlocks at, float scale,
                  float* s, float* out, size_t window) {
    if (n == 0) return std::fill(out, out + heads * hd, 0.0f);
    for (size_t j0 = 0; j0 < n; j0 += at.block) {
      const size_t m = std::min(at.block, n - j0), b = j0 / at.block;
      for_head_tiles(heads, at, [&](auto R, size_t h) {
        shared_scores<decltype(R)::value>(q + h * hd, k + b * at.block_stride + at.head_offset(h), m, hd, scale,
                                          s + h * n + j0, n);
      });
    }
    for (size_t h = 0; h < heads; ++h) softmax_window(s + h * n, n, window);
    for (size_t j0 = 0; j0 < n; j0 += at.block) {
      const size_t m = std::min(at.block, n - j0), b = j0 / at.block;
      for_head_tiles(heads, at, [&](auto R, size_t h) {
        shared_values<decltype(R)::value>(s + h * n + j0, v + b * at.block_stride + at.head_offset(h), m, hd,
                                          out + h * hd, n, j0 > 0);
      });
    }
  }
};

}  // namespace mmgpt::kernels::simd
