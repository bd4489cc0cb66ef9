#pragma once
// The few rearrangements the layouts need to reach the canonical [out, in]
// matrices: transposing Conv1D's [in, out] and stacking separate Q/K/V rows.
#include <cstdint>
#include <memory>
#include <vector>

#include "tools/convert/state_dict.hpp"

namespace mmgpt::convert {

// Conversion reads a tensor, or walks its source, a piece of about this many
// f32 bytes at a time, so it holds pieces, never whole tensors.
inline constexpr uint64_t kPieceBytes = uint64_t(16) << 20;

// A buffer of at least `n` uninitialised elements, taken from this thread's
// pool and given back at scope exit: a piece buffer allocated afresh for each
// tensor costs a page fault and the zeroing of every 4 KB, more than the copy
// itself. Nested users (a reader inside a reader) get different buffers. The
// pool lives as long as its thread (a few piece buffers: tens of MB).
template <class T>
class Scratch {
 public:
  explicit Scratch(uint64_t n) {
    std::vector<Block>& pool = free_blocks();
    if (!pool.empty()) {
      held_ = std::move(pool.back());
      pool.pop_back();
    }
    if (held_.size < n) {
      held_.data.reset();
      held_ = {std::make_unique_for_overwrite<T[]>(static_cast<size_t>(n)), n};
    }
  }
  ~Scratch() { free_blocks().push_back(std::move(held_)); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  T* get() const { return held_.data.get(); }

 private:
  struct Block {
    std::unique_ptr<T[]> data;
    uint64_t size = 0;
  };
  static std::vector<Block>& free_blocks() {
    thread_local std::vector<Block> blocks;
    return blocks;
  }
  Block held_;
};

// Each returns a tensor read on demand from its sources, which it keeps alive;
// nothing is copied until the converter reads it.

// [r, c] -> [c, r]. Each read walks the whole source, a piece at a time.
TensorPtr transpose2d(TensorPtr t);
// Stacks tensors along their first dimension; all must agree on the others.
TensorPtr concat_rows(std::vector<TensorPtr> parts);
// Rows [first, first + count) of t (along its first dimension).
TensorPtr slice_rows(TensorPtr t, uint64_t first, uint64_t count);
// Same shape and bit-identical values (a tied head saved as its own copy),
// compared a piece at a time.
bool same_values(const HostTensor& a, const HostTensor& b);

}  // namespace mmgpt::convert
