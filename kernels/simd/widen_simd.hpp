#pragma once
// Loading 16-bit floats (bf16, f16) as f32 vectors, exactly: the weight
// panels of the 16-bit matmul and the rows of a 16-bit KV cache. Written per
// ISA (include only from the per-ISA kernel headers: compiled for the TU's
// ISA). bf16: zero-extend 16 -> 32 bits and shift left 16; f16: the hardware
// conversion (VCVTPH2PS / FCVTL).
#include <cstddef>
#include <cstdint>

#include <xsimd/xsimd.hpp>
#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#endif
#if defined(__aarch64__)
#include <arm_neon.h>
#endif

namespace mmgpt::kernels::simd {

// Weight element types of PanelGemm (the storage type E of one element).
struct WeightF32 {
  using E = float;
};
struct WeightBF16 {
  using E = uint16_t;
};
struct WeightF16 {
  using E = uint16_t;
};

template <class>
inline constexpr bool kUnsupportedWeight = false;

// W consecutive weights from p, as f32 lanes.
template <class WT, class B>
inline B load_weights(const typename WT::E* p) {
  constexpr size_t W = B::size;
  if constexpr (__is_same(WT, WeightF32)) {
    return B::load_unaligned(p);
  }
#if defined(__AVX512F__)
  else if constexpr (W == 16 && __is_same(WT, WeightBF16)) {
    const __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return B(_mm512_castsi512_ps(_mm512_slli_epi32(wide, 16)));
  } else if constexpr (W == 16 && __is_same(WT, WeightF16)) {
    return B(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))));
  }
#endif
#if defined(__AVX2__)
  else if constexpr (W == 8 && __is_same(WT, WeightBF16)) {
    const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return B(_mm256_castsi256_ps(_mm256_slli_epi32(wide, 16)));
  }
#if defined(__F16C__)
  else if constexpr (W == 8 && __is_same(WT, WeightF16)) {
    return B(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
#endif
#endif
#if defined(__aarch64__)
  else if constexpr (W == 4 && __is_same(WT, WeightBF16)) {
    return B(vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16)));
  } else if constexpr (W == 4 && __is_same(WT, WeightF16)) {
    return B(vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p))));
  }
#endif
  else {
    static_assert(kUnsupportedWeight<WT>, "no widening load for this weight type on this ISA");
    return B(0.0f);
  }
}

// One element of type WT as a float (for the tails of rows that are not whole
// vectors): through a zero-padded vector, so it is the same exact widening.
template <class WT, class B>
inline float widen_one(typename WT::E e) {
  if constexpr (__is_same(WT, WeightF32)) {
    return e;
  } else {
    alignas(64) typename WT::E in[B::size] = {};
    alignas(64) float out[B::size];
    in[0] = e;
    load_weights<WT, B>(in).store_aligned(out);
    return out[0];
  }
}

}  // namespace mmgpt::kernels::simd
