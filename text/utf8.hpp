#pragma once
// The little UTF-8 arithmetic the tokenizer and the text stream share.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace mmgpt::utf8 {

// Length of the UTF-8 sequence a lead byte starts; 0 for a continuation or invalid byte.
inline size_t sequence_length(unsigned char c) {
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) return 2;
  if ((c & 0xF0) == 0xE0) return 3;
  if ((c & 0xF8) == 0xF0) return 4;
  return 0;
}

// `s` with each byte that does not start a valid UTF-8 character (a stray
// continuation byte, a cut or overlong sequence, a surrogate, a code point
// past U+10FFFF) replaced by U+FFFD, as a lossy decode does.
inline std::string replace_invalid(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const size_t n = sequence_length(c);
    bool ok = n > 0 && i + n <= s.size();
    uint32_t cp = n == 1 ? c : c & (0x7F >> n);
    for (size_t k = 1; ok && k < n; ++k) {
      const unsigned char x = static_cast<unsigned char>(s[i + k]);
      ok = (x & 0xC0) == 0x80;
      cp = (cp << 6) | (x & 0x3F);
    }
    static constexpr uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
    ok = ok && cp >= kMin[n] && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
    if (ok) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

}  // namespace mmgpt::utf8
