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

// Heads [h0, h1)'s share of causal_attention for a single new token at
// position base (the decode team splits a step's attention into blocks of
// heads): appends their keys and values to `cache`, then writes their
// outputs of out. scores: (h1 - h0) * (base + 1) floats of scratch. The same
// result as causal_attention.
void causal_attention_heads(const float* qkv, float* out, size_t base, size_t layer, size_t h0, size_t h1,
                            size_t n_head, KVCache& cache, float* scores);

}  // namespace mmgpt
