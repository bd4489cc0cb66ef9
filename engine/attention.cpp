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

// Appends token t's keys and values of heads [h0, h1) (qkv row t) at position
// base + t, rounded to a 16-bit cache's type.
void append_kv(const float* qkv, size_t t, size_t base, size_t layer, size_t h0, size_t h1, size_t n_head,
               KVCache& cache) {
  const size_t hd = cache.head_dim();
  const size_t d = n_head * hd;
  const float* row = qkv + t * 3 * d;
  for (size_t h = h0; h < h1; ++h) {
    kernels::store_kv(row + d + h * hd, hd, cache.dtype(), cache.key_row(layer, h, base + t));
    kernels::store_kv(row + 2 * d + h * hd, hd, cache.dtype(), cache.value_row(layer, h, base + t));
  }
}

// Token t (qkv row t, position base + t), heads [h0, h1), against positions
// 0 .. base + t, a call per group of the cache they span. scores: (h1 - h0) *
// (base + t + 1) floats.
void attend(const float* qkv, float* out, size_t t, size_t base, size_t layer, size_t h0, size_t h1, size_t n_head,
            KVCache& cache, float* scores) {
  const size_t hd = cache.head_dim();
  const size_t d = n_head * hd;
  const size_t n = base + t + 1;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const WeightType kv = cache.dtype();
  for (size_t a = h0; a < h1;) {
    const size_t g = cache.group_of(a), b = std::min(h1, cache.group_begin(g + 1));
    kernels::attention_heads(qkv + t * 3 * d + a * hd, cache.keys(layer, a), cache.values(layer, a), kv, n, b - a, hd,
                             cache.blocks(g), scale, scores + (a - h0) * n, out + t * d + a * hd);
    a = b;
  }
}

// Tokens [t0, t1) (qkv rows, positions base + t), head h, in one call: the
// kernel reads each key and value row once for a tile of tokens. s: (t1 - t0)
// * (base + t1) floats.
void attend_tokens(const float* qkv, float* out, size_t t0, size_t t1, size_t base, size_t layer, size_t h,
                   size_t n_head, KVCache& cache, float* s) {
  const size_t hd = cache.head_dim();
  const size_t d = n_head * hd;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  kernels::attention_queries(qkv + t0 * 3 * d + h * hd, 3 * d, cache.keys(layer, h), cache.values(layer, h),
                             cache.dtype(), base + t0 + 1, t1 - t0, 1, hd, cache.blocks(cache.group_of(h)), scale, s,
                             out + t0 * d + h * hd, d);
}

// A prefill (or a chunk of one): tasks of a head and a tile of tokens.
void prefill_attention(const float* qkv, float* out, size_t tokens, size_t base, size_t layer, size_t n_head,
                       KVCache& cache) {
  const size_t tiles = (tokens + kPrefillTile - 1) / kPrefillTile;
  mmgpt::parallel_for(
      tbb::blocked_range<size_t>(0, tiles * n_head, 1),
      [&](const tbb::blocked_range<size_t>& r) {
        std::vector<float> scores;
        for (size_t i = r.begin(); i < r.end(); ++i) {
          // The last tiles (the longest rows) first, so that short ones fill in at the end.
          const size_t t0 = (tiles - 1 - i / n_head) * kPrefillTile, t1 = std::min(tokens, t0 + kPrefillTile);
          scores.resize((t1 - t0) * (base + t1));
          attend_tokens(qkv, out, t0, t1, base, layer, i % n_head, n_head, cache, scores.data());
        }
      },
      tbb::simple_partitioner());
}

}  // namespace

void causal_attention(const float* qkv, float* out, size_t tokens, size_t base, size_t layer, size_t n_head,
                      KVCache& cache) {
  const size_t hd = cache.head_dim();
  for (size_t t = 0; t < tokens; ++t) append_kv(qkv, t, base, layer, 0, n_head, n_head, cache);
  if (tokens >= kMinPrefillTokens) return prefill_attention(qkv, out, tokens, base, layer, n_head, cache);

  // Tasks: a token's heads in `groups` blocks, as few as keep the threads
  // busy (decode: one block per thread, the cache's groups when it was made
  // for as many threads), since a call reads its heads' keys as one run of
  // each block of the cache and one head a call reads runs of 64 rows far
  // apart (kv_cache.hpp). Ranges of tasks small enough to be worth scheduling
  // together where contexts are short. Each head's result does not depend on
  // the grouping.
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
          attend(qkv, out, t, base, layer, h0, h1, n_head, cache, scores.data());
        }
      },
      tbb::simple_partitioner());
}

}  // namespace mmgpt
