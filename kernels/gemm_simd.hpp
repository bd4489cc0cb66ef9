#pragma once
// The matmul over panel-packed weights (panel_layout.hpp), written once
// against xsimd and instantiated per ISA through kernels_simd.hpp. Include
// only from there: everything here is compiled for the TU's ISA.
//
// Microkernel: MR rows of x against P panels (16P output columns). Per
// k-step it loads 16P floats of W (P cache lines), broadcasts one x value per
// row, and does MR x (16P / W) FMAs into register accumulators:
//   AVX2 (W = 8):     MR = 6, P = 1: 12 accumulators of 16 registers;
//   AVX-512 (W = 16): MR = 6, P = 2: 12 of 32;
//   NEON (W = 4):     MR = 6, P = 1: 24 of 32.
// Decode (M = 1) uses MR = 1 over groups of one or two panels (decode_panels
// below), each panel stream prefetched ahead as decode_prefetch.hpp describes
// (1 to 8 accumulators, as the vector width gives).
//
// Numerics: every output is acc = fma(x[k], w[k], acc) for k = 0 .. K-1 from
// acc = 0, then the epilogue (epilogue.hpp), whatever the tile, block or
// thread it lands in. So a row's result does not depend on M (decode equals
// prefill equals a batch) nor on the number of threads.
//
// Weight types (template parameter WT): f32 panels are loaded as they are;
// bf16 and f16 panels hold the same element order in 2 bytes, and each
// vector of weights is widened to f32 in registers right after its load
// (widen_simd.hpp). Widening is exact, so a 16-bit matrix gives bit for bit
// the result of the f32 kernel on its widened values.
#include <cstddef>
#include <cstdint>

#include <xsimd/xsimd.hpp>

#include "kernels/epilogue.hpp"
#include "kernels/decode_prefetch.hpp"
#include "kernels/parallel.hpp"
#include "kernels/gemm_blocking.hpp"
#include "kernels/panel_layout.hpp"
#include "kernels/widen_simd.hpp"

namespace mmgpt::kernels::simd {

// Act supplies the vector GELUs (so gemm and the elementwise kernels share them).
template <class Arch, class Act, class WT = WeightF32>
struct PanelGemm {
    using B = xsimd::batch<float, Arch>;
    using WE = typename WT::E;
    static constexpr size_t W = B::size;
    static constexpr size_t VP = kPanelWidth / W;   // vectors per panel k-step
    static constexpr size_t MR = 6;
    static constexpr size_t P = W == 16 ? 2 : 1;     // panels per GEMM tile
    // Panels per decode group. One panel at a time reads the matrix front to
    // back as a single stream (its prefetch runs on into the next panel),
    // which is fastest where the FMA chains keep up: an f32 line is one
    // k-step, one FMA per accumulator. A 16-bit line is two k-steps, two
    // dependent FMAs per accumulator: a thread that has the memory to itself
    // would wait on them, so with one thread 16-bit weights stream two panels
    // (two chains) at once; when threads share the bandwidth, each needs half
    // the rate and one panel keeps up again. Measured on Zen 5
    // (docs/decode-streaming.md), whole decode steps against a plain read in
    // the same run: f32 124M / 355M at 1 thread 1.00 / 0.96 with one panel
    // against 0.92 / 0.94 with two (AVX2: 1.04 against 0.92; 2 threads 1.05
    // against 1.03); f16 at 1 thread 0.84 with one panel against 0.95-0.98
    // with two, at 2 threads 1.09 / 1.01 against 0.99 / 0.93 (2-thread read
    // about 50 GB/s; when the host gave two threads 75-80 GB/s, one panel per
    // thread read 0.80-0.84 in `mmgpt bench`, where two had read 0.87-0.89).
    static size_t decode_panels() { return sizeof(WE) == 4 || mmgpt::thread_budget() > 1 ? 1 : 2; }
    static_assert(kPanelWidth % W == 0, "a panel row must be whole vectors");

    struct Out {
        float* y;              // first output of the tile
        size_t ldy;            // y row stride
        size_t ncols;          // valid columns (< 16 * panels only in the last tile)
        const float* bias;     // at the tile's first column, or null
        Epilogue e;
    };

    static B activate(B v, Activation a) {
        switch (a) {
            case Activation::GeluErf: return Act::gelu_erf_vec(v);
            case Activation::GeluTanh: return Act::gelu_tanh_vec(v);
            case Activation::None: break;
        }
        return v;
    }

