#pragma once
// The activations x[M, K] of a matmul, in the form its weight type's kernels
// multiply: as they are, quantized to q8 blocks, or rounded to bf16.
#include <cstdint>

#include "core/quant_layout.hpp"

namespace mmgpt::kernels::detail {

enum class XForm {
  F32,       // as they are
  Q8Blocks,  // quantized per block of 32 (quantize_rows; weight types whose prep is Q8Blocks)
  Bf16Rows,  // rounded to bf16, rows of bf16dot_row_elems(K) values (bf16dot_round_rows)
};

// x in the form a set of kernels wants: the member its XForm names.
struct PreparedX {
  const float* f32 = nullptr;
  QuantizedRows q8{};
  const uint16_t* bf16 = nullptr;
};

}  // namespace mmgpt::kernels::detail
