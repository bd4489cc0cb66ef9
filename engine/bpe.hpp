#pragma once
// GPT-2 byte-level BPE encoding: text -> pre-tokenized pieces (pretokenize.hpp)
// -> each piece's bytes as single-byte tokens -> merges applied by rank, always
// the lowest-ranked adjacent pair first and the leftmost of equals, which is
// what OpenAI's encoder.py computes (it merges every occurrence of the best
// pair in one pass; merging them one at a time left to right is the same).
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mmgpt {

class BpeModel {
 public:
  // tokens: id -> token in byte-to-unicode form (vocab.json); merges: pairs
  // of tokens in rank order. Throws mmgpt::Error naming the merge rule whose
  // parts or result are not tokens.
  BpeModel(const std::vector<std::string>& tokens, const std::vector<std::pair<std::string, std::string>>& merges);

  // How a piece is merged; Auto picks Scan for short pieces and Heap for long
  // ones. Both give the same ids (tests compare them).
  enum class Strategy { Auto, Scan, Heap };

  // Appends the ids of `text` (no special-token handling). `use_cache`
  // remembers each distinct piece's ids for the rest of this call only, so
  // no state is shared between calls or threads.
  void encode(std::string_view text, std::vector<int32_t>& out, bool use_cache = true) const;

  // Appends the ids of one pre-tokenized piece. Throws mmgpt::Error if a byte
  // of it has no single-byte token in the vocabulary.
  void encode_piece(std::string_view piece, std::vector<int32_t>& out, Strategy strategy = Strategy::Auto) const;

 private:
  struct Merge {
    int32_t rank;
    int32_t id;
  };
  static constexpr int32_t kNoMerge = INT32_MAX;

  // Open-addressing table keyed by the pair (left id, right id).
  static uint64_t key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }
  Merge find(int32_t a, int32_t b) const;
  void insert(uint64_t k, Merge m);

  void merge_scan(std::vector<int32_t>& ids) const;
  void merge_heap(std::vector<int32_t>& ids) const;

  int32_t byte_id_[256];
  std::vector<uint64_t> keys_;  // empty slots hold kEmpty
  std::vector<Merge> values_;
  uint64_t mask_ = 0;
};

}  // namespace mmgpt
