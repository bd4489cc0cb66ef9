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
// kKVBlockMultiple), the rows of key/value head j in block b (hd elements
// each, contiguous) from b * block_stride + j * head_stride. Query head h of a
// call reads key/value head (first + h) / rep: rep query heads share each
// key/value head (grouped-query attention), and `first` is the call's first
// query head's place among its key/value head's (rep 1: head h reads head h).
// Rows of one head stored one after another are contiguous_rows.
struct KVBlocks {
  size_t block, head_stride, block_stride;
  size_t rep = 1, first = 0;

  // Query head h's rows of block 0, from the call's k (or v).
  size_t head_offset(size_t h) const { return (first + h) / rep * head_stride; }
};

// n rows of one head, one after another: a single block of n rounded up.
constexpr KVBlocks contiguous_rows(size_t n) {
  return {(n + kKVBlockMultiple - 1) / kKVBlockMultiple * kKVBlockMultiple, 0, 0};
}

}  // namespace mmgpt::kernels
