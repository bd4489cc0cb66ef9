#pragma once
// A compiled regular expression from a tokenizer file, matched by PCRE2 (its
// JIT where the platform has one) in UTF mode with Unicode properties (\p{L},
// \p{N}) and Unicode \s, \d, \w: the semantics of the Oniguruma expressions
// Hugging Face tokenizers run. Input must be valid UTF-8 (the tokenizer checks
// it once per text); patterns are compiled at load and shared read-only, each
// match call uses its own match data, so one Regex serves many threads.
//
// One difference between the engines is bridged: PCRE2 still counts U+180E
// MONGOLIAN VOWEL SEPARATOR as \s (it was a space before Unicode 6.3), which
// Oniguruma does not; the pattern is rewritten so \s leaves it out (\S
// inside a character class cannot be, and is refused).
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mmgpt {

class Regex {
 public:
  // Throws mmgpt::Error "<where>: regular expression /pattern/ does not
  // compile at offset N: reason".
  Regex(const std::string& pattern, const std::string& where);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Every non-overlapping match of the pattern in `text`, left to right, as
  // [begin, end) byte offsets. An empty match is skipped over by one
  // character, as Rust's regex iterators and Oniguruma's find loop do.
  void find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const;


 private:
  struct Impl;
  std::string pattern_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mmgpt
