#pragma once
// Internal, AArch64 kernel TUs only (quant_impl.hpp, bf16dot.cpp):
// what their register tiles share. A tile of R rows x C column vectors (4
// f32 each) of sums is finished as every matmul's epilogue defines it
// (epilogue.hpp): v = acc + bias; v = act(v); y (+)= v, the GELU through
// quant_gelu (registry.hpp, the active set's vector GELU).
//
// Everything here has internal linkage (an unnamed namespace), so each TU
// keeps its own copy compiled with its own -march: no inline function built
// for one extension can be merged by the linker into a TU for another.
#if !defined(__aarch64__)
#error "arm/neon/tile_finish.hpp is for aarch64 only"
#endif
#include <arm_neon.h>

#include <cstddef>
#include <cstring>
#include <utility>

#include "kernels/epilogue.hpp"
#include "kernels/registry.hpp"

namespace mmgpt::kernels::detail {
namespace {

// f(std::integral_constant<int, 0>) ... f(integral_constant<int, N-1>): lane
// arguments of the NEON intrinsics must be constants.
template <int N, class F>
inline __attribute__((always_inline)) void static_for(F&& f) {
  [&]<int... I>(std::integer_sequence<int, I...>) { (f(std::integral_constant<int, I>{}), ...); }
  (std::make_integer_sequence<int, N>{});
}

// Rows r of the tile to y + r * ldy, columns [0, ncols) (ncols < 4C only at
// the matrix edge); y and bias (or null) at the tile's first column.
template <size_t R, size_t C>
void finish(const float32x4_t (&acc)[R][C], float* y, size_t ldy, size_t ncols, const float* bias, Epilogue e) {
  for (size_t r = 0; r < R; ++r) {
    float v[C * 4];
    for (size_t c = 0; c < C; ++c) vst1q_f32(v + c * 4, acc[r][c]);
    if (bias)
      for (size_t i = 0; i < ncols; ++i) v[i] = v[i] + bias[i];
    if (e.act != Activation::None) quant_gelu(e.act, v, ncols);
    float* dst = y + r * ldy;
    if (e.accumulate)
      for (size_t i = 0; i < ncols; ++i) dst[i] = dst[i] + v[i];
    else
      std::memcpy(dst, v, ncols * sizeof(float));
  }
}

}  // namespace
}  // namespace mmgpt::kernels::detail
