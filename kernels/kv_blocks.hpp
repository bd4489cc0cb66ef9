#pragma once
// Where the keys (or the values) of consecutive heads lie in a KV cache, as
// the attention kernels read them (kernels.hpp attention_heads and
// attention_queries).
#include <cstddef>

namespace mmgpt::kernels {

// The block of positions is a multiple of this (so of every vector width:
// the scores' groups of W keys then start at the same positions whatever the
// block, attention_simd.hpp).
constexpr size_t kKVBlockMultiple = 16;

// In elements: positions in blocks of `block` (a multiple of
// kKVBlockMultiple), head h's rows of block b (hd elements each, contiguous)
// from b * block_stride + h * head_stride. Rows of one head stored one after
// another are contiguous_rows.
struct KVBlocks {
  size_t block, head_stride, block_stride;
};

// n rows of one head, one after another: a single block of n rounded up.
constexpr KVBlocks contiguous_rows(size_t n) {
  return {(n + kKVBlockMultiple - 1) / kKVBlockMultiple * kKVBlockMultiple, 0, 0};
}

}  // namespace mmgpt::kernels
