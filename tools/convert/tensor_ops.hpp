#pragma once
// The few rearrangements the layouts need to reach the canonical [out, in]
// matrices: transposing Conv1D's [in, out] and stacking separate Q/K/V rows.
#include <cstdint>
#include <vector>

#include "tools/convert/state_dict.hpp"

namespace mmgpt::convert {

// Conversion reads a tensor, or walks its source, a piece of about this many
// f32 bytes at a time, so it holds pieces, never whole tensors.
inline constexpr uint64_t kPieceBytes = uint64_t(16) << 20;

// Each returns a tensor read on demand from its sources, which it keeps alive;
// nothing is copied until the converter reads it.

// [r, c] -> [c, r]. Each read walks the whole source, a piece at a time.
TensorPtr transpose2d(TensorPtr t);
// Stacks tensors along their first dimension; all must agree on the others.
TensorPtr concat_rows(std::vector<TensorPtr> parts);
// Same shape and bit-identical values (a tied head saved as its own copy),
// compared a piece at a time.
bool same_values(const HostTensor& a, const HostTensor& b);

}  // namespace mmgpt::convert
