#include "engine/huge_page_buffer.hpp"

#include <sys/mman.h>

#include <cstdint>
#include <cstring>
#include <new>
#include <utility>

#include "core/platform.hpp"

namespace mmgpt {

namespace {
constexpr size_t kHugePage = size_t{2} << 20;
}

HugePageBuffer::HugePageBuffer(size_t floats) : size_(floats) {
  if (floats == 0) return;
  if (floats > (SIZE_MAX - 2 * kHugePage) / sizeof(float)) throw std::bad_alloc();
  const size_t bytes = (floats * sizeof(float) + kHugePage - 1) / kHugePage * kHugePage;
  // One huge page of slack so the data can start on a 2 MiB boundary: the
  // kernel only backs aligned 2 MiB ranges with huge pages.
  map_bytes_ = bytes + kHugePage;
  map_ = ::mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    throw std::bad_alloc();
  }
  const uintptr_t aligned = (reinterpret_cast<uintptr_t>(map_) + kHugePage - 1) / kHugePage * kHugePage;
  data_ = reinterpret_cast<float*>(aligned);
  platform::advise_huge_pages(data_, bytes);  // advisory: where THP is off this is ordinary memory
}

void HugePageBuffer::fault_in() {
  if (size_ != 0) std::memset(data_, 0, size_ * sizeof(float));
}

HugePageBuffer::HugePageBuffer(const HugePageBuffer& other) : HugePageBuffer(other.size_) {
  if (size_ != 0) std::memcpy(data_, other.data_, size_ * sizeof(float));
}

HugePageBuffer& HugePageBuffer::operator=(const HugePageBuffer& other) {
  if (this != &other) *this = HugePageBuffer(other);
  return *this;
}

HugePageBuffer::HugePageBuffer(HugePageBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      map_(std::exchange(other.map_, nullptr)),
      map_bytes_(std::exchange(other.map_bytes_, 0)) {}

HugePageBuffer& HugePageBuffer::operator=(HugePageBuffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    map_ = std::exchange(other.map_, nullptr);
    map_bytes_ = std::exchange(other.map_bytes_, 0);
  }
  return *this;
}

HugePageBuffer::~HugePageBuffer() { release(); }

void HugePageBuffer::release() noexcept {
  if (map_ != nullptr) ::munmap(map_, map_bytes_);
  map_ = nullptr;
  data_ = nullptr;
  size_ = 0;
  map_bytes_ = 0;
}

}  // namespace mmgpt
