#pragma once
// How the decode (M = 1) matmul kernels keep memory busy. Decode reads every
// weight once, so its speed is how much of the read bandwidth one core's
// stream of loads gets. The loads alone keep too few lines in flight once a
// kernel spends more than a couple of vector instructions per 64-byte line
// (widening f16, unpacking q4_0 nibbles, quantized dot products), because the
// out-of-order window fills with arithmetic waiting on them. So every decode
// kernel reads its matrix as one stream in memory order and prefetches each
// line it loads kDecodeAheadBytes ahead, non-temporally (the hint for data
// used once: the weights are not read again within the step); past the end
// of a panel that is the next one, which is read next. The stream is one
// panel at a time for f32, q8_0 and q4_0 (their panels hold the scales beside
// the quants, quant_layout.hpp), and a pair of panels at a time for bf16 /
// f16, whose lines alternate between the two panels (panel_layout.hpp): one
// run of memory read with two accumulator chains, which a 16-bit line (two
// k-steps) needs to keep up (gemm_simd.hpp, bf16dot_avx512bf16.cpp).
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

// Bytes requested ahead of the loads, per core.
constexpr size_t kDecodeAheadBytes = 8192;

// A non-temporal prefetch of base + offset. Formed as an integer: the address
// may lie past the matrix (prefetches never fault).
[[gnu::always_inline]] inline void prefetch_nta(const void* base, size_t offset) {
    __builtin_prefetch(reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(base) + offset), 0, 0);
}

// The decode prefetch for the line at byte `at` from `base`: kDecodeAheadBytes
// further along the stream.
[[gnu::always_inline]] inline void prefetch_decode(const void* base, size_t at = 0) {
    prefetch_nta(base, at + kDecodeAheadBytes);
}

// How a tile that streams its weights prefetches them: not at all, a fixed
// distance ahead within each panel (prefill with a single row tile, the
// weights read once), or as decode does (above).
enum class Ahead { None, InPanel, Decode };

}  // namespace
}  // namespace mmgpt::kernels::detail
