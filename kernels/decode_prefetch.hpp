#pragma once
// How the decode (M = 1) matmul kernels keep memory busy. Decode reads every
// weight once, so its speed is how much of the read bandwidth one core's
// stream of loads gets. The loads alone keep too few lines in flight once a
// kernel spends more than a couple of vector instructions per 64-byte line
// (widening f16, unpacking q4_0 nibbles, quantized dot products), because the
// out-of-order window fills with arithmetic waiting on them. So every decode
// kernel reads its matrix as one stream in memory order and prefetches each
// line it loads kDecodeAheadBytes ahead; past the end of a panel that is the
// next one, which is read next. The stream is one panel at a time for f32,
// q8_0 and q4_0 (their panels hold the scales beside the quants,
// quant_layout.hpp), and a pair of panels at a time for bf16 / f16, whose
// lines alternate between the two panels (panel_layout.hpp): one run of
// memory read with two accumulator chains, which a 16-bit line (two k-steps)
// needs to keep up (simd/gemm_simd.hpp, x86/avx512/bf16dot.cpp).
//
// The prefetch instruction depends on the CPU, chosen once per process
// (kernels::decode_prefetch(), dispatch.cpp): non-temporal (PREFETCHNTA, on
// Arm PRFM PLDL1STRM: the hint for data used once) on AMD and Arm, PREFETCHT0
// elsewhere. On AMD T0 is no better; on Intel the non-temporal hint holds
// decode far below the memory's rate. So the decode loops are instantiated
// for each hint and each call picks one (with_decode_hint).
// MMGPT_DECODE_PREFETCH fixes one (none: the hardware prefetchers alone).
//
// The measurements behind these choices, and the slower variants
// (prefetching into L2, other distances), are in docs/kernels.md, "Decode:
// prefetching ahead, and the hint per CPU" and "Tried and not kept".
//
// Internal linkage: every kernel TU gets its own copy, compiled with its own
// ISA flags. always_inline matters: GCC 12 marks an out-of-line wrapper of
// __builtin_prefetch `const` and deletes the calls.
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kernels/decode_prefetch_kind.hpp"

namespace mmgpt::kernels::detail {
namespace {

// Bytes requested ahead of the loads, per core.
constexpr size_t kDecodeAheadBytes = 8192;

// A prefetch of base + offset with hint H. Formed as an integer: the address
// may lie past the matrix (prefetches never fault).
template <DecodePrefetch H>
[[gnu::always_inline]] inline void prefetch_hinted(const void* base, size_t offset) {
  const void* at = reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(base) + offset);
  if constexpr (H == DecodePrefetch::T0)
    __builtin_prefetch(at, 0, 3);
  else if constexpr (H == DecodePrefetch::Nta)
    __builtin_prefetch(at, 0, 0);
  else
    (void)at;  // None: the hardware prefetchers alone
}

// The decode prefetch for the line at byte `at` from `base`: kDecodeAheadBytes
// further along the stream.
template <DecodePrefetch H>
[[gnu::always_inline]] inline void prefetch_decode(const void* base, size_t at = 0) {
  prefetch_hinted<H>(base, at + kDecodeAheadBytes);
}

// Calls f(std::integral_constant<DecodePrefetch, H>{}) with the process's
// hint, so a decode loop is compiled once per hint and none of them tests it
// per line.
template <class F>
[[gnu::always_inline]] inline void with_decode_hint(F&& f) {
  switch (decode_prefetch()) {
    case DecodePrefetch::T0: return f(std::integral_constant<DecodePrefetch, DecodePrefetch::T0>{});
    case DecodePrefetch::None: return f(std::integral_constant<DecodePrefetch, DecodePrefetch::None>{});
    case DecodePrefetch::Nta: break;
  }
  f(std::integral_constant<DecodePrefetch, DecodePrefetch::Nta>{});
}

// Whether a tile prefetches its weights as decode does (above: decode and
// the small batches whose single row tile reads the weights once) or not.
enum class Ahead { None, Decode };

}  // namespace
}  // namespace mmgpt::kernels::detail
