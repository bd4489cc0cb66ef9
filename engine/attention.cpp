#include "engine/attention.hpp"

#include <cmath>
#include <cstring>
#include <vector>

#include <tbb/blocked_range2d.h>
#include <tbb/parallel_for.h>

#include "kernels/kernels.hpp"

namespace mmgpt {

void causal_attention(const float* qkv, float* out, size_t tokens, size_t base, size_t layer, size_t n_head,
                      KVCache& cache) {
  const size_t hd = cache.head_dim();
  const size_t d = n_head * hd;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));

  // Append this step's keys and values.
  for (size_t h = 0; h < n_head; ++h) {
    float* k = cache.keys(layer, h);
    float* v = cache.values(layer, h);
    for (size_t t = 0; t < tokens; ++t) {
      const float* row = qkv + t * 3 * d;
      std::memcpy(k + (base + t) * hd, row + d + h * hd, hd * sizeof(float));
      std::memcpy(v + (base + t) * hd, row + 2 * d + h * hd, hd * sizeof(float));
    }
  }

  tbb::parallel_for(tbb::blocked_range2d<size_t>(0, n_head, 0, tokens), [&](const tbb::blocked_range2d<size_t>& r) {
    std::vector<float> scores(base + r.cols().end());
    for (size_t h = r.rows().begin(); h < r.rows().end(); ++h) {
      const float* k = cache.keys(layer, h);
      const float* v = cache.values(layer, h);
      for (size_t t = r.cols().begin(); t < r.cols().end(); ++t) {
        const float* q = qkv + t * 3 * d + h * hd;
        const size_t n = base + t + 1;  // causal: positions 0 .. base+t
        for (size_t j = 0; j < n; ++j) scores[j] = kernels::dot(q, k + j * hd, hd) * scale;
        kernels::softmax(scores.data(), n);
        float* o = out + t * d + h * hd;
        std::memset(o, 0, hd * sizeof(float));
        for (size_t j = 0; j < n; ++j) kernels::axpy(scores[j], v + j * hd, o, hd);
      }
    }
  });
}

}  // namespace mmgpt
