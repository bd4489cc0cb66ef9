#pragma once
// GPT-2 byte-level BPE encoding: text -> pre-tokenized pieces (pretokenize.hpp)
// -> each piece's bytes as single-byte tokens -> merges applied by rank, always
// the lowest-ranked adjacent pair first and the leftmost of equals, which is
// what OpenAI's encoder.py computes (it merges every occurrence of the best
// pair in one pass; merging them one at a time left to right is the same).
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "formats/bpe_table.hpp"

namespace mmgpt {

class BpeModel {
 public:
  // tokens: id -> token in byte-to-unicode form (vocab.json); merges: pairs
  // of tokens in rank order. Throws mmgpt::Error naming the merge rule whose
  // parts or result are not tokens.
  BpeModel(const std::vector<std::string>& tokens, const std::vector<std::pair<std::string, std::string>>& merges);
  // Tables built by the caller (any vocabulary's spelling of bytes).
  explicit BpeModel(BpeTables tables);
  // Stored tables (formats/bpe_table.hpp), already checked, searched in place;
  // keep_alive owns the memory they point into.
  BpeModel(BpeTableView stored, std::shared_ptr<const void> keep_alive);
  // table_ points into tables_ or into keep_alive_'s memory: not copied.
  BpeModel(const BpeModel&) = delete;
  BpeModel& operator=(const BpeModel&) = delete;

  // How a piece is merged; Auto picks Scan for short pieces and Heap for long
  // ones. Both give the same ids (tests compare them).
  enum class Strategy { Auto, Scan, Heap };

  // Appends the ids of `text` (no special-token handling). `use_cache`
  // remembers each distinct piece's ids for the rest of this call only, so
  // no state is shared between calls or threads.
  void encode(std::string_view text, std::vector<int32_t>& out, bool use_cache = true) const;

  // Applies the merges to a piece's initial ids, in place.
  void merge(std::vector<int32_t>& ids, Strategy strategy = Strategy::Auto) const {
    if (strategy == Strategy::Heap || (strategy == Strategy::Auto && ids.size() > 64))
      merge_heap(ids);
    else
      merge_scan(ids);
  }
  const BpeTableView& table() const { return table_; }

  // Appends the ids of one pre-tokenized piece. Throws mmgpt::Error if a byte
  // of it has no single-byte token in the vocabulary.
  void encode_piece(std::string_view piece, std::vector<int32_t>& out, Strategy strategy = Strategy::Auto) const;

 private:
  void merge_scan(std::vector<int32_t>& ids) const;
  void merge_heap(std::vector<int32_t>& ids) const;

  BpeTables tables_;                     // built from a vocabulary, or empty
  std::shared_ptr<const void> keep_alive_;  // the stored tables' owner, or null
  BpeTableView table_;                   // what encoding searches
};

}  // namespace mmgpt
