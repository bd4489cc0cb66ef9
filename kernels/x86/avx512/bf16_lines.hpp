#pragma once
// Internal, AVX-512 TUs only (bf16dot.cpp, amx.cpp): the two ways they read
// a line of a bf16 panel (k for 16 rows, then k+1 for 16 rows). Internal
// linkage, as tile_finish.hpp, so each TU keeps its own copy built with its
// own flags.
#if !defined(__AVX512F__) || !defined(__AVX512BW__)
#error "x86/avx512/bf16_lines.hpp is for translation units compiled with AVX-512 F and BW"
#endif
#include <immintrin.h>

#include <cstdint>

namespace mmgpt::kernels::detail {
namespace {

// VPERMW indices that interleave a line's halves: words 2j, 2j+1 of the
// result are words j, 16 + j of the line, so lane j = (w[j][k], w[j][k+1]),
// the pair VDPBF16PS and a TDPBF16PS B-tile row want.
alignas(64) constexpr uint16_t kInterleave[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                                  8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};

// 16 bf16 values (half a line) to f32, exactly (as widen_simd.hpp): the 16
// bits become the high half of the 32.
inline __m512 widen_bf16(const uint16_t* src) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

}  // namespace
}  // namespace mmgpt::kernels::detail
