#pragma once
// GPT-2's pre-tokenizer: splits text into the pieces that OpenAI's regex
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// finds, as a hand-written scanner (no regex engine: one pass, no allocation).
//
// Character classes: \p{L} and \p{N} are Unicode general categories L* and N*
// (from ICU's u_charType; ICU 72 = Unicode 15.0). \s is Unicode's White_Space
// property, as in OpenAI's original (Python's `regex` module), tiktoken's Rust
// core and Hugging Face tokenizers. JavaScript's \s differs on two code points
// (it counts U+FEFF as space and U+0085 as not); see is_gpt2_space().
//
// Input that is not valid UTF-8 is still split: each byte that does not start a
// well-formed UTF-8 sequence (stray continuation bytes, truncated or overlong
// sequences, surrogates, values above U+10FFFF) is one character of class
// Other, like punctuation. Pieces always cover the input exactly, so the
// bytes survive encode -> decode unchanged.
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace mmgpt {

enum class CharClass : uint8_t { Letter, Number, Space, Other };

// The class of the character starting at text[pos] (pos < text.size()); its
// length in bytes (1..4) is stored in `len`.
CharClass classify_utf8(std::string_view text, size_t pos, size_t& len);

// Unicode White_Space (the 25 code points of PropList.txt).
bool is_gpt2_space(uint32_t cp);

class Gpt2PreTokenizer {
 public:
  explicit Gpt2PreTokenizer(std::string_view text) : text_(text) {}
  // Stores the next piece and returns true, or returns false at the end.
  bool next(std::string_view& piece);

 private:
  // End of the run of characters of class `cls` starting at `pos`.
  size_t run_end(size_t pos, CharClass cls) const;

  std::string_view text_;
  size_t pos_ = 0;
};

}  // namespace mmgpt
