#include "text/bpe.hpp"

#include <algorithm>
#include <cstring>
#include <functional>
#include <queue>
#include <unordered_map>

#include "text/pretokenize.hpp"
#include "formats/error.hpp"

namespace mmgpt {

namespace {

std::string show_byte(unsigned char b) {
  static const char* hex = "0123456789ABCDEF";
  return std::string("0x") + hex[b >> 4] + hex[b & 15];
}

}  // namespace

BpeModel::BpeModel(const std::vector<std::string>& tokens,
                   const std::vector<std::pair<std::string, std::string>>& merges)
    : tables_(BpeTables::build(tokens, merges)), table_(tables_.view()) {}

BpeModel::BpeModel(BpeTables tables) : tables_(std::move(tables)), table_(tables_.view()) {}

BpeModel::BpeModel(BpeTableView stored, std::shared_ptr<const void> keep_alive)
    : keep_alive_(std::move(keep_alive)), table_(stored) {}

// O(n^2) over a short piece, but with no allocation and tiny constants: the
// rank of each adjacent pair is kept and only the two pairs next to a merge are
// looked up again.
void BpeModel::merge_scan(std::vector<int32_t>& ids) const {
  size_t m = ids.size();
  if (m < 2) return;
  BpeMerge local[64];
  std::vector<BpeMerge> heap_buf;
  BpeMerge* pr = local;
  if (m - 1 > 64) {
    heap_buf.resize(m - 1);
    pr = heap_buf.data();
  }
  int32_t* id = ids.data();
  for (size_t i = 0; i + 1 < m; ++i) pr[i] = table_.find(id[i], id[i + 1]);
  while (m > 1) {
    int32_t best = kBpeNoMerge;
    size_t bi = 0;
    for (size_t i = 0; i + 1 < m; ++i)
      if (pr[i].rank < best) {
        best = pr[i].rank;
        bi = i;
      }
    if (best == kBpeNoMerge) break;
    id[bi] = pr[bi].id;
    std::memmove(id + bi + 1, id + bi + 2, (m - bi - 2) * sizeof(int32_t));
    std::memmove(pr + bi, pr + bi + 1, (m - bi - 2) * sizeof(BpeMerge));
    --m;
    if (bi > 0) pr[bi - 1] = table_.find(id[bi - 1], id[bi]);
    if (bi + 1 < m) pr[bi] = table_.find(id[bi], id[bi + 1]);
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
    BpeMerge mg = table_.find(ids[l], ids[r]);
    if (mg.rank != kBpeNoMerge) heap.push(Cand{mg.rank, l, r, ids[l], ids[r]});
  };
  for (size_t i = 0; i + 1 < n; ++i) push(static_cast<uint32_t>(i), static_cast<uint32_t>(i + 1));
  while (!heap.empty()) {
    Cand c = heap.top();
    heap.pop();
    if (ids[c.pos] != c.left_id || next[c.pos] != c.right || ids[c.right] != c.right_id) continue;  // stale
    ids[c.pos] = table_.find(c.left_id, c.right_id).id;
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
    if (table_.byte_id[b] < 0)
      throw Error("the tokenizer's vocabulary has no token for the byte " + show_byte(b) +
                  ", so this text cannot be encoded");
    ids[i] = table_.byte_id[b];
  }
  merge(ids, strategy);
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
      if (table_.byte_id[b] < 0) encode_piece(piece, out);  // throws naming the byte
      out.push_back(table_.byte_id[b]);
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
