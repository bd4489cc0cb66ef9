#pragma once
// An index of strings held elsewhere (a vocabulary's tokens), by content:
// open addressing over their ids, probed linearly, so building it allocates
// one array and a lookup touches a slot or two instead of a hash node list.
// The first id of a repeated string wins; empty strings are not indexed.
#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

namespace mmgpt {

inline uint64_t string_hash(std::string_view s) {
  uint64_t h = 0x9E3779B97F4A7C15ULL ^ s.size();
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    h = (h ^ w) * 0xBF58476D1CE4E5B9ULL;
    h ^= h >> 29;
  }
  uint64_t tail = 0;
  std::memcpy(&tail, s.data() + i, s.size() - i);
  h = (h ^ tail) * 0x94D049BB133111EBULL;
  return h ^ (h >> 31);
}

class StringIndex {
 public:
  // get(i) returns the string of id i, for i < n.
  template <class Get>
  void build(size_t n, Get get) {
    size_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    slots_.assign(cap, -1);
    mask_ = cap - 1;
    for (size_t i = 0; i < n; ++i) {
      const std::string_view s = get(i);
      if (s.empty()) continue;
      for (uint64_t h = string_hash(s) & mask_;; h = (h + 1) & mask_) {
        if (slots_[h] < 0) {
          slots_[h] = static_cast<int32_t>(i);
          break;
        }
        if (get(static_cast<size_t>(slots_[h])) == s) break;  // a repeat: the first id stays
      }
    }
  }

  const std::vector<int32_t>& slots() const { return slots_; }

  // The id of `s`, or -1.
  template <class Get>
  int32_t find(std::string_view s, Get get) const {
    if (slots_.empty() || s.empty()) return -1;
    for (uint64_t h = string_hash(s) & mask_;; h = (h + 1) & mask_) {
      const int32_t id = slots_[h];
      if (id < 0) return -1;
      if (get(static_cast<size_t>(id)) == s) return id;
    }
  }

 private:
  std::vector<int32_t> slots_;
  uint64_t mask_ = 0;
};

}  // namespace mmgpt
