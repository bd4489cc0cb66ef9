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
// head after another. So both loops prefetch kPrefetchAhead bytes ahead, and
// the first lines of the values are requested while the scores are computed.
// The scores prefetch a line of keys ahead for each line they load, not a
// block of 16 keys (4 KB of f32) at once: on Zen 5 (12 layers x 12 heads of
// f32 rows, 1 thread, interleaved runs) 4-7% faster at 128 positions, where
// the bursts left the loop waiting, and the same at 512 (both at 0.9-1.0 of a
// plain read of the same rows; docs/decode-streaming.md).
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
    // Prefetches never fault, even past the end. always_inline: GCC can delete
    // the calls of an out-of-line wrapper of __builtin_prefetch (decode_prefetch.hpp).
    [[gnu::always_inline]] static void prefetch_line(const KE* p) { __builtin_prefetch(p); }
    [[gnu::always_inline]] static void prefetch(const KE* p, size_t elements) {
        const char* c = reinterpret_cast<const char*>(p);
        for (size_t b = 0; b < elements * sizeof(KE); b += 64) __builtin_prefetch(c + b);
    }

    static void scores(const float* q, const KE* k, size_t n, size_t hd, float scale, float* s) {
        const B sv(scale);
        size_t j = 0;
        for (; j + W <= n; j += W) {
            B acc[W];
#pragma GCC unroll 16
            for (size_t i = 0; i < W; ++i) acc[i] = B(0.0f);
            size_t d = 0;
            for (; d + W <= hd; d += W) {
                const B qv = B::load_unaligned(q + d);
                // A line ahead for every line of keys loaded (a 16-bit row
                // chunk is half a line: every other chunk).
                const bool new_line = (d * sizeof(KE)) % 64 == 0;
#pragma GCC unroll 16
                for (size_t i = 0; i < W; ++i) {
                    const KE* row = k + (j + i) * hd + d;
                    if (new_line) prefetch_line(row + kPrefetchAhead / sizeof(KE));
                    acc[i] = xsimd::fma(qv, load(row), acc[i]);
                }
            }
            B sum = column_sums<Arch>(acc);
            if (d < hd) {  // head sizes that are not a multiple of the vector width
                alignas(64) float t[W];
                sum.store_aligned(t);
                for (size_t i = 0; i < W; ++i)
                    for (size_t dd = d; dd < hd; ++dd) t[i] = __builtin_fmaf(q[dd], one(k[(j + i) * hd + dd]), t[i]);
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
    static void weighted_values(const float* p, const KE* v, size_t n, size_t hd, size_t d0, float* out) {
        B acc[NV];
#pragma GCC unroll 8
        for (size_t i = 0; i < NV; ++i) acc[i] = B(0.0f);
        for (size_t j = 0; j < n; ++j) {
            const B pj(p[j]);
            const KE* vj = v + j * hd + d0;
            if (d0 == 0) prefetch(vj + kPrefetchAhead / sizeof(KE), hd);
#pragma GCC unroll 8
            for (size_t i = 0; i < NV; ++i) acc[i] = xsimd::fma(pj, load(vj + i * W), acc[i]);
        }
#pragma GCC unroll 8
        for (size_t i = 0; i < NV; ++i) acc[i].store_unaligned(out + d0 + i * W);
    }

    static void run(const float* q, const KE* k, const KE* v, size_t n, size_t hd, float scale, float* s,
                    float* out) {
        prefetch(v, std::min(n * hd, kPrefetchAhead / sizeof(KE)));
        scores(q, k, n, hd, scale, s);
        Softmax::softmax(s, n);
        size_t d = 0;
        for (; d + 8 * W <= hd; d += 8 * W) weighted_values<8>(s, v, n, hd, d, out);
        for (; d + 4 * W <= hd; d += 4 * W) weighted_values<4>(s, v, n, hd, d, out);
        for (; d + W <= hd; d += W) weighted_values<1>(s, v, n, hd, d, out);
        for (; d < hd; ++d) {
            float acc = 0.0f;
            for (size_t j = 0; j < n; ++j) acc = __builtin_fmaf(s[j], one(v[j * hd + d]), acc);
            out[d] = acc;
        }
    }
};

}  // namespace mmgpt::kernels::simd