    template <size_t R, size_t NP>
    static void finish(B (&acc)[R][NP * VP], const Out& o) {
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

    // R rows of x (row stride ldx) against NP panels starting at w, over
    // k in [k0, k1). Accumulators start from part_in (or zero) and end in
    // part_out (row stride ldp) or, on the last K block, go through the
    // epilogue to o. Decode: the NP panels are a decode group (or one panel
    // left over), prefetched ahead (decode_prefetch.hpp).
    template <size_t R, size_t NP, bool Decode>
    static void micro(const float* x, size_t ldx, const WE* w, size_t K, size_t k0, size_t k1,
                      const float* part_in, float* part_out, size_t ldp, const Out& o) {
        constexpr size_t V = NP * VP;
        const size_t ps = kPanelWidth * K;  // elements between panels
        B acc[R][V];
#pragma GCC unroll 8
        for (size_t i = 0; i < R; ++i)
#pragma GCC unroll 8
            for (size_t j = 0; j < V; ++j) acc[i][j] = part_in ? B::load_unaligned(part_in + i * ldp + j * W) : B(0.0f);

        for (size_t k = k0; k < k1; ++k) {
            B wv[V];
#pragma GCC unroll 8
            for (size_t p = 0; p < NP; ++p) {
                const WE* wk = w + p * ps + k * kPanelWidth;
                // Every k-step (a line, or half of one for 16-bit weights).
                if constexpr (Decode)
                    detail::prefetch_decode_ahead<NP>(w + p * ps, k * kPanelWidth * sizeof(WE), ps * sizeof(WE));
#pragma GCC unroll 8
                for (size_t v = 0; v < VP; ++v) wv[p * VP + v] = load_weights<WT, B>(wk + v * W);
            }
#pragma GCC unroll 8
            for (size_t i = 0; i < R; ++i) {
                const B xb(x[i * ldx + k]);
#pragma GCC unroll 8
                for (size_t j = 0; j < V; ++j) acc[i][j] = xsimd::fma(xb, wv[j], acc[i][j]);
            }
        }

        if (part_out) {
#pragma GCC unroll 8
            for (size_t i = 0; i < R; ++i)
#pragma GCC unroll 8
                for (size_t j = 0; j < V; ++j) acc[i][j].store_unaligned(part_out + i * ldp + j * W);
            return;
        }
        finish<R, NP>(acc, o);
    }

    template <size_t NP>
    static void micro_rows(size_t rows, const float* x, size_t ldx, const WE* w, size_t K, size_t k0, size_t k1,
                           const float* part_in, float* part_out, size_t ldp, const Out& o) {
        static_assert(MR == 6, "the cases below cover rows 1 .. 6");
        switch (rows) {
            case 6: micro<6, NP, false>(x, ldx, w, K, k0, k1, part_in, part_out, ldp, o); break;
            case 5: micro<5, NP, false>(x, ldx, w, K, k0, k1, part_in, part_out, ldp, o); break;
            case 4: micro<4, NP, false>(x, ldx, w, K, k0, k1, part_in, part_out, ldp, o); break;
            case 3: micro<3, NP, false>(x, ldx, w, K, k0, k1, part_in, part_out, ldp, o); break;
            case 2: micro<2, NP, false>(x, ldx, w, K, k0, k1, part_in, part_out, ldp, o); break;
            case 1: micro<1, NP, false>(x, ldx, w, K, k0, k1, part_in, part_out, ldp, o); break;
            default: break;
        }
    }

    // Output columns of panels [p0, p1): y[M, N] (+)= act(x[M, K] W^T + bias).
    // `scratch` holds gemm_scratch_floats(M, K, p1 - p0) floats.
    static void run(const float* x, const WE* wp, const float* bias, float* y, size_t M, size_t K, size_t N,
                    size_t p0, size_t p1, Epilogue e, float* scratch) {
        if (M == 0 || p0 >= p1) return;
        auto out = [&](size_t m, size_t p, size_t np) {
            const size_t col = p * kPanelWidth;
            const size_t left = N - col;
            return Out{y + m * N + col, N, left < np * kPanelWidth ? left : np * kPanelWidth,
                       bias ? bias + col : nullptr, e};
        };
        const size_t ps = kPanelWidth * K;

        if (M == 1) {
            size_t p = p0;
            if (decode_panels() == 2)
                for (; p + 2 <= p1; p += 2)
                    micro<1, 2, true>(x, K, wp + p * ps, K, 0, K, nullptr, nullptr, 0, out(0, p, 2));
            for (; p < p1; ++p) micro<1, 1, true>(x, K, wp + p * ps, K, 0, K, nullptr, nullptr, 0, out(0, p, 1));
            return;
        }

        const detail::GemmBlocking b = detail::gemm_blocking(M, K);
        const size_t ldp = (p1 - p0) * kPanelWidth;
        for (size_t mc0 = 0; mc0 < M; mc0 += b.mc) {
            const size_t mc1 = M - mc0 < b.mc ? M : mc0 + b.mc;
            for (size_t kc0 = 0;; kc0 += b.kc) {
                const size_t kc1 = K - kc0 < b.kc ? K : kc0 + b.kc;
                const bool first = kc0 == 0, last = kc1 == K;
                for (size_t p = p0; p < p1;) {
                    const size_t np = p + P <= p1 ? P : 1;
                    const WE* wpan = wp + p * ps;
                    for (size_t m = mc0; m < mc1;) {
                        const size_t rows = mc1 - m < MR ? mc1 - m : MR;
                        float* part = b.blocked ? scratch + (m - mc0) * ldp + (p - p0) * kPanelWidth : nullptr;
                        const float* in = first ? nullptr : part;
                        float* keep = last ? nullptr : part;
                        if (np == P)
                            micro_rows<P>(rows, x + m * K, K, wpan, K, kc0, kc1, in, keep, ldp, out(m, p, P));
                        else
                            micro_rows<1>(rows, x + m * K, K, wpan, K, kc0, kc1, in, keep, ldp, out(m, p, 1));
                        m += rows;
                    }
                    p += np;
                }
                if (last) break;
            }
        }
    }
};

}  // namespace mmgpt::kernels::simd
