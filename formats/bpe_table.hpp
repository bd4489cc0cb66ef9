#pragma once
// GPT-2 byte-level BPE lookup tables, in the form the tokenizer searches them
// (text/bpe.hpp): the single-byte token of each byte, and the merge rules
// as an open-addressing table keyed by the pair (left id, right id), probed
// linearly from a fixed hash. The hash and the probing are fixed, so a table
// built once can be stored and searched in place.
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "formats/error.hpp"

namespace mmgpt {

struct BpeMerge {
  int32_t rank;  // the rule's rank (its line in the merges), kBpeNoMerge in an empty slot
  int32_t id;    // the merged token, -1 in an empty slot
};
static_assert(sizeof(BpeMerge) == 8);

inline constexpr uint64_t kBpeEmptyKey = ~uint64_t{0};  // (-1, -1) is never a pair of ids
inline constexpr int32_t kBpeNoMerge = INT32_MAX;

inline uint64_t bpe_pair_key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }
// The slot a key's probe starts from: the splitmix64 finaliser of the key,
// which spreads both ids over all bits, masked to the table's size.
inline uint64_t bpe_first_slot(uint64_t key, uint64_t mask) {
  key ^= key >> 31;
  key *= 0x7fb5d329728ea185ULL;
  key ^= key >> 27;
  key *= 0x81dadef4bc2dd44dULL;
  key ^= key >> 33;
  return key & mask;
}

// The tables, wherever they are held.
struct BpeTableView {
  const int32_t* byte_id = nullptr;  // [256]: the token of each single byte, or -1
  std::span<const uint64_t> keys;    // a power of two long
  std::span<const BpeMerge> merges;  // beside keys
  // Tables checked only where they are read (a tokenizer.json's, too large
  // to check whole at every load) set this to the token count: a merged id
  // at or past it is a corrupt file, reported when met.
  uint64_t id_limit = UINT64_MAX;

  // The merge of the pair (a, b), or {kBpeNoMerge, -1}. The probe is
  // bounded by the table's size, so a table without an empty slot ends too.
  BpeMerge find(int32_t a, int32_t b) const {
    const uint64_t k = bpe_pair_key(a, b), mask = keys.size() - 1;
    uint64_t h = bpe_first_slot(k, mask);
    for (uint64_t step = 0; step <= mask; ++step, h = (h + 1) & mask) {
      const uint64_t stored = keys[h];
      if (stored == k) {
        const BpeMerge m = merges[h];
        if (m.id < 0 || static_cast<uint64_t>(m.id) >= id_limit)
          throw Error("the tokenizer tables are corrupt: a merge gives the id " + std::to_string(m.id));
        return m;
      }
      if (stored == kBpeEmptyKey) break;
    }
    return BpeMerge{kBpeNoMerge, -1};
  }
};

// How a vocabulary spells the token of a single byte: GPT-2's byte-to-unicode
// character (byte-level BPE), or SentencePiece's "<0xNN>" (byte fallback).
enum class ByteTokens { Gpt2, Hex };

// Tables built from a vocabulary (id -> token in byte-to-unicode form, as in
// vocab.json; an empty string is no token) and merge rules in rank order. A
// rule's rank is its index, or ranks[index] when ranks are given (tiktoken's
// vocabularies, where every split of a token into two tokens merges at that
// token's rank, so rules may share one). A repeated rule keeps its first
// rank. Throws mmgpt::Error naming the merge rule whose parts or result are
// not tokens.
struct BpeTables {
  std::array<int32_t, 256> byte_id{};
  std::vector<uint64_t> keys;
  std::vector<BpeMerge> merges;

  static BpeTables build(const std::vector<std::string>& tokens,
                         const std::vector<std::pair<std::string, std::string>>& rules,
                         ByteTokens bytes = ByteTokens::Gpt2, std::span<const int32_t> ranks = {});
  static BpeTables build(const std::vector<std::string_view>& tokens,
                         const std::vector<std::pair<std::string_view, std::string_view>>& rules,
                         ByteTokens bytes = ByteTokens::Gpt2, std::span<const int32_t> ranks = {});
  BpeTableView view() const { return {byte_id.data(), keys, merges}; }
};

// The bytes a GPT-2 vocabulary token stands for: each code point of its
// byte-to-unicode spelling mapped back to its byte. A token that is not
// spelled that way (a special token such as "<|endoftext|>", or malformed
// UTF-8) stands for its own text.
std::string bpe_token_bytes(std::string_view token);
// The other way: a byte string spelled as a GPT-2 vocabulary token.
std::string bpe_token_spelling(std::string_view bytes);

// Checks tables read from a file before anything searches them. Throws
// mmgpt::Error, naming `where` and the first fault, unless: each byte's token
// is -1 or below token_count; the table is a power of two long (16 to 2^26)
// and has an empty slot; an empty slot holds {kBpeNoMerge, -1}; any other
// holds two ids and a merged id below token_count and a rank below
// merge_count; and find() of each key stops at that key's own slot (so no
// key is stored twice or cut off from its probe's start by an empty slot).
void check_bpe_tables(const BpeTableView& t, uint64_t token_count, uint64_t merge_count, const std::string& where);
// The part of that check a tokenizer.json's tables get at load: each byte's token is -1 or below token_count.
void check_byte_ids(const int32_t* byte_id, uint64_t token_count, const std::string& where);

}  // namespace mmgpt
