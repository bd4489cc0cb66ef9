#pragma once
// Zero-initialised float storage from anonymous memory advised MADV_HUGEPAGE.
// For the KV cache: decode reads all of it every step, and on 4 KiB pages that
// read is slowed by TLB misses (docs/kernels.md, "Attention and the KV
// cache"). The kernel zero-fills pages on first touch, so unlike std::vector
// nothing is written at construction and only the part of the buffer a
// sequence reaches becomes resident.
#include <cstddef>

namespace mmgpt {

class HugePageBuffer {
 public:
  HugePageBuffer() = default;
  explicit HugePageBuffer(size_t floats);
  HugePageBuffer(const HugePageBuffer& other);  // copies the contents
  HugePageBuffer& operator=(const HugePageBuffer& other);
  HugePageBuffer(HugePageBuffer&& other) noexcept;
  HugePageBuffer& operator=(HugePageBuffer&& other) noexcept;
  ~HugePageBuffer();

  float* data() { return data_; }
  // The same storage as bytes, for 16-bit contents (a bf16 / f16 KV cache
  // keeps 2 elements per float slot; the mapping has no declared type).
  void* bytes() { return data_; }
  const float* data() const { return data_; }
  size_t size() const { return size_; }
  // Makes every page resident now (writing zeros over the contents), so that
  // a later first write does not wait for the kernel to fault pages in.
  void fault_in();

 private:
  void release() noexcept;
  float* data_ = nullptr;  // 2 MiB-aligned inside the mapping
  size_t size_ = 0;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
};

}  // namespace mmgpt
