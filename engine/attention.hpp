#pragma once
// Causal multi-head self-attention of T new tokens against a KV cache, with
// grouped-query attention and the per-token prologue of the modern block
// (QK-norm, rotary positions).
#include <cstddef>

#include "engine/kv_cache.hpp"
#include "formats/model_config.hpp"

namespace mmgpt {

// The attention of one layer, from the model's config.
struct AttentionSpec {
  size_t n_head = 0, n_kv_head = 0, head_dim = 0;  // query head h reads key/value head h / (n_head / n_kv_head)
  float scale = 0;                                 // of the scores
  // Rotary positions on the first rope_dims values of each query and key head
  // (0: none); cos / sin: rope_dims / 2 values per token of the step.
  size_t rope_dims = 0;
  bool rope_interleaved = false;
  const float* rope_cos = nullptr;
  const float* rope_sin = nullptr;
  // Per-head RMS norm of the queries and keys (weights null for a plain one),
  // multiplied by qk_norm_scale; before the rotation, or after it.
  QkNorm qk_norm = QkNorm::None;
  const float* q_norm = nullptr;
  const float* k_norm = nullptr;
  float norm_eps = 0, qk_norm_scale = 1;
  bool qk_norm_after_rope = false;
  // A sliding window: a query sees its last `window` positions, itself
  // included (0: all).
  size_t window = 0;

  size_t q_width() const { return n_head * head_dim; }
  size_t row_width() const { return (n_head + 2 * n_kv_head) * head_dim; }
};

// The spec of `config`'s layers: sizes, scale, rotary and QK-norm settings
// (the caller sets the norm weights and the step's angles).
AttentionSpec attention_spec(const ModelConfig& config);

// qkv: [T, (n_head + 2 n_kv_head) head_dim] rows laid out [q | k | v]. The
// new tokens sit at positions base .. base+T-1. Each row's queries and keys
// first get the prologue (in place), its keys and values are appended to
// `cache` (layer `layer`), then token t attends to positions 0 .. base+t.
// out: [T, n_head head_dim], heads concatenated. Parallel over tokens and
// groups of heads (a few tokens, as decode), or over heads and tiles of
// tokens (a prefill). Each token's output for a head is the same bits
// whichever task computes it (kernels::attention_queries), so results depend
// neither on the thread count nor on how a prompt is split into chunks.
void causal_attention(float* qkv, float* out, size_t tokens, size_t base, size_t layer, const AttentionSpec& spec,
                      KVCache& cache);

}  // namespace mmgpt
