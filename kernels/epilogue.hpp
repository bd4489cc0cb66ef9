#pragma once
// What a matmul does with each result before storing it: the fusions that
// save a pass over the output (bias + GELU for the MLP, the residual add for
// the projections). The order is that of the unfused graph, so fused and
// unfused results are identical: v = acc + bias; v = act(v); y = y + v.
#include <cstddef>

namespace mmgpt::kernels {

enum class Activation { None = 0, GeluErf = 1, GeluTanh = 2 };

struct Epilogue {
  Activation act = Activation::None;
  bool accumulate = false;  // y += result (a residual add) instead of y = result
};

}  // namespace mmgpt::kernels
