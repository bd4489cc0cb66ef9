#pragma once
// The few rearrangements the layouts need to reach the canonical [out, in]
// matrices: transposing Conv1D's [in, out] and stacking separate Q/K/V rows.
#include <vector>

#include "tools/convert/state_dict.hpp"

namespace mmgpt::convert {

// [r, c] -> [c, r].
TensorPtr transpose2d(const HostTensor& t);
// Stacks tensors along their first dimension; all must agree on the others.
TensorPtr concat_rows(const std::vector<const HostTensor*>& parts);
// Same shape and bit-identical values (a tied head saved as its own copy).
bool same_values(const HostTensor& a, const HostTensor& b);

}  // namespace mmgpt::convert
