#include "tools/convert/tensor_ops.hpp"

#include <algorithm>
#include <cstring>

#include "formats/error.hpp"

namespace mmgpt::convert {

TensorPtr transpose2d(const HostTensor& t) {
  if (t.shape.size() != 2 || t.data.size() != t.numel())
    throw Error("internal: transpose2d needs a 2-D tensor, got " + shape_str(t.shape));
  const uint64_t rows = t.shape[0], cols = t.shape[1];
  auto out = std::make_shared<HostTensor>();
  out->shape = {cols, rows};
  out->source_dtype = t.source_dtype;
  out->data.resize(t.data.size());
  // Blocked so both sides stay in cache for the 50257 x 768 sized matrices.
  constexpr uint64_t B = 64;
  for (uint64_t r0 = 0; r0 < rows; r0 += B)
    for (uint64_t c0 = 0; c0 < cols; c0 += B)
      for (uint64_t r = r0; r < rows && r < r0 + B; ++r)
        for (uint64_t c = c0; c < cols && c < c0 + B; ++c) out->data[c * rows + r] = t.data[r * cols + c];
  return out;
}

TensorPtr concat_rows(const std::vector<const HostTensor*>& parts) {
  if (parts.empty()) throw Error("internal: concat_rows of nothing");
  auto out = std::make_shared<HostTensor>();
  out->shape = parts[0]->shape;
  out->source_dtype = parts[0]->source_dtype;
  if (out->shape.empty()) throw Error("internal: concat_rows of scalars");
  out->shape[0] = 0;
  for (const HostTensor* p : parts) {
    if (p->shape.size() != parts[0]->shape.size() ||
        !std::equal(p->shape.begin() + 1, p->shape.end(), parts[0]->shape.begin() + 1))
      throw Error("internal: concat_rows of mismatched shapes " + shape_str(p->shape) + " and " +
                  shape_str(parts[0]->shape));
    out->shape[0] += p->shape[0];
    out->data.insert(out->data.end(), p->data.begin(), p->data.end());
  }
  return out;
}

bool same_values(const HostTensor& a, const HostTensor& b) {
  return a.shape == b.shape && a.data.size() == b.data.size() &&
         (a.data.empty() || std::memcmp(a.data.data(), b.data.data(), a.data.size() * sizeof(float)) == 0);
}

}  // namespace mmgpt::convert
