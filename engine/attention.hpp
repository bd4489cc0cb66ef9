#pragma once
// Causal multi-head self-attention of T new tokens against a KV cache.
#include <cstddef>

#include "engine/kv_cache.hpp"

namespace mmgpt {

// qkv: [T, 3*d] rows laid out [q | k | v], each d = n_head * head_dim wide.
// The new tokens sit at positions base .. base+T-1. Their keys/values are
// appended to `cache` (layer `layer`), then token t attends to positions
// 0 .. base+t. out: [T, d], heads concatenated. Parallel over tokens and
// groups of heads (a few tokens, as decode), or over heads and tiles of
// tokens (a prefill). Each token's output for a head is the same bits
// whichever task computes it (kernels::attention_queries), so results depend
// neither on the thread count nor on how a prompt is split into chunks.
void causal_attention(const float* qkv, float* out, size_t tokens, size_t base, size_t layer, size_t n_head,
                      KVCache& cache);

}  // namespace mmgpt
