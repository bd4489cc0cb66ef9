#include "engine/bpe.hpp"

#include <algorithm>
#include <cstring>
#include <functional>
#include <queue>
#include <unordered_map>

#include "engine/pretokenize.hpp"
#include "formats/error.hpp"

namespace mmgpt {

namespace {

constexpr uint64_t kEmpty = ~uint64_t{0};  // (-1, -1) is never a pair of ids

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

inline uint64_t mix(uint64_t k) {  // splitmix64 finaliser: spreads both ids over all bits
  k ^= k >> 31;
  k *= 0x7fb5d329728ea185ULL;
  k ^= k >> 27;
  k *= 0x81dadef4bc2dd44dULL;
  k ^= k >> 33;
  return k;
}

std::string show_byte(unsigned char b) {
  static const char* hex = "0123456789ABCDEF";
  return std::string("0x") + hex[b >> 4] + hex[b & 15];
}

}  // namespace

BpeModel::BpeModel(const std::vector<std::string>& tokens,
                   const std::vector<std::pair<std::string, std::string>>& merges) {
  std::unordered_map<std::string_view, int32_t> id_of;
  id_of.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) id_of.emplace(tokens[i], static_cast<int32_t>(i));  // first id wins

  for (int b = 0; b < 256; ++b) {
    auto it = id_of.find(utf8(byte_code_point(b)));
    byte_id_[b] = it == id_of.end() ? -1 : it->second;
  }

  size_t cap = 16;
  while (cap < merges.size() * 2) cap *= 2;
  keys_.assign(cap, kEmpty);
  values_.assign(cap, Merge{kNoMerge, -1});
  mask_ = cap - 1;
  std::string joined;
  for (size_t r = 0; r < merges.size(); ++r) {
    const auto& [a, b] = merges[r];
    auto ia = id_of.find(a), ib = id_of.find(b);
    joined = a + b;
    auto ij = id_of.find(joined);
    const char* missing = ia == id_of.end()   ? "its left part"
                          : ib == id_of.end() ? "its right part"
                          : ij == id_of.end() ? "the merged token"
                                              : nullptr;
    if (missing)
      throw Error("tokenizer merge rule " + std::to_string(r + 1) + " '" + a + " " + b + "': " + missing +
                  " is not in the vocabulary");
    const uint64_t k = key(ia->second, ib->second);
    if (find(ia->second, ib->second).rank != kNoMerge) continue;  // a repeated rule: the first (lowest) rank counts
    insert(k, Merge{static_cast<int32_t>(r), ij->second});
  }
}

void BpeModel::insert(uint64_t k, Merge m) {
  for (uint64_t h = mix(k) & mask_;; h = (h + 1) & mask_) {
    if (keys_[h] == kEmpty) {
      keys_[h] = k;
      values_[h] = m;
      return;
    }
  }
}

BpeModel::Merge BpeModel::find(int32_t a, int32_t b) const {
  const uint64_t k = key(a, b);
  for (uint64_t h = mix(k) & mask_;; h = (h + 1) & mask_) {
    const uint64_t stored = keys_[h];
    if (stored == k) return values_[h];
    if (stored == kEmpty) return Merge{kNoMerge, -1};
  }
}

// O(n^2) over a short piece, but with no allocation and tiny constants: the
// rank of each adjacent pair is kept and only the two pairs next to a merge are
// looked up again.
void BpeModel::merge_scan(std::vector<int32_t>& ids) const {
  size_t m = ids.size();
  if (m < 2) return;
  Merge local[64];
  std::vector<Merge> heap_buf;
  Merge* pr = local;
  if (m - 1 > 64) {
    heap_buf.resize(m - 1);
    pr = heap_buf.data();
  }
  int32_t* id = ids.data();
  for (size_t i = 0; i + 1 < m; ++i) pr[i] = find(id[i], id[i + 1]);
  while (m > 1) {
    int32_t best = kNoMerge;
    size_t bi = 0;
    for (size_t i = 0; i + 1 < m; ++i)
      if (pr[i].rank < best) {
        best = pr[i].rank;
        bi = i;
      }
    if (best == kNoMerge) break;
    id[bi] = pr[bi].id;
    std::memmove(id + bi + 1, id + bi + 2, (m - bi - 2) * sizeof(int32_t));
    std::memmove(pr + bi, pr + bi + 1, (m - bi - 2) * sizeof(Merge));
    --m;
    if (bi > 0) pr[bi - 1] = find(id[bi - 1], id[bi]);
    if (bi + 1 < m) pr[bi] = find(id[bi], id[bi + 1]);
  }
  ids.resize(m);
}

