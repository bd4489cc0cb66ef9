#pragma once
// What a matmul does with each result before storing it: the fusions that
// save a pass over the output (bias + activation for the MLP, the residual add for
// the projections). The order is that of the unfused graph, so fused and
// unfused results are identical: v = acc + bias; v = act(v); y = y + v.
#include <cstddef>

namespace mmgpt::kernels {

// ReluSquared: max(v, 0)^2 (nanochat's MLP), exact in every kernel set.
enum class Activation { None = 0, GeluErf = 1, GeluTanh = 2, ReluSquared = 3 };

// The gated MLP's activation of its gate (kernels::glu).
enum class Gate { Silu = 0, GeluErf = 1, GeluTanh = 2 };

struct Epilogue {
  Activation act = Activation::None;
  bool accumulate = false;  // y += result (a residual add) instead of y = result
};

namespace detail {

// Where a kernel's register tile of results goes, and how it is finished.
struct TileOut {
  float* y;           // row m, first column of the tile
  size_t ldy;         // N
  size_t ncols;       // valid columns of the tile (fewer than it holds only at the matrix edge)
  const float* bias;  // at the tile's first column, or null
  Epilogue e;
};

}  // namespace detail

}  // namespace mmgpt::kernels
