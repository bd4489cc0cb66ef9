#pragma once
// Keys and values of the tokens a sequence has seen, per layer and head,
// stored [layer][head][position][head_dim] so that attention for one head
// reads its cache contiguously. The storage is huge-page memory, zero until
// written (engine/huge_page_buffer.hpp).
//
// Elements are f32, or (--kv-dtype) bf16 / f16: half the memory, and half the
// bytes decode streams every step, which at long contexts is as much as the
// weights of a quantized model. Keys and values are rounded to nearest even
// as they are appended; attention widens them exactly as it loads them.
#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/huge_page_buffer.hpp"
#include "formats/error.hpp"
#include "formats/model_config.hpp"

namespace mmgpt {

class KVCache {
 public:
  explicit KVCache(const ModelConfig& config, DType dtype = DType::F32)
      : n_head_(config.n_head), head_dim_(config.n_embd / config.n_head), capacity_(config.n_ctx),
        dtype_(checked(dtype)), elem_(element_bytes(dtype)),
        keys_(floats(size_t{config.n_layer} * n_head_ * capacity_ * head_dim_)),
        values_(keys_.size()) {}

  DType dtype() const { return dtype_; }
  // Bytes of one key or value element in a cache of `dtype` (f32, bf16, f16).
  static size_t element_bytes(DType dtype) { return dtype == DType::F32 ? 4 : 2; }

  size_t capacity() const { return capacity_; }
  size_t length() const { return length_; }
  void set_length(size_t n) { length_ = n; }
  void clear() { length_ = 0; }
  size_t head_dim() const { return head_dim_; }

  // The [capacity, head_dim] block of (layer, head), elements of dtype().
  void* keys(size_t layer, size_t head) { return static_cast<uint8_t*>(keys_.bytes()) + block(layer, head) * elem_; }
  void* values(size_t layer, size_t head) {
    return static_cast<uint8_t*>(values_.bytes()) + block(layer, head) * elem_;
  }

 private:
  static DType checked(DType d) {
    if (d != DType::F32 && d != DType::BF16 && d != DType::F16)
      throw Error("KV cache dtype id " + std::to_string(static_cast<uint32_t>(d)) + " is not one of f32, bf16, f16");
    return d;
  }
  size_t floats(size_t elements) const { return elem_ == 4 ? elements : (elements + 1) / 2; }
  size_t block(size_t layer, size_t head) const { return ((layer * n_head_) + head) * capacity_ * head_dim_; }
  size_t n_head_, head_dim_, capacity_;
  DType dtype_;
  size_t elem_;  // bytes per element
  size_t length_ = 0;
  HugePageBuffer keys_, values_;  // huge pages: decode streams all of it every step
};

}  // namespace mmgpt
