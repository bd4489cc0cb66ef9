#include "formats/host_tensor.hpp"

#include <cstring>

#include "formats/error.hpp"
#include "formats/file_bytes.hpp"

namespace mmgpt {

void HostTensor::read_rows(uint64_t first, uint64_t count, float* out) const {
  if (count == 0) return;
  if (first > rows() || count > rows() - first)
    throw Error("internal: rows [" + std::to_string(first) + ", +" + std::to_string(count) + ") of a tensor of " +
                std::to_string(rows()) + " rows");
  if (reader) return reader(first, count, out);
  if (data.size() != numel()) throw Error("internal: reading a tensor that holds no values (a placeholder)");
  const uint64_t row = row_size();
  std::memcpy(out, data.data() + first * row, count * row * sizeof(float));
}

std::vector<float> HostTensor::values() const {
  if (!reader) {
    if (data.size() != numel()) throw Error("internal: reading a tensor that holds no values (a placeholder)");
    return data;
  }
  std::vector<float> v(static_cast<size_t>(numel()));
  if (!v.empty()) read_rows(0, rows(), v.data());
  return v;
}

HostTensor stored_storage(StoredElements stored, std::string source_dtype) {
  HostTensor t;
  t.shape = {stored.numel};
  t.source_dtype = std::move(source_dtype);
  const uint64_t size = source_element_size(stored.element);
  t.reader = [s = std::move(stored), size](uint64_t first, uint64_t count, float* out) {
    const uint8_t* p = s.bytes + first * size;
    widen_to_f32(p, count, s.element, out);
    if (s.file) s.file->release(p, count * size);
  };
  return t;
}

HostTensor strided_view(std::shared_ptr<const HostTensor> storage, uint64_t offset, std::vector<uint64_t> shape,
                        std::vector<uint64_t> strides) {
  HostTensor t;
  t.shape = shape;
  t.source_dtype = storage->source_dtype;
  const size_t dims = shape.size();
  uint64_t row = 1;
  bool dense = true;  // each row's elements are consecutive in the storage
  for (size_t d = dims; d-- > 1;) {
    if (shape[d] != 1 && strides[d] != row) dense = false;
    row *= shape[d];
  }
  t.reader = [storage = std::move(storage), offset, shape = std::move(shape), strides = std::move(strides), dims, row,
              dense](uint64_t first, uint64_t count, float* out) {
    if (dims == 0) return storage->read_rows(offset, 1, out);
    if (row == 0) return;
    if (dense && (count == 1 || strides[0] == row))  // the rows are one run
      return storage->read_rows(offset + first * strides[0], count * row, out);
    for (uint64_t r = first; r < first + count; ++r) {
      const uint64_t base = offset + r * strides[0];
      if (dense) {
        storage->read_rows(base, row, out);
        out += row;
        continue;
      }
      // Walk the inner indices with an odometer; the last one is the inner loop.
      std::vector<uint64_t> index(dims, 0);
      const uint64_t inner = shape[dims - 1], inner_stride = strides[dims - 1];
      for (uint64_t done = 0; done < row; done += inner) {
        uint64_t at = base;
        for (size_t d = 1; d + 1 < dims; ++d) at += index[d] * strides[d];
        if (inner_stride == 1) {
          storage->read_rows(at, inner, out);
        } else {
          for (uint64_t k = 0; k < inner; ++k) storage->read_rows(at + k * inner_stride, 1, out + k);
        }
        out += inner;
        for (size_t d = dims - 1; d-- > 1;) {
          if (++index[d] < shape[d]) break;
          index[d] = 0;
        }
      }
    }
  };
  return t;
}

}  // namespace mmgpt
