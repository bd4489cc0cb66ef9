#include "text/pretokenize.hpp"

#include <array>

#include <unicode/uchar.h>

namespace mmgpt {

namespace {

constexpr std::array<CharClass, 128> make_ascii_classes() {
  std::array<CharClass, 128> t{};
  for (int c = 0; c < 128; ++c) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
      t[c] = CharClass::Letter;
    else if (c >= '0' && c <= '9')
      t[c] = CharClass::Number;
    else if ((c >= '\t' && c <= '\r') || c == ' ')  // \x1c-\x1f are not White_Space
      t[c] = CharClass::Space;
    else
      t[c] = CharClass::Other;
  }
  return t;
}
constexpr std::array<CharClass, 128> kAscii = make_ascii_classes();

inline bool cont(unsigned char c) { return (c & 0xC0) == 0x80; }

// Decodes one well-formed UTF-8 sequence (RFC 3629: no overlongs, no
// surrogates, nothing above U+10FFFF) starting at s[pos] >= 0x80; returns its
// length, or 0 when the bytes there are not one.
size_t decode_multibyte(std::string_view s, size_t pos, uint32_t& cp) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data()) + pos;
  const size_t left = s.size() - pos;
  const unsigned char c = p[0];
  if (c >= 0xC2 && c <= 0xDF) {
    if (left < 2 || !cont(p[1])) return 0;
    cp = (uint32_t(c & 0x1F) << 6) | (p[1] & 0x3F);
    return 2;
  }
  if (c >= 0xE0 && c <= 0xEF) {
    if (left < 3 || !cont(p[1]) || !cont(p[2])) return 0;
    if (c == 0xE0 && p[1] < 0xA0) return 0;  // overlong
    if (c == 0xED && p[1] > 0x9F) return 0;  // UTF-16 surrogate
    cp = (uint32_t(c & 0x0F) << 12) | (uint32_t(p[1] & 0x3F) << 6) | (p[2] & 0x3F);
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (left < 4 || !cont(p[1]) || !cont(p[2]) || !cont(p[3])) return 0;
    if (c == 0xF0 && p[1] < 0x90) return 0;  // overlong
    if (c == 0xF4 && p[1] > 0x8F) return 0;  // above U+10FFFF
    cp = (uint32_t(c & 0x07) << 18) | (uint32_t(p[1] & 0x3F) << 12) | (uint32_t(p[2] & 0x3F) << 6) | (p[3] & 0x3F);
    return 4;
  }
  return 0;
}

}  // namespace

bool is_gpt2_space(uint32_t cp) {
  // Unicode White_Space. Deliberately not JavaScript's \s, which adds U+FEFF and
  // omits U+0085: GPT-2 was trained on the split made by Python's `regex`
  // module, whose \s is White_Space (so are fancy-regex's and Oniguruma's).
  switch (cp) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000: return true;
    default: return cp >= 0x2000 && cp <= 0x200A;
  }
}

CharClass classify_utf8(std::string_view text, size_t pos, size_t& len) {
  const unsigned char c = static_cast<unsigned char>(text[pos]);
  if (c < 0x80) {
    len = 1;
    return kAscii[c];
  }
  uint32_t cp = 0;
  len = decode_multibyte(text, pos, cp);
  if (len == 0) {
    len = 1;  // not UTF-8: this byte alone is a character of class Other
    return CharClass::Other;
  }
  if (is_gpt2_space(cp)) return CharClass::Space;
  const uint32_t mask = U_GET_GC_MASK(static_cast<UChar32>(cp));
  if (mask & U_GC_L_MASK) return CharClass::Letter;
  if (mask & U_GC_N_MASK) return CharClass::Number;
  return CharClass::Other;
}

size_t Gpt2PreTokenizer::run_end(size_t pos, CharClass cls) const {
  size_t len = 0;
  while (pos < text_.size() && classify_utf8(text_, pos, len) == cls) pos += len;
  return pos;
}

bool Gpt2PreTokenizer::next(std::string_view& piece) {
  const size_t n = text_.size();
  const size_t start = pos_;
  if (start >= n) return false;
  size_t end = 0;

  // 's|'t|'re|'ve|'m|'ll|'d (lower case only, ASCII apostrophe only).
  if (text_[start] == '\'' && start + 1 < n) {
    const char a = text_[start + 1];
    const char b = start + 2 < n ? text_[start + 2] : '\0';
    if (a == 's' || a == 't' || a == 'm' || a == 'd')
      end = start + 2;
    else if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
      end = start + 3;
  }

  if (end == 0) {
    size_t len = 0;
    const CharClass cls = classify_utf8(text_, start, len);
    if (cls != CharClass::Space) {
      // \p{L}+ | \p{N}+ | [^\s\p{L}\p{N}]+
      end = run_end(start + len, cls);
    } else {
      size_t next_len = 0;
      const CharClass next_cls =
          (text_[start] == ' ' && start + 1 < n) ? classify_utf8(text_, start + 1, next_len) : CharClass::Space;
      if (next_cls != CharClass::Space) {
        // " ?\p{L}+" etc.: one ASCII space glued to the run that follows it.
        end = run_end(start + 1 + next_len, next_cls);
      } else {
        // \s+(?!\S) | \s+ : a whitespace run ending the text is taken whole;
        // before a non-space it leaves its last character to prefix the next
        // piece, unless that would leave nothing (then \s+ takes the one char).
        size_t last = start;  // start of the run's last character
        size_t p = start;
        while (p < n) {
          size_t l = 0;
          if (classify_utf8(text_, p, l) != CharClass::Space) break;
          last = p;
          p += l;
        }
        end = (p == n || last == start) ? p : last;
      }
    }
  }
  piece = text_.substr(start, end - start);
  pos_ = end;
  return true;
}

}  // namespace mmgpt
