#pragma once
// Internal, AVX-512 TUs only (quant_vnni.cpp, bf16dot.cpp):
// how their register tiles end. A tile of R rows x P panels of f32 sums is
// finished as every matmul's epilogue defines it (epilogue.hpp): v = acc +
// bias; v = act(v); y (+)= v, with masked loads and stores at the matrix edge.
// GELU goes through quant_gelu (registry.hpp, the active set's vector GELU)
// on the tile staged in a small buffer.
//
// Everything here has internal linkage (an unnamed namespace), so each TU
// keeps its own copy compiled with its own flags: no inline function built
// for one ISA extension can be merged by the linker into a TU for another.
#if !defined(__AVX512F__)
#error "x86/avx512/tile_finish.hpp is for translation units compiled with AVX-512"
#endif
#include <immintrin.h>

#include <cstddef>

#include "core/panel_layout.hpp"
#include "kernels/epilogue.hpp"
#include "kernels/registry.hpp"

namespace mmgpt::kernels::detail {
namespace {

inline __mmask16 col_mask(size_t ncols, size_t j) {
  const size_t c0 = j * kPanelWidth;
  if (ncols >= c0 + kPanelWidth) return 0xFFFF;
  return static_cast<__mmask16>((1u << (ncols - c0)) - 1);  // ncols > c0: every panel of a tile exists
}

// v = acc + bias; v = gelu(v); y = accumulate ? y + v : v, for R rows x P panels.
template <size_t R, size_t P>
[[gnu::always_inline]] inline void finish(__m512 (&acc)[R][P], const TileOut& o) {
  __mmask16 mask[P];
#pragma GCC unroll 4
  for (size_t j = 0; j < P; ++j) mask[j] = col_mask(o.ncols, j);
  if (o.bias)
#pragma GCC unroll 8
    for (size_t i = 0; i < R; ++i)
#pragma GCC unroll 4
      for (size_t j = 0; j < P; ++j)
        acc[i][j] = _mm512_add_ps(acc[i][j], _mm512_maskz_loadu_ps(mask[j], o.bias + j * kPanelWidth));
  if (o.e.act != Activation::None) {
    alignas(64) float buf[R * P * kPanelWidth];
    for (size_t i = 0; i < R; ++i)
      for (size_t j = 0; j < P; ++j) _mm512_store_ps(buf + (i * P + j) * kPanelWidth, acc[i][j]);
    quant_gelu(o.e.act, buf, R * P * kPanelWidth);
    for (size_t i = 0; i < R; ++i)
      for (size_t j = 0; j < P; ++j) acc[i][j] = _mm512_load_ps(buf + (i * P + j) * kPanelWidth);
  }
#pragma GCC unroll 8
  for (size_t i = 0; i < R; ++i)
#pragma GCC unroll 4
    for (size_t j = 0; j < P; ++j) {
      float* dst = o.y + i * o.ldy + j * kPanelWidth;
      __m512 v = acc[i][j];
      if (o.e.accumulate) v = _mm512_add_ps(_mm512_maskz_loadu_ps(mask[j], dst), v);
      _mm512_mask_storeu_ps(dst, mask[j], v);
    }
}

}  // namespace
}  // namespace mmgpt::kernels::detail