// O(n log n) for long pieces: a linked list over the parts and a min-heap of
// candidate pairs ordered by (rank, position), so ties go to the leftmost.
// Entries made stale by an earlier merge are recognised and dropped when popped.
void BpeModel::merge_heap(std::vector<int32_t>& ids) const {
  const size_t n = ids.size();
  if (n < 2) return;
  struct Cand {
    int32_t rank;
    uint32_t pos, right;
    int32_t left_id, right_id;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::vector<uint32_t> next(n), prev(n);
  constexpr uint32_t kNone = UINT32_MAX;
  for (size_t i = 0; i < n; ++i) {
    next[i] = i + 1 < n ? static_cast<uint32_t>(i + 1) : kNone;
    prev[i] = i > 0 ? static_cast<uint32_t>(i - 1) : kNone;
  }
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
  auto push = [&](uint32_t l, uint32_t r) {
    if (l == kNone || r == kNone) return;
    Merge mg = find(ids[l], ids[r]);
    if (mg.rank != kNoMerge) heap.push(Cand{mg.rank, l, r, ids[l], ids[r]});
  };
  for (size_t i = 0; i + 1 < n; ++i) push(static_cast<uint32_t>(i), static_cast<uint32_t>(i + 1));
  while (!heap.empty()) {
    Cand c = heap.top();
    heap.pop();
    if (ids[c.pos] != c.left_id || next[c.pos] != c.right || ids[c.right] != c.right_id) continue;  // stale
    ids[c.pos] = find(c.left_id, c.right_id).id;
    const uint32_t after = next[c.right];
    next[c.pos] = after;
    if (after != kNone) prev[after] = c.pos;
    ids[c.right] = -1;
    next[c.right] = kNone;
    push(prev[c.pos], c.pos);
    push(c.pos, after);
  }
  size_t w = 0;
  for (uint32_t i = 0; i != kNone; i = next[i]) ids[w++] = ids[i];
  ids.resize(w);
}

void BpeModel::encode_piece(std::string_view piece, std::vector<int32_t>& out, Strategy strategy) const {
  std::vector<int32_t> ids(piece.size());
  for (size_t i = 0; i < piece.size(); ++i) {
    const unsigned char b = static_cast<unsigned char>(piece[i]);
    if (byte_id_[b] < 0)
      throw Error("the tokenizer's vocabulary has no token for the byte " + show_byte(b) +
                  ", so this text cannot be encoded");
    ids[i] = byte_id_[b];
  }
  if (strategy == Strategy::Heap || (strategy == Strategy::Auto && ids.size() > 64))
    merge_heap(ids);
  else
    merge_scan(ids);
  out.insert(out.end(), ids.begin(), ids.end());
}

void BpeModel::encode(std::string_view text, std::vector<int32_t>& out, bool use_cache) const {
  // piece -> (offset, count) of its ids already written to `out`; keys point into `text`.
  std::unordered_map<std::string_view, std::pair<size_t, size_t>> cache;
  Gpt2PreTokenizer pre(text);
  std::string_view piece;
  while (pre.next(piece)) {
    if (piece.size() == 1) {
      const unsigned char b = static_cast<unsigned char>(piece[0]);
      if (byte_id_[b] < 0) encode_piece(piece, out);  // throws naming the byte
      out.push_back(byte_id_[b]);
      continue;
    }
    if (!use_cache) {
      encode_piece(piece, out);
      continue;
    }
    auto [it, fresh] = cache.try_emplace(piece, out.size(), 0);
    if (fresh) {
      encode_piece(piece, out);
      it->second.second = out.size() - it->second.first;
    } else {
      const auto [off, cnt] = it->second;
      const size_t old = out.size();
      out.resize(old + cnt);
      std::copy_n(out.data() + off, cnt, out.data() + old);
    }
  }
}

}  // namespace mmgpt
