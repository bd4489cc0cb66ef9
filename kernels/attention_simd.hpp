#pragma once
// One attention row, written once against xsimd and instantiated per ISA
// through kernels_simd.hpp (include only from there):
//   out[d] = sum_j softmax_j(scale * q . k_j) v_j[d]   for keys j < n.
// Keys and values are rows of hd elements, contiguous per head (the KV cache's
// layout), so the row streams them front to back. Elements are f32, or bf16 /
// f16 (a 16-bit KV cache, template parameter KT), widened to f32 exactly as
// they are loaded: a 16-bit cache gives bit for bit what the f32 kernel gives
// on the widened rows.
//
// Scores: W keys at a time, each with its own vector accumulator over d,
// folded by one parallel horizontal add (column_sums) instead of W separate
// reductions. Weighted sum of values: the output stays in registers (up to
// 8 vectors) while the keys stream by. Everything is sequenced per element,
// so the result for a query does not depend on the other rows of the step.
// Tails of rows that are not whole vectors use explicit fmaf, so the compiler's
// contraction choices cannot differ between the f32 and 16-bit instantiations.
//
// Decode reads each head's keys and values once, from memory: streams of a few
// hundred KB, too short for the hardware prefetcher to ramp up on its own, one
// head after another. So the row reads them as one stream: its keys, then its
// values, then (where the caller names them) the keys of the row it runs next,
// each line prefetched kPrefetchAhead bytes ahead along that stream, so the
// values and the next head start with their first lines already requested.
// The scores walk their W keys row after row (each row's lines in memory
// order), so the prefetches go out in memory order too. Measured on Zen 5
// against the kernel before (scores column by column, no next head), whole
// 355M q4_0 decode steps alternated step by step in one process: 1.010-1.032
// of its speed at 2 threads and 576 positions (three runs), 0.993-1.015 at 64
// positions and at 1 thread. In a prototype, either change alone gave
// 0.99-1.02 (docs/decode-streaming.md, "Attention as one stream").
#include <algorithm>
#include <cstddef>
#include <type_traits>

#include <xsimd/xsimd.hpp>

#include "kernels/widen_simd.hpp"

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
struct AttentionRow {
    using B = xsimd::batch<float, Arch>;
    using KE = typename KT::E;
    static constexpr size_t W = B::size;

    static B load(const KE* p) { return load_weights<KT, B>(p); }
    static float one(KE e) { return widen_one<KT, B>(e); }

    static constexpr size_t kPrefetchAhead = 4096;  // bytes

    // The stream a row reads (see the top of the file): `bytes` of keys, as
    // many of values, then the next row's keys (or nothing).
    struct Stream {
        const char* k;
        const char* v;
        const char* next;
        size_t bytes;
        // Prefetches the line `at` bytes into the stream. Prefetches never
        // fault, so past the end (no next row) the address is just past v.
        // always_inline: GCC can delete the calls of an out-of-line wrapper of
        // __builtin_prefetch (decode_prefetch.hpp).
        [[gnu::always_inline]] void prefetch(size_t at) const {
            const char* p = at < bytes ? k + at : at < 2 * bytes || !next ? v + (at - bytes) : next + (at - 2 * bytes);
            __builtin_prefetch(p);
        }
    };

    static void scores(const float* q, const KE* k, size_t n, size_t hd, float scale, float* s, const Stream& st) {
        const B sv(scale);
        size_t j = 0;
        for (; j + W <= n; j += W) {
            B acc[W];
#pragma GCC unroll 16
            for (size_t i = 0; i < W; ++i) acc[i] = B(0.0f);
            // Row by row; each accumulator still sums its row over d in
            // order, so the result is the column-by-column loop's.
            const size_t dv = hd - hd % W;  // the row's whole vectors
#pragma GCC unroll 16
            for (size_t i = 0; i < W; ++i) {
                const KE* row = k + (j + i) * hd;
                for (size_t d = 0; d < dv; d += W) {
                    // A line ahead for every line of keys loaded (a 16-bit
                    // row chunk is half a line: every other chunk).
                    const size_t at = ((j + i) * hd + d) * sizeof(KE);
                    if (at % 64 == 0) st.prefetch(at + kPrefetchAhead);
                    acc[i] = xsimd::fma(B::load_unaligned(q + d), load(row + d), acc[i]);
                }
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
        for (; j < n; ++j) {  // the last n % W keys, one at a time
            B acc(0.0f);
            size_t d = 0;
            for (; d + W <= hd; d += W) acc = xsimd::fma(B::load_unaligned(q + d), load(k + j * hd + d), acc);
            float t = xsimd::hadd(acc);
            for (; d < hd; ++d) t = __builtin_fmaf(q[d], one(k[j * hd + d]), t);
            s[j] = t * scale;
        }
    }

    // out[d0 .. d0 + NV*W) = sum_j p[j] v[j][d0 ..], accumulated in registers.
    template <size_t NV>
    static void weighted_values(const float* p, const KE* v, size_t n, size_t hd, size_t d0, float* out,
                                const Stream& st) {
        B acc[NV];
#pragma GCC unroll 8
        for (size_t i = 0; i < NV; ++i) acc[i] = B(0.0f);
        for (size_t j = 0; j < n; ++j) {
            const B pj(p[j]);
            const KE* vj = v + j * hd + d0;
            if (d0 == 0)  // the row's lines, kPrefetchAhead further along the stream
                for (size_t b = 0; b < hd * sizeof(KE); b += 64) st.prefetch(st.bytes + j * hd * sizeof(KE) + b + kPrefetchAhead);
#pragma GCC unroll 8
            for (size_t i = 0; i < NV; ++i) acc[i] = xsimd::fma(pj, load(vj + i * W), acc[i]);
        }
#pragma GCC unroll 8
        for (size_t i = 0; i < NV; ++i) acc[i].store_unaligned(out + d0 + i * W);
    }

    // next_k: the keys of the row the caller runs next, or null.
    static void run(const float* q, const KE* k, const KE* v, size_t n, size_t hd, float scale, float* s, float* out,
                    const KE* next_k = nullptr) {
        const Stream st{reinterpret_cast<const char*>(k), reinterpret_cast<const char*>(v),
                        reinterpret_cast<const char*>(next_k), n * hd * sizeof(KE)};
        for (size_t b = 0; b < std::min(st.bytes, kPrefetchAhead); b += 64) st.prefetch(st.bytes + b);  // the values' first lines
        scores(q, k, n, hd, scale, s, st);
        Softmax::softmax(s, n);
        size_t d = 0;
        for (; d + 8 * W <= hd; d += 8 * W) weighted_values<8>(s, v, n, hd, d, out, st);
        for (; d + 4 * W <= hd; d += 4 * W) weighted_values<4>(s, v, n, hd, d, out, st);
        for (; d + W <= hd; d += W) weighted_values<1>(s, v, n, hd, d, out, st);
        for (; d < hd; ++d) {
            float acc = 0.0f;
            for (size_t j = 0; j < n; ++j) acc = __builtin_fmaf(s[j], one(v[j * hd + d]), acc);
            out[d] = acc;
        }
    }
};

}  // namespace mmgpt::kernels::simd
