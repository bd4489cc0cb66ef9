#include "engine/attention.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/partitioner.h>

#include "kernels/kernels.hpp"
#include "kernels/parallel.hpp"

namespace mmgpt {

namespace {

// Appends token t's key and value of head h (qkv row t) at position base + t,
// rounded to a 16-bit cache's type.
void append_kv(const float* qkv, size_t t, size_t base, size_t layer, size_t h, size_t n_head, KVCache& cache) {
  const size_t hd = cache.head_dim();
  const size_t d = n_head * hd;
  const auto kv = static_cast<kernels::WeightType>(cache.dtype());  // same ids: F32, BF16, F16
  const float* row = qkv + t * 3 * d;
  void* k = cache.keys(layer, h);
  void* v = cache.values(layer, h);
  if (kv == kernels::WeightType::F32) {
    std::memcpy(static_cast<float*>(k) + (base + t) * hd, row + d + h * hd, hd * sizeof(float));
    std::memcpy(static_cast<float*>(v) + (base + t) * hd, row + 2 * d + h * hd, hd * sizeof(float));
  } else {
    kernels::narrow(row + d + h * hd, hd, kv, static_cast<uint16_t*>(k) + (base + t) * hd);
    kernels::narrow(row + 2 * d + h * hd, hd, kv, static_cast<uint16_t*>(v) + (base + t) * hd);
  }
}

// Token t (qkv row t, position base + t) of head h against positions 0 .. base + t.
// next_keys: the keys of the row this thread attends next, or null (a prefetch hint).
void attend(const float* qkv, float* out, size_t t, size_t base, size_t layer, size_t h, size_t n_head,
            KVCache& cache, float* scores, const void* next_keys) {
  const size_t hd = cache.head_dim();
  const size_t d = n_head * hd;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const auto kv = static_cast<kernels::WeightType>(cache.dtype());
  kernels::attention_row(qkv + t * 3 * d + h * hd, cache.keys(layer, h), cache.values(layer, h), kv, base + t + 1,
                         hd, scale, scores, out + t * d + h * hd, next_keys);
}

}  // namespace

void causal_attention(const float* qkv, float* out, size_t tokens, size_t base, size_t layer, size_t n_head,
                      KVCache& cache) {
  const size_t hd = cache.head_dim();
  for (size_t h = 0; h < n_head; ++h)
    for (size_t t = 0; t < tokens; ++t) append_kv(qkv, t, base, layer, h, n_head, cache);

  // One task per group of (head, token) rows with enough work to be worth
  // scheduling: decode has one row per head, prefill many. Rows are
  // independent, so the split never changes a result.
  const size_t rows = n_head * tokens;
  const size_t work_per_row = (base + (tokens + 1) / 2) * hd * 2 + 1;  // multiply-adds, on average
  const size_t grain = std::max<size_t>(1, (size_t{1} << 15) / work_per_row);
  mmgpt::parallel_for(
      tbb::blocked_range<size_t>(0, rows, grain),
      [&](const tbb::blocked_range<size_t>& r) {
        std::vector<float> scores(base + tokens);
        // Row i + 1 is usually the next this thread runs, even past the end
        // of r: a range's rows run in order, and the simple partitioner
        // halves the whole range, so a thread with no other work (one
        // thread: always) goes on with the next range. Its keys are prefetched
        // as row i ends; a wrong guess costs a few KB of reads.
        for (size_t i = r.begin(); i < r.end(); ++i)
          attend(qkv, out, i % tokens, base, layer, i / tokens, n_head, cache, scores.data(),
                 i + 1 < rows ? cache.keys(layer, (i + 1) / tokens) : nullptr);
      },
      tbb::simple_partitioner());
}

void causal_attention_head(const float* qkv, float* out, size_t base, size_t layer, size_t head, size_t n_head,
                           KVCache& cache, float* scores, size_t next_head) {
  append_kv(qkv, 0, base, layer, head, n_head, cache);
  attend(qkv, out, 0, base, layer, head, n_head, cache, scores,
         next_head < n_head ? cache.keys(layer, next_head) : nullptr);
}

}  // namespace mmgpt
