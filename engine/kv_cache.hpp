#pragma once
// Keys and values of the tokens a sequence has seen, per layer and head,
// stored [layer][head][position][head_dim] so that attention for one head
// reads its cache contiguously. The storage is huge-page memory, zero until
// written (engine/huge_page_buffer.hpp).
#include <cstddef>

#include "engine/huge_page_buffer.hpp"
#include "formats/model_config.hpp"

namespace mmgpt {

class KVCache {
 public:
  explicit KVCache(const ModelConfig& config)
      : n_head_(config.n_head), head_dim_(config.n_embd / config.n_head), capacity_(config.n_ctx),
        keys_(size_t{config.n_layer} * n_head_ * capacity_ * head_dim_),
        values_(keys_.size()) {}

  size_t capacity() const { return capacity_; }
  size_t length() const { return length_; }
  void set_length(size_t n) { length_ = n; }
  void clear() { length_ = 0; }
  size_t head_dim() const { return head_dim_; }

  float* keys(size_t layer, size_t head) { return keys_.data() + block(layer, head); }
  float* values(size_t layer, size_t head) { return values_.data() + block(layer, head); }

 private:
  size_t block(size_t layer, size_t head) const { return ((layer * n_head_) + head) * capacity_ * head_dim_; }
  size_t n_head_, head_dim_, capacity_;
  size_t length_ = 0;
  HugePageBuffer keys_, values_;  // huge pages: decode streams all of it every step
};

}  // namespace mmgpt
