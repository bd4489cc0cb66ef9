#pragma once
// Causal multi-head self-attention of T new tokens against a KV cache.
#include <cstddef>

#include "engine/kv_cache.hpp"

namespace mmgpt {

// qkv: [T, 3*d] rows laid out [q | k | v], each d = n_head * head_dim wide.
// The new tokens sit at positions base .. base+T-1. Their keys/values are
// appended to `cache` (layer `layer`), then token t attends to positions
// 0 .. base+t. out: [T, d], heads concatenated. Parallel over tokens and
// groups of heads; each head's output is the same whichever heads share its
// task (kernels::attention_heads), so results do not depend on the thread
// count.
void causal_attention(const float* qkv, float* out, size_t tokens, size_t base, size_t layer, size_t n_head,
                      KVCache& cache);

}  // namespace mmgpt
