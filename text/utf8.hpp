#pragma once
// The little UTF-8 arithmetic the tokenizer and the text stream share.
#include <cstddef>

namespace mmgpt::utf8 {

// Length of the UTF-8 sequence a lead byte starts; 0 for a continuation or invalid byte.
inline size_t sequence_length(unsigned char c) {
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) return 2;
  if ((c & 0xF0) == 0xE0) return 3;
  if ((c & 0xF8) == 0xF0) return 4;
  return 0;
}

}  // namespace mmgpt::utf8
