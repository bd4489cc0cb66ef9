#include "engine/kv_cache.hpp"

#include <algorithm>

#include "kernels/parallel.hpp"

namespace mmgpt {

KVCache::KVCache(const ModelConfig& config, WeightType dtype, size_t groups)
    : n_head_(config.kv_heads()),
      head_dim_(config.head_size()),
      capacity_(config.n_ctx),
      groups_(std::clamp<size_t>(groups != 0 ? groups : mmgpt::thread_budget(), 1, std::max<size_t>(1, n_head_))),
      padded_((capacity_ + kBlock - 1) / kBlock * kBlock),
      dtype_(checked(dtype)),
      elem_(element_bytes(dtype)),
      keys_(floats(size_t{config.n_layer} * n_head_ * padded_ * head_dim_)),
      values_(keys_.size()),
      tokens_(capacity_, -1) {}

}  // namespace mmgpt
