#pragma once
// Keys and values of the tokens a sequence has seen, per layer and head,
// stored [layer][group][block][head][position in block][head_dim]: the heads
// in `groups` consecutive groups (one per thread that decodes: each thread's
// share of a step's attention is a group), a group's positions in blocks of
// kBlock (kernels::KVBlocks). A head's rows in a block are one run and a
// block holds every head of the group, so attention over a group, block by
// block and head by head, reads its keys as one stream, then its values
// (kernels/simd/attention_simd.hpp). The storage is huge-page memory, zero until
// written (engine/huge_page_buffer.hpp).
//
// Elements are f32, or (--kv-dtype) bf16 / f16: half the memory, and half the
// bytes decode streams every step, which at long contexts is as much as the
// weights of a quantized model. Keys and values are rounded to nearest even
// as they are appended; attention widens them exactly as it loads them.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/even_split.hpp"
#include "engine/huge_page_buffer.hpp"
#include "formats/error.hpp"
#include "formats/model_config.hpp"
#include "kernels/kv_blocks.hpp"

namespace mmgpt {

class KVCache {
 public:
  // Heads are the model's key/value heads (n_kv_head, GQA). groups: how
  // many groups of them (1 .. n_kv_head); 0: one per thread of
  // mmgpt::thread_budget(), at most n_kv_head. Any value gives the same results.
  explicit KVCache(const ModelConfig& config, WeightType dtype = WeightType::F32, size_t groups = 0);

  // Positions in a block: 64 rows of a head are 16 KB of f32 keys (8 KB of
  // 16-bit), runs long enough for the prefetcher, and a layer's first block
  // is whole after 64 tokens.
  static constexpr size_t kBlock = 64;
  static_assert(kBlock % kernels::kKVBlockMultiple == 0);

  WeightType dtype() const { return dtype_; }
  // Bytes of one key or value element in a cache of `dtype` (f32, bf16, f16).
  static size_t element_bytes(WeightType dtype) { return weight_type_info(dtype).block_bytes; }

  size_t capacity() const { return capacity_; }
  size_t length() const { return length_; }
  void set_length(size_t n) { length_ = n; }
  void clear() { length_ = 0; }
  // Makes the whole cache resident now (its contents become zeros).
  void fault_in() {
    keys_.fault_in();
    values_.fault_in();
  }
  size_t head_dim() const { return head_dim_; }
  // The token id at each position the cache holds (the executor records
  // them; a model whose block reads the previous token, nanochat's smear,
  // reads them back).
  int32_t token(size_t pos) const { return tokens_.at(pos); }
  void set_token(size_t pos, int32_t id) { tokens_.at(pos) = id; }

  size_t groups() const { return groups_; }
  // The group holding `head`, and the heads [first, end) of group g.
  size_t group_of(size_t head) const { return even_split_block(n_head_, groups_, head); }
  size_t group_begin(size_t g) const { return even_split_begin(n_head_, groups_, g); }

  // Head `head`'s row at position 0 of `layer` (elements of dtype()); its
  // other positions, and those of the next heads of its group, as
  // blocks(group_of(head)) says.
  void* keys(size_t layer, size_t head) { return at(keys_, layer, head, 0); }
  void* values(size_t layer, size_t head) { return at(values_, layer, head, 0); }
  // The row of (layer, head) at position `pos`.
  void* key_row(size_t layer, size_t head, size_t pos) { return at(keys_, layer, head, pos); }
  void* value_row(size_t layer, size_t head, size_t pos) { return at(values_, layer, head, pos); }
  kernels::KVBlocks blocks(size_t group) const {
    return {kBlock, kBlock * head_dim_, (group_begin(group + 1) - group_begin(group)) * kBlock * head_dim_};
  }

 private:
  static WeightType checked(WeightType d) {
    const WeightTypeInfo* t = weight_type_by_id(static_cast<uint32_t>(d));
    if (t == nullptr || !t->element_wise)
      throw Error("KV cache dtype id " + std::to_string(static_cast<uint32_t>(d)) + " is not one of f32, bf16, f16");
    return d;
  }
  size_t floats(size_t elements) const { return elem_ == 4 ? elements : (elements + 1) / 2; }
  void* at(HugePageBuffer& buffer, size_t layer, size_t head, size_t pos) {
    const size_t g = group_of(head), first = group_begin(g), heads = group_begin(g + 1) - first;
    const size_t element = (layer * n_head_ + first) * padded_ * head_dim_ +  // the group's region
                           ((pos / kBlock * heads + head - first) * kBlock + pos % kBlock) * head_dim_;
    return static_cast<uint8_t*>(buffer.bytes()) + element * elem_;
  }
  size_t n_head_, head_dim_, capacity_, groups_;
  size_t padded_;  // capacity_ rounded up to whole blocks
  WeightType dtype_;
  size_t elem_;  // bytes per element
  size_t length_ = 0;
  HugePageBuffer keys_, values_;  // huge pages: decode streams all of it every step
  std::vector<int32_t> tokens_;
};

}  // namespace mmgpt
