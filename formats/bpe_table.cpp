#include "formats/bpe_table.hpp"

#include <array>
#include <string_view>
#include <unordered_map>

#include "formats/error.hpp"
#include "formats/string_index.hpp"

namespace mmgpt {

namespace {

// GPT-2's bytes_to_unicode(): the vocabulary spells byte b as this code point.
uint32_t byte_code_point(int b) {
  auto printable = [](int c) { return (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF); };
  if (printable(b)) return static_cast<uint32_t>(b);
  int n = 0;
  for (int c = 0; c < b; ++c)
    if (!printable(c)) ++n;
  return 256u + static_cast<uint32_t>(n);
}

std::string utf8(uint32_t cp) {  // cp < 0x800 here
  std::string s;
  if (cp < 0x80) {
    s.push_back(static_cast<char>(cp));
  } else {
    s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return s;
}

}  // namespace

std::string bpe_token_spelling(std::string_view bytes) {
  std::string token;
  token.reserve(bytes.size() * 2);
  for (char c : bytes) token += utf8(byte_code_point(static_cast<unsigned char>(c)));
  return token;
}

std::string bpe_token_bytes(std::string_view token) {
  // Code point -> byte, the inverse of byte_code_point.
  static const std::array<int, 512> byte_of = [] {
    std::array<int, 512> inv;
    inv.fill(-1);
    for (int b = 0; b < 256; ++b) inv[byte_code_point(b)] = b;
    return inv;
  }();
  std::string bytes;
  bytes.reserve(token.size());
  for (size_t i = 0; i < token.size();) {
    const auto c0 = static_cast<unsigned char>(token[i]);
    uint32_t cp;
    if (c0 < 0x80) {
      cp = c0, i += 1;
    } else if ((c0 & 0xE0) == 0xC0 && i + 1 < token.size() && (static_cast<unsigned char>(token[i + 1]) & 0xC0) == 0x80) {
      cp = (uint32_t(c0 & 0x1F) << 6) | (static_cast<unsigned char>(token[i + 1]) & 0x3F), i += 2;
    } else {
      return std::string(token);  // beyond U+07FF or malformed: no byte spells it
    }
    if (cp >= byte_of.size() || byte_of[cp] < 0) return std::string(token);
    bytes.push_back(static_cast<char>(byte_of[cp]));
  }
  return bytes;
}

namespace {

template <class String, class Pair>
BpeTables build_tables(const std::vector<String>& tokens, const std::vector<Pair>& rules, ByteTokens bytes,
                       std::span<const int32_t> ranks) {
  if (!ranks.empty() && ranks.size() != rules.size())
    throw Error("the tokenizer's merge ranks (" + std::to_string(ranks.size()) + ") do not match its " +
                std::to_string(rules.size()) + " merge rules");
  auto token = [&](size_t i) { return std::string_view(tokens[i]); };
  StringIndex index;
  index.build(tokens.size(), token);  // first id wins
  auto id_of = [&](std::string_view s) { return index.find(s, token); };

  BpeTables t;
  for (int b = 0; b < 256; ++b) {
    static const char* hex = "0123456789ABCDEF";
    const std::string spelled = bytes == ByteTokens::Gpt2 ? utf8(byte_code_point(b))
                                                          : std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">";
    t.byte_id[b] = id_of(spelled);
  }

  size_t cap = 16;
  while (cap < rules.size() * 2) cap *= 2;
  t.keys.assign(cap, kBpeEmptyKey);
  t.merges.assign(cap, BpeMerge{kBpeNoMerge, -1});
  const uint64_t mask = cap - 1;
  std::string joined;
  for (size_t r = 0; r < rules.size(); ++r) {
    const std::string_view a = rules[r].first, b = rules[r].second;
    const int32_t ia = id_of(a), ib = id_of(b);
    joined.assign(a);
    joined.append(b);
    const int32_t ij = id_of(joined);
    const char* missing = ia < 0 ? "its left part" : ib < 0 ? "its right part" : ij < 0 ? "the merged token" : nullptr;
    if (missing)
      throw Error("tokenizer merge rule " + std::to_string(r + 1) + " '" + std::string(a) + " " + std::string(b) +
                  "': " + missing + " is not in the vocabulary");
    const uint64_t k = bpe_pair_key(ia, ib);
    for (uint64_t h = bpe_first_slot(k, mask);; h = (h + 1) & mask) {
      if (t.keys[h] == k) break;  // a repeated rule: the first (lowest) rank counts
      if (t.keys[h] == kBpeEmptyKey) {
        t.keys[h] = k;
        const int64_t rank = ranks.empty() ? static_cast<int64_t>(r) : ranks[r];
        if (rank < 0 || rank >= kBpeNoMerge)
          throw Error("tokenizer merge rule " + std::to_string(r + 1) + " has the rank " + std::to_string(rank));
        t.merges[h] = BpeMerge{static_cast<int32_t>(rank), ij};
        break;
      }
    }
  }
  return t;
}

}  // namespace

BpeTables BpeTables::build(const std::vector<std::string>& tokens,
                           const std::vector<std::pair<std::string, std::string>>& rules, ByteTokens bytes,
                           std::span<const int32_t> ranks) {
  return build_tables(tokens, rules, bytes, ranks);
}

BpeTables BpeTables::build(const std::vector<std::string_view>& tokens,
                           const std::vector<std::pair<std::string_view, std::string_view>>& rules, ByteTokens bytes,
                           std::span<const int32_t> ranks) {
  return build_tables(tokens, rules, bytes, ranks);
}

void check_byte_ids(const int32_t* byte_id, uint64_t token_count, const std::string& where) {
  for (int b = 0; b < 256; ++b)
    if (byte_id[b] < -1 || (byte_id[b] >= 0 && uint64_t(byte_id[b]) >= token_count))
      throw Error(where + ": the token of byte " + std::to_string(b) + " is " + std::to_string(byte_id[b]) +
                  " (must be -1 or below " + std::to_string(token_count) + ")");
}

void check_bpe_tables(const BpeTableView& t, uint64_t token_count, uint64_t merge_count, const std::string& where) {
  check_byte_ids(t.byte_id, token_count, where);
  const uint64_t cap = t.keys.size();
  if (cap < 16 || cap > (uint64_t(1) << 26) || (cap & (cap - 1)) != 0 || t.merges.size() != cap)
    throw Error(where + ": the merge table has " + std::to_string(cap) +
                " slots (must be a power of two from 16 to 2^26)");
  const uint64_t mask = cap - 1;
  bool has_empty = false;
  auto id_ok = [&](int64_t id) { return id >= 0 && uint64_t(id) < token_count; };
  for (uint64_t h = 0; h < cap; ++h) {
    const uint64_t k = t.keys[h];
    const BpeMerge m = t.merges[h];
    auto slot = [&] { return where + ": merge table slot " + std::to_string(h); };
    if (k == kBpeEmptyKey) {
      if (m.rank != kBpeNoMerge || m.id != -1) throw Error(slot() + " is empty but holds a merge");
      has_empty = true;
      continue;
    }
    const int64_t a = int32_t(uint32_t(k >> 32)), b = int32_t(uint32_t(k));
    if (!id_ok(a) || !id_ok(b) || !id_ok(m.id))
      throw Error(slot() + " holds the ids " + std::to_string(a) + ", " + std::to_string(b) + " -> " +
                  std::to_string(m.id) + " (each must be below " + std::to_string(token_count) + ")");
    if (m.rank < 0 || uint64_t(m.rank) >= merge_count)
      throw Error(slot() + " holds the rank " + std::to_string(m.rank) + " (must be below " +
                  std::to_string(merge_count) + ")");
  }
  if (!has_empty) throw Error(where + ": the merge table has no empty slot");
  // Each key is where its probe finds it: no other empty slot or copy of it on the way.
  for (uint64_t h = 0; h < cap; ++h) {
    const uint64_t k = t.keys[h];
    if (k == kBpeEmptyKey) continue;
    for (uint64_t p = bpe_first_slot(k, mask); p != h; p = (p + 1) & mask)
      if (t.keys[p] == k || t.keys[p] == kBpeEmptyKey)
        throw Error(where + ": merge table slot " + std::to_string(h) + " is not where its pair is looked up (" +
                    (t.keys[p] == k ? "the pair is also in slot " : "an empty slot comes first, slot ") +
                    std::to_string(p) + ")");
  }
}

}  // namespace mmgpt
