#pragma once
// Where the keys (or the values) of consecutive heads lie in a KV cache, as
// the attention kernels read them (kernels.hpp attention_heads).
#include <cstddef>

namespace mmgpt::kernels {

// In elements: positions in blocks of `block` (a multiple of 16), head h's
// rows of block b (hd elements each, contiguous) from b * block_stride + h *
// head_stride. Rows of one head stored one after another are contiguous_rows.
struct KVBlocks {
    size_t block, head_stride, block_stride;
};

// n rows of one head, one after another: a single block of n rounded up to 16.
constexpr KVBlocks contiguous_rows(size_t n) { return {(n + 15) / 16 * 16, 0, 0}; }

}  // namespace mmgpt::kernels
