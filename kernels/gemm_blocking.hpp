#pragma once
// Cache blocking of the panel GEMM, shared by the per-ISA kernels (which walk
// the blocks) and kernels.cpp (which provides the scratch for partial sums).
//
// The microkernel reads a block of W panels (KC k-steps x 16 floats, 16 KiB at
// KC = 256: stays in L1) against a block of x rows (MC x KC floats, 256 KiB:
// stays in L2). When the whole of x fits that budget there is no K blocking at
// all; otherwise the sums over K are carried between K blocks in a scratch
// array. Either way every output is one FMA chain over k = 0 .. K-1 from zero,
// so blocking, tiling and thread splits never change a result (docs/kernels.md,
// "The GEMM: blocking and microkernels").
#include <cstddef>

#include "core/panel_layout.hpp"

namespace mmgpt::kernels::detail {

inline constexpr size_t kGemmKC = 256;
inline constexpr size_t kGemmMC = 240;  // a multiple of the GEMM tile's MR (6, gemm_simd.hpp)
inline constexpr size_t kGemmL2Budget = 256 * 1024;

struct GemmBlocking {
  size_t kc, mc;
  bool blocked;  // K is split, so partial sums go through scratch
};

inline GemmBlocking gemm_blocking(size_t M, size_t K) {
  if (M <= 1 || M * K * sizeof(float) <= kGemmL2Budget || K <= kGemmKC) return {K, M, false};
  return {kGemmKC, kGemmMC, true};
}

// Scratch floats needed to compute panels [p0, p1) of an M-row product.
inline size_t gemm_scratch_floats(size_t M, size_t K, size_t panels) {
  const GemmBlocking b = gemm_blocking(M, K);
  return b.blocked ? (M < b.mc ? M : b.mc) * panels * kPanelWidth : 0;
}

}  // namespace mmgpt::kernels::detail
