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

void causal_attention(const float* qkv, float* out, size_t tokens, size_t base, size_t layer, size_t n_head,
                      KVCache& cache) {
  const size_t hd = cache.head_dim();
  const size_t d = n_head * hd;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));

  // Append this step's keys and values (rounded to a 16-bit cache's type).
  const auto kv = static_cast<kernels::WeightType>(cache.dtype());  // same ids: F32, BF16, F16
  for (size_t h = 0; h < n_head; ++h) {
    void* k = cache.keys(layer, h);
    void* v = cache.values(layer, h);
    for (size_t t = 0; t < tokens; ++t) {
      const float* row = qkv + t * 3 * d;
      if (kv == kernels::WeightType::F32) {
        std::memcpy(static_cast<float*>(k) + (base + t) * hd, row + d + h * hd, hd * sizeof(float));
        std::memcpy(static_cast<float*>(v) + (base + t) * hd, row + 2 * d + h * hd, hd * sizeof(float));
      } else {
        kernels::narrow(row + d + h * hd, hd, kv, static_cast<uint16_t*>(k) + (base + t) * hd);
        kernels::narrow(row + 2 * d + h * hd, hd, kv, static_cast<uint16_t*>(v) + (base + t) * hd);
      }
    }
  }

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
        for (size_t i = r.begin(); i < r.end(); ++i) {
          const size_t h = i / tokens, t = i % tokens;
          const size_t n = base + t + 1;  // causal: positions 0 .. base+t
          kernels::attention_row(qkv + t * 3 * d + h * hd, cache.keys(layer, h), cache.values(layer, h), kv, n, hd,
                                 scale, scores.data(), out + t * d + h * hd);
        }
      },
      tbb::simple_partitioner());
}

}  // namespace mmgpt
