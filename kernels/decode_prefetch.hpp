#pragma once
// How the decode (M = 1) matmul kernels keep memory busy. Decode reads every
// weight once, so its speed is how much of the read bandwidth one core's
// stream of loads gets. A decode kernel streams a group of G consecutive
// panels at once (one accumulator chain and one memory stream per panel);
// the loads alone keep too few lines in flight once a kernel spends more than
// a couple of vector instructions per 64-byte line (widening f16, unpacking
// q4_0 nibbles, quantized dot products), because the out-of-order window fills
// with arithmetic waiting on them. So each stream is prefetched ahead, in all
// kDecodeAheadBytes per core split over the G streams, with non-temporal
// prefetches (the hint for data used once: the weights are not read again
// within the step), and a stream that runs past the end of its panel goes on
// into the same panel of the next group, which is what the kernel reads next.
// Every decode kernel now reads one stream: one panel after another is the
// whole matrix in memory order. That is f32, q8_0 and q4_0 (their panels hold
// the scales beside the quants, quant_layout.hpp), one panel at a time, and
// bf16 / f16, a pair of panels at a time: their lines alternate between the
// two panels (panel_layout.hpp), so the pair is one run of memory read with
// two accumulator chains, which a 16-bit line (two k-steps) needs to keep up
// (gemm_simd.hpp, bf16dot_avx512bf16.cpp). Such a kernel prefetches each line
// it loads kDecodeAheadBytes ahead (prefetch_nta), which runs on into the
// next panel or pair (prefetch_decode_ahead<1> is the same for a kernel
// written for groups of G panels, quant_avx2.cpp, run with G = 1).
//
// The figures behind these choices (Zen 5, 1 and 2 threads, against a plain
// read of the same memory in the same run) are in docs/decode-streaming.md:
// in-panel T0 prefetching, no prefetching, L2 hints and other distances were
// each slower for some weight type.
//
// Internal linkage: every kernel TU gets its own copy, compiled with its own
// ISA flags. always_inline matters: GCC 12 marks an out-of-line wrapper of
// __builtin_prefetch `const` and deletes the calls (no prefetch was left).
#include <cstddef>
#include <cstdint>

namespace mmgpt::kernels::detail {
namespace {

// Bytes requested ahead of the loads, per core, over all streams of a group.
constexpr size_t kDecodeAheadBytes = 8192;

// Offset, from the start of a panel of a decode group, of the byte `ahead`
// bytes further along its stream: within the panel (`stride` bytes), or past
// its end in the same panel of the next group (`group_bytes` = the group's
// panels times their stride; for G = 1 simply `ahead`).
[[gnu::always_inline]] inline size_t decode_ahead_offset(size_t ahead, size_t stride, size_t group_bytes) {
    return ahead < stride ? ahead : group_bytes + ahead - stride;
}

// A non-temporal prefetch of base + offset. Formed as an integer: the address
// may lie past the matrix (prefetches never fault).
[[gnu::always_inline]] inline void prefetch_nta(const void* base, size_t offset) {
    __builtin_prefetch(reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(base) + offset), 0, 0);
}

// The decode prefetch for the line at byte `at` of `panel`, one of a group of
// G panels `stride` bytes apart: kDecodeAheadBytes / G further along its stream.
template <size_t G>
[[gnu::always_inline]] inline void prefetch_decode_ahead(const void* panel, size_t at, size_t stride) {
    prefetch_nta(panel, decode_ahead_offset(at + kDecodeAheadBytes / G, stride, G * stride));
}

// How a tile that streams its weights prefetches them: not at all, a fixed
// distance ahead within each panel (prefill with a single row tile, the
// weights read once), or as a decode group does (above).
enum class Ahead { None, InPanel, Decode };

}  // namespace
}  // namespace mmgpt::kernels::detail
