#pragma once
// A tensor of a source checkpoint (torch.save or safetensors), seen as
// row-major float32. Its values are either held in memory (`data`) or read on
// demand (`reader`) from the mapped checkpoint, a range of rows at a time, so
// that converting a checkpoint never needs it all in memory at once. The
// converter works on these; the engine never sees them (it reads the mapped
// .mmgpt file).
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "formats/source_element.hpp"

namespace mmgpt {

class FileBytes;

struct HostTensor {
  // Writes rows [first, first + count) as f32 to out (count * row_size() floats).
  using Reader = std::function<void(uint64_t first, uint64_t count, float* out)>;

  std::vector<uint64_t> shape;  // PyTorch order, outermost first; empty for a scalar
  std::vector<float> data;      // the values, C order, when held in memory; else empty
  Reader reader;                // else: where they are read from
  std::string source_dtype;     // dtype in the source file: "float32", "float16", "bfloat16", ...

  uint64_t numel() const {
    uint64_t n = 1;
    for (uint64_t s : shape) n *= s;
    return n;
  }
  // A row is everything under one index of the first dimension; a scalar is one row of one.
  uint64_t rows() const { return shape.empty() ? 1 : shape[0]; }
  uint64_t row_size() const {
    uint64_t n = 1;
    for (size_t d = 1; d < shape.size(); ++d) n *= shape[d];
    return n;
  }
  // True when the values can be read (false for a shape-only placeholder).
  bool readable() const { return reader || data.size() == numel(); }

  // Rows [first, first + count) as f32 into out.
  void read_rows(uint64_t first, uint64_t count, float* out) const;
  // Every value, C order (the whole tensor in memory: for small tensors and tests).
  std::vector<float> values() const;
};

// The elements of one type stored at `bytes` in a mapped file (a torch
// storage, a safetensors tensor's data), kept alive by `file`.
struct StoredElements {
  std::shared_ptr<const FileBytes> file;
  const uint8_t* bytes = nullptr;
  SourceElement element{};
  uint64_t numel = 0;
};

// A storage as a 1-D tensor of `numel` elements read on demand from `stored`.
HostTensor stored_storage(StoredElements stored, std::string source_dtype);

// The view of a 1-D `storage` tensor (held or stored) with `shape`, whose
// element (i0, i1, ...) is storage[offset + i0 * strides[0] + i1 * strides[1] + ...]:
// a tensor read on demand, which keeps `storage` alive. The caller has checked
// that every index stays inside the storage.
HostTensor strided_view(std::shared_ptr<const HostTensor> storage, uint64_t offset, std::vector<uint64_t> shape,
                        std::vector<uint64_t> strides);

}  // namespace mmgpt
