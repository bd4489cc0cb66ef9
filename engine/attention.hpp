#pragma once
// Causal multi-head self-attention of T new tokens against a KV cache.
#include <cstddef>

#include "engine/kv_cache.hpp"

namespace mmgpt {

// qkv: [T, 3*d] rows laid out [q | k | v], each d = n_head * head_dim wide.
// The new tokens sit at positions base .. base+T-1. Their keys/values are
// appended to `cache` (layer `layer`), then token t attends to positions
// 0 .. base+t. out: [T, d], heads concatenated. Parallel over heads x tokens;
// each output is computed by one task in a fixed order, so results do not
// depend on the thread count.
void causal_attention(const float* qkv, float* out, size_t tokens, size_t base, size_t layer, size_t n_head,
                      KVCache& cache);

// One head's share of causal_attention for a single new token at position
// base (the decode team splits a step's attention by head): appends the
// head's key and value to `cache`, then writes the head's hd outputs of out.
// scores: base + 1 floats of scratch. next_head: the head this thread runs
// next (its first keys are requested as this head's values run out), or
// n_head for none. The same result as causal_attention.
void causal_attention_head(const float* qkv, float* out, size_t base, size_t layer, size_t head, size_t n_head,
                           KVCache& cache, float* scores, size_t next_head);

}  // namespace mmgpt
