#include "engine/attention.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/partitioner.h>

#include "engine/even_split.hpp"
#include "kernels/kernels.hpp"
#include "kernels/parallel.hpp"

namespace mmgpt {

namespace {

// Tokens of a prefill attention task: enough to reuse each key and value row
// across the kernel's tiles of queries, few enough for the tasks to balance.
constexpr size_t kPrefillTile = 32;
// Fewer new tokens (decode, a batch's steps) are split by token and heads.
constexpr size_t kMinPrefillTokens = 4;

// Token t of the step (its qkv row, at position pos): the prologue on its
// queries and keys, in place, then its keys and values into the cache,
// rounded to a 16-bit cache's type.
void prepare_token(float* row, size_t t, size_t pos, size_t layer, const AttentionSpec& a, KVCache& cache) {
  const size_t hd = a.head_dim;
  float* q = row;
  float* k = row + a.q_width();
  const float* v = k + a.n_kv_head * hd;
  auto qk_norm = [&] {
    kernels::rmsnorm(q, a.q_norm, q, a.n_head, hd, a.norm_eps);
    kernels::rmsnorm(k, a.k_norm, k, a.n_kv_head, hd, a.norm_eps);
    if (a.qk_norm_scale != 1.0f)
      for (size_t i = 0; i < (a.n_head + a.n_kv_head) * hd; ++i) q[i] *= a.qk_norm_scale;  // k follows q in the row
  };
  if (a.qk_norm != QkNorm::None && !a.qk_norm_after_rope) qk_norm();
  if (a.rope_dims != 0) {
    const float* c = a.rope_cos + t * (a.rope_dims / 2);
    const float* s = a.rope_sin + t * (a.rope_dims / 2);
    kernels::rope(q, a.n_head, hd, a.rope_dims, c, s, a.rope_interleaved);
    kernels::rope(k, a.n_kv_head, hd, a.rope_dims, c, s, a.rope_interleaved);
  }
  if (a.qk_norm != QkNorm::None && a.qk_norm_after_rope) qk_norm();
  for (size_t h = 0; h < a.n_kv_head; ++h) {
    kernels::store_kv(k + h * hd, hd, cache.dtype(), cache.key_row(layer, h, pos));
    kernels::store_kv(v + h * hd, hd, cache.dtype(), cache.value_row(layer, h, pos));
  }
}

// The first position a call over n positions need read: the start of the
// block holding the window's first position (the kernel gives the ones
// before that probability 0).
size_t window_start(size_t n, const AttentionSpec& a) {
  return a.window != 0 && n > a.window ? (n - a.window) / KVCache::kBlock * KVCache::kBlock : 0;
}

// Token t (qkv row t, position base + t), query heads [h0, h1), against
// positions 0 .. base + t (or its window of them): a call per group of the
// cache the heads' key/value heads span, each query head reading its
// key/value head's rows (with GQA, the query heads of one key/value head
// read each of its rows once for all of them). scores: (h1 - h0) * (base + t + 1) floats.
void attend(const float* qkv, float* out, size_t t, size_t base, size_t layer, size_t h0, size_t h1,
            const AttentionSpec& a, KVCache& cache, float* scores) {
  const size_t hd = a.head_dim, rep = a.n_head / a.n_kv_head;
  const size_t p0 = window_start(base + t + 1, a), n = base + t + 1 - p0;
  const float* q = qkv + t * a.row_width();
  float* o = out + t * a.q_width();
  for (size_t h = h0; h < h1;) {
    const size_t j = h / rep, g = cache.group_of(j), e = std::min(h1, cache.group_begin(g + 1) * rep);
    kernels::KVBlocks at = cache.blocks(g);
    at.rep = rep, at.first = h % rep;
    kernels::attention_heads(q + h * hd, cache.key_row(layer, j, p0), cache.value_row(layer, j, p0), cache.dtype(), n,
                             e - h, hd, at, a.scale, scores + (h - h0) * n, o + h * hd, a.window);
    h = e;
  }
}

// Tokens [t0, t1) (qkv rows, positions base + t), query head h, in one call:
// the kernel reads each key and value row once for a tile of tokens. s:
// (t1 - t0) * (base + t1) floats.
void attend_tokens(const float* qkv, float* out, size_t t0, size_t t1, size_t base, size_t layer, size_t h,
                   const AttentionSpec& a, KVCache& cache, float* s) {
  const size_t hd = a.head_dim, j = h / (a.n_head / a.n_kv_head);
  const size_t p0 = window_start(base + t0 + 1, a);
  kernels::attention_queries(qkv + t0 * a.row_width() + h * hd, a.row_width(), cache.key_row(layer, j, p0),
                             cache.value_row(layer, j, p0), cache.dtype(), base + t0 + 1 - p0, t1 - t0, 1, hd,
                             cache.blocks(cache.group_of(j)), a.scale, s, out + t0 * a.q_width() + h * hd, a.q_width(),
                             a.window);
}

// A prefill (or a chunk of one): tasks of a query head and a tile of tokens.
void prefill_attention(const float* qkv, float* out, size_t tokens, size_t base, size_t layer, const AttentionSpec& a,
                       KVCache& cache) {
  const size_t tiles = (tokens + kPrefillTile - 1) / kPrefillTile, n_head = a.n_head;
  mmgpt::parallel_for(
      tbb::blocked_range<size_t>(0, tiles * n_head, 1),
      [&](const tbb::blocked_range<size_t>& r) {
        std::vector<float> scores;
        for (size_t i = r.begin(); i < r.end(); ++i) {
          // The last tiles (the longest rows) first, so that short ones fill in at the end.
          const size_t t0 = (tiles - 1 - i / n_head) * kPrefillTile, t1 = std::min(tokens, t0 + kPrefillTile);
          scores.resize((t1 - t0) * (base + t1));
          attend_tokens(qkv, out, t0, t1, base, layer, i % n_head, a, cache, scores.data());
        }
      },
      tbb::simple_partitioner());
}

}  // namespace

AttentionSpec attention_spec(const ModelConfig& c) {
  AttentionSpec a;
  a.n_head = c.n_head;
  a.n_kv_head = c.kv_heads();
  a.head_dim = c.head_size();
  a.scale = c.scores_scale();
  a.rope_dims = c.pos_embedding == PosEmbedding::Rotary ? c.rope_dims : 0;
  a.rope_interleaved = c.rope_interleaved;
  a.qk_norm = c.qk_norm;
  a.norm_eps = c.norm_eps;
  a.qk_norm_scale = c.qk_norm_scale;
  a.qk_norm_after_rope = c.qk_norm_after_rope;
  return a;
}

void causal_attention(float* qkv, float* out, size_t tokens, size_t base, size_t layer, const AttentionSpec& a,
                      KVCache& cache) {
  for (size_t t = 0; t < tokens; ++t) prepare_token(qkv + t * a.row_width(), t, base + t, layer, a, cache);
  if (tokens >= kMinPrefillTokens) return prefill_attention(qkv, out, tokens, base, layer, a, cache);

  // Tasks: a token's query heads in `groups` blocks, as few as keep the
  // threads busy (decode: one block per thread, the cache's groups when it
  // was made for as many threads and there is no GQA), since a call reads
  // its heads' keys as one run of each block of the cache and one head a
  // call reads runs of 64 rows far apart (kv_cache.hpp). Ranges of tasks
  // small enough to be worth scheduling together where contexts are short.
  // Each head's result does not depend on the grouping.
  const size_t n_head = a.n_head, hd = a.head_dim;
  const size_t groups = std::min(n_head, std::max<size_t>(1, (mmgpt::thread_budget() + tokens - 1) / tokens));
  const size_t tasks = groups * tokens;
  const size_t work_per_task = (base + (tokens + 1) / 2) * hd * 2 * n_head / groups + 1;  // multiply-adds, on average
  const size_t grain = std::max<size_t>(1, (size_t{1} << 15) / work_per_task);
  mmgpt::parallel_for(
      tbb::blocked_range<size_t>(0, tasks, grain),
      [&](const tbb::blocked_range<size_t>& r) {
        std::vector<float> scores;
        for (size_t i = r.begin(); i < r.end(); ++i) {
          const size_t t = i / groups, g = i % groups;
          const size_t h0 = even_split_begin(n_head, groups, g), h1 = even_split_begin(n_head, groups, g + 1);
          scores.resize((h1 - h0) * (base + t + 1));
          attend(qkv, out, t, base, layer, h0, h1, a, cache, scores.data());
        }
      },
      tbb::simple_partitioner());
}

}  // namespace mmgpt
