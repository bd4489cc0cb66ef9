#include "text/hf_tokenizer.hpp"

#include <unicode/uchar.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <variant>

#include "formats/bpe_table.hpp"
#include "formats/mmgpt_file.hpp"
#include "formats/mmgpt_file_layout.hpp"
#include "formats/error.hpp"
#include "formats/file_util.hpp"
#include "formats/string_index.hpp"
#include "text/bpe.hpp"
#include "text/pretokenize.hpp"
#include "text/regex.hpp"
#include "text/utf8.hpp"

namespace mmgpt {

// The pipeline's parts, named (not anonymous) because HfTokenizer::Impl holds them.
namespace hf_parts {

using json = nlohmann::json;

constexpr std::string_view kMetaspace = "\xE2\x96\x81";  // U+2581 LOWER ONE EIGHTH BLOCK, SentencePiece's space

// --- small UTF-8 helpers ---------------------------------------------------

// The code point at s[i] (valid UTF-8 assumed) and its length.
uint32_t code_point_at(std::string_view s, size_t i, size_t& len) {
  const auto c0 = static_cast<unsigned char>(s[i]);
  len = utf8::sequence_length(c0);
  if (len <= 1) {
    len = 1;
    return c0;
  }
  uint32_t cp = c0 & (0x7F >> len);
  for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  return cp;
}

// Rust's String::from_utf8_lossy: each maximal ill-formed subsequence becomes one U+FFFD.
std::string utf8_lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t need = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c < 0x80) {
      out.push_back(static_cast<char>(c));
      ++i;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      need = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
      need = 2;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      need = 3;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
      continue;
    }
    size_t j = i + 1, got = 0;
    for (; got < need && j < s.size(); ++got, ++j) {
      const auto d = static_cast<unsigned char>(s[j]);
      const unsigned char l = got == 0 ? lo : 0x80, h = got == 0 ? hi : 0xBF;
      if (d < l || d > h) break;
    }
    if (got == need)
      out.append(s.substr(i, j - i));
    else
      out += "\xEF\xBF\xBD";
    i = j;
  }
  return out;
}

std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  size_t start = 0;
  for (size_t at = s.find(from); at != std::string_view::npos; at = s.find(from, start)) {
    out.append(s.substr(start, at - start));
    out.append(to);
    start = at + from.size();
  }
  out.append(s.substr(start));
  return out;
}

// Rust regex's \w (Unicode): Alphabetic, marks, decimal numbers, connector punctuation, Join_Control.
bool is_word_char(uint32_t cp) {
  if (u_hasBinaryProperty(static_cast<UChar32>(cp), UCHAR_ALPHABETIC) ||
      u_hasBinaryProperty(static_cast<UChar32>(cp), UCHAR_JOIN_CONTROL))
    return true;
  const int8_t t = u_charType(static_cast<UChar32>(cp));
  return t == U_NON_SPACING_MARK || t == U_ENCLOSING_MARK || t == U_COMBINING_SPACING_MARK ||
         t == U_DECIMAL_DIGIT_NUMBER || t == U_CONNECTOR_PUNCTUATION;
}

// The code point that ends s (valid UTF-8, non-empty).
uint32_t last_code_point(std::string_view s) {
  size_t i = s.size() - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  size_t len;
  return code_point_at(s, i, len);
}

// --- reading the pipeline's JSON -------------------------------------------

struct Where {
  const std::string& file;
  std::string path;
  Where at(const std::string& key) const { return {file, path.empty() ? key : path + "." + key}; }
  Where at(size_t i) const { return {file, path + "[" + std::to_string(i) + "]"}; }
  [[noreturn]] void fail(const std::string& what) const {
    throw Error(file + ": " + (path.empty() ? "" : path + ": ") + what);
  }
};

const json& field(const json& j, const char* key, const Where& w) {
  if (!j.is_object()) w.fail("is not an object");
  auto it = j.find(key);
  if (it == j.end()) w.at(key).fail("is missing");
  return *it;
}

std::string string_field(const json& j, const char* key, const Where& w) {
  const json& v = field(j, key, w);
  if (!v.is_string()) w.at(key).fail("is not a string");
  return v.get<std::string>();
}

bool bool_field(const json& j, const char* key, bool fallback, const Where& w) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_boolean()) w.at(key).fail("is not true or false");
  return j[key].get<bool>();
}

std::string type_of(const json& j, const Where& w) { return string_field(j, "type", w); }

// Each item of a Sequence's list under `key`, read by `read(item, its place)`.
template <class Read>
void for_each_item(const json& j, const char* key, const Where& w, Read read) {
  const json& list = field(j, key, w);
  if (!list.is_array()) w.at(key).fail("is not a list");
  for (size_t i = 0; i < list.size(); ++i) read(list[i], w.at(key).at(i));
}

// A Split's or Replace's pattern: {"String": s} or {"Regex": r}.
struct Pattern {
  std::string literal;
  std::unique_ptr<Regex> regex;

  void find_all(std::string_view s, std::vector<std::pair<size_t, size_t>>& out) const {
    if (regex) return regex->find_all(s, out);
    for (size_t at = s.find(literal); at != std::string_view::npos; at = s.find(literal, at + literal.size()))
      out.emplace_back(at, at + literal.size());
  }
};

Pattern read_pattern(const json& j, const Where& w) {
  const json& p = field(j, "pattern", w);
  const Where pw = w.at("pattern");
  Pattern out;
  if (p.is_object() && p.size() == 1 && p.contains("String") && p["String"].is_string()) {
    out.literal = p["String"].get<std::string>();
    if (out.literal.empty()) pw.fail("is the empty string");
  } else if (p.is_object() && p.size() == 1 && p.contains("Regex") && p["Regex"].is_string()) {
    out.regex = std::make_unique<Regex>(p["Regex"].get<std::string>(), w.file + ": " + pw.path);
  } else {
    pw.fail("is neither {\"String\": ...} nor {\"Regex\": ...}");
  }
  return out;
}

// --- normalizers -----------------------------------------------------------

struct Normalizer {
  enum Kind { Nfc, Nfkc, Nfd, Nfkd, Prepend, Replace } kind;
  std::string text;  // Prepend's prefix, Replace's content
  Pattern pattern;   // Replace's
};

void read_normalizers(const json& j, const Where& w, std::vector<Normalizer>& out) {
  if (j.is_null()) return;
  const std::string type = type_of(j, w);
  if (type == "Sequence") {
    for_each_item(j, "normalizers", w, [&](const json& item, const Where& iw) { read_normalizers(item, iw, out); });
  } else if (type == "NFC" || type == "NFKC" || type == "NFD" || type == "NFKD") {
    out.push_back({type == "NFC"    ? Normalizer::Nfc
                   : type == "NFKC" ? Normalizer::Nfkc
                   : type == "NFD"  ? Normalizer::Nfd
                                    : Normalizer::Nfkd,
                   {},
                   {}});
  } else if (type == "Prepend") {
    out.push_back({Normalizer::Prepend, string_field(j, "prepend", w), {}});
  } else if (type == "Replace") {
    out.push_back({Normalizer::Replace, string_field(j, "content", w), read_pattern(j, w)});
  } else {
    w.fail("normalizer '" + type + "' is not supported (supported: Sequence, NFC, NFKC, NFD, NFKD, Prepend, Replace)");
  }
}

std::string unicode_normalize(std::string_view s, Normalizer::Kind kind) {
  bool ascii = true;
  for (char c : s) ascii &= static_cast<unsigned char>(c) < 0x80;
  if (ascii) return std::string(s);  // every normalization form leaves ASCII alone
  UErrorCode st = U_ZERO_ERROR;
  const UNormalizer2* n = kind == Normalizer::Nfc    ? unorm2_getNFCInstance(&st)
                          : kind == Normalizer::Nfkc ? unorm2_getNFKCInstance(&st)
                          : kind == Normalizer::Nfd  ? unorm2_getNFDInstance(&st)
                                                     : unorm2_getNFKDInstance(&st);
  std::u16string in(s.size() + 1, u'\0');
  int32_t in_len = 0;
  u_strFromUTF8(in.data(), static_cast<int32_t>(in.size()), &in_len, s.data(), static_cast<int32_t>(s.size()), &st);
  in.resize(static_cast<size_t>(in_len));
  std::u16string norm(in.size() * 4 + 16, u'\0');
  const int32_t norm_len = unorm2_normalize(n, in.data(), in_len, norm.data(), static_cast<int32_t>(norm.size()), &st);
  std::string out(static_cast<size_t>(norm_len) * 3 + 4, '\0');
  int32_t out_len = 0;
  u_strToUTF8(out.data(), static_cast<int32_t>(out.size()), &out_len, norm.data(), norm_len, &st);
  if (U_FAILURE(st)) throw Error(std::string("Unicode normalization failed: ") + u_errorName(st));
  out.resize(static_cast<size_t>(out_len));
  return out;
}

std::string normalize(std::string_view s, const std::vector<Normalizer>& steps) {
  std::string cur(s);
  for (const Normalizer& n : steps) {
    switch (n.kind) {
      case Normalizer::Prepend:
        if (!cur.empty()) cur.insert(0, n.text);
        break;
      case Normalizer::Replace: {
        std::vector<std::pair<size_t, size_t>> m;
        n.pattern.find_all(cur, m);
        if (m.empty()) break;
        std::string out;
        size_t at = 0;
        for (auto [b, e] : m) out.append(cur, at, b - at).append(n.text), at = e;
        out.append(cur, at);
        cur = std::move(out);
        break;
      }
      default: cur = unicode_normalize(cur, n.kind);
    }
  }
  return cur;
}

// --- pre-tokenizers --------------------------------------------------------

enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

Behavior read_behavior(const json& j, const Where& w) {
  const std::string b = string_field(j, "behavior", w);
  if (b == "Removed") return Behavior::Removed;
  if (b == "Isolated") return Behavior::Isolated;
  if (b == "MergedWithPrevious") return Behavior::MergedWithPrevious;
  if (b == "MergedWithNext") return Behavior::MergedWithNext;
  if (b == "Contiguous") return Behavior::Contiguous;
  w.at("behavior").fail("'" + b + "' is not a split behavior");
}

struct Piece {
  std::string text;
  bool at_start;  // begins at offset 0 of the original text (Metaspace's "first")
};

struct PreStep {
  enum Kind { Split, ByteLevel, Digits, Metaspace } kind;
  explicit PreStep(Kind k) : kind(k) {}
  Pattern pattern;                   // Split
  Behavior behavior = Behavior::Isolated;
  bool invert = false;               // Split
  bool add_prefix_space = false;     // ByteLevel
  bool use_regex = false;            // ByteLevel
  bool individual_digits = false;    // Digits
  std::string replacement;           // Metaspace
  enum Prepend { Always, First, Never } prepend = Always;  // Metaspace
  bool split = true;                 // Metaspace
};

void read_pre_tokenizers(const json& j, const Where& w, std::vector<PreStep>& out) {
  if (j.is_null()) return;
  const std::string type = type_of(j, w);
  if (type == "Sequence") {
    for_each_item(j, "pretokenizers", w, [&](const json& item, const Where& iw) { read_pre_tokenizers(item, iw, out); });
  } else if (type == "Split") {
    PreStep s(PreStep::Split);
    s.pattern = read_pattern(j, w);
    s.behavior = read_behavior(j, w);
    s.invert = bool_field(j, "invert", false, w);
    out.push_back(std::move(s));
  } else if (type == "ByteLevel") {
    PreStep s(PreStep::ByteLevel);
    s.add_prefix_space = bool_field(j, "add_prefix_space", true, w);
    s.use_regex = bool_field(j, "use_regex", true, w);
    out.push_back(std::move(s));
  } else if (type == "Digits") {
    PreStep s(PreStep::Digits);
    s.individual_digits = bool_field(j, "individual_digits", false, w);
    out.push_back(std::move(s));
  } else if (type == "Metaspace") {
    PreStep s(PreStep::Metaspace);
    s.replacement = string_field(j, "replacement", w);
    size_t len;
    if (s.replacement.empty() || !valid_utf8(s.replacement) || (code_point_at(s.replacement, 0, len), len) != s.replacement.size())
      w.at("replacement").fail("is not one character");
    std::string scheme = "always";
    if (j.contains("prepend_scheme") && j["prepend_scheme"].is_string())
      scheme = j["prepend_scheme"].get<std::string>();
    else if (j.contains("add_prefix_space"))
      scheme = bool_field(j, "add_prefix_space", true, w) ? "always" : "never";
    if (scheme == "always")
      s.prepend = PreStep::Always;
    else if (scheme == "first")
      s.prepend = PreStep::First;
    else if (scheme == "never")
      s.prepend = PreStep::Never;
    else
      w.at("prepend_scheme").fail("'" + scheme + "' is not always, first or never");
    s.split = bool_field(j, "split", true, w);
    out.push_back(std::move(s));
  } else {
    w.fail("pre-tokenizer '" + type + "' is not supported (supported: Sequence, Split, ByteLevel, Digits, Metaspace)");
  }
}

// The reference's SplitDelimiterBehavior over (range, is_match) splits; empty pieces dropped.
void apply_behavior(std::vector<std::pair<std::pair<size_t, size_t>, bool>>& splits, Behavior b,
                    std::vector<std::pair<size_t, size_t>>& out) {
  std::vector<std::pair<std::pair<size_t, size_t>, bool>> acc;
  switch (b) {
    case Behavior::Isolated: acc = splits; break;
    case Behavior::Removed:
      for (auto& s : splits)
        if (!s.second) acc.push_back(s);
      break;
    case Behavior::MergedWithPrevious: {
      bool prev = false;
      for (auto& [r, m] : splits) {
        if (m && !prev) {
          if (!acc.empty())
            acc.back().first.second = r.second;
          else
            acc.push_back({r, true});
        } else {
          acc.push_back({r, false});
        }
        prev = m;
      }
      break;
    }
    case Behavior::MergedWithNext: {
      bool prev = false;
      for (auto it = splits.rbegin(); it != splits.rend(); ++it) {
        auto [r, m] = *it;
        if (m && !prev) {
          if (!acc.empty())
            acc.back().first.first = r.first;
          else
            acc.push_back({r, true});
        } else {
          acc.push_back({r, false});
        }
        prev = m;
      }
      std::reverse(acc.begin(), acc.end());
      break;
    }
    case Behavior::Contiguous: {
      bool prev = false;
      for (auto& [r, m] : splits) {
        if (m == prev) {
          if (!acc.empty())
            acc.back().first.second = r.second;
          else
            acc.push_back({r, false});
        } else {
          acc.push_back({r, false});
        }
        prev = m;
      }
      break;
    }
  }
  for (auto& [r, m] : acc)
    if (r.second > r.first) out.push_back(r);
}

// Matches of a pre-tokenizer's pattern in `s` as the reference's find_matches: the
// matches and the gaps between them, covering s.
void splits_of(std::string_view s, const std::vector<std::pair<size_t, size_t>>& matches, bool invert,
               std::vector<std::pair<std::pair<size_t, size_t>, bool>>& out) {
  out.clear();
  if (s.empty()) {
    out.push_back({{0, 0}, invert});
    return;
  }
  size_t prev = 0;
  for (auto [b, e] : matches) {
    if (prev != b) out.push_back({{prev, b}, invert});
    out.push_back({{b, e}, !invert});
    prev = e;
  }
  if (prev != s.size()) out.push_back({{prev, s.size()}, invert});
}

bool is_numeric(uint32_t cp) {
  const int8_t t = u_charType(static_cast<UChar32>(cp));
  return t == U_DECIMAL_DIGIT_NUMBER || t == U_LETTER_NUMBER || t == U_OTHER_NUMBER;
}

void pre_tokenize(std::vector<Piece>& pieces, const std::vector<PreStep>& steps) {
  std::vector<std::pair<size_t, size_t>> matches, ranges;
  std::vector<std::pair<std::pair<size_t, size_t>, bool>> splits;
  for (const PreStep& step : steps) {
    std::vector<Piece> next;
    next.reserve(pieces.size());
    for (Piece& p : pieces) {
      matches.clear();
      ranges.clear();
      switch (step.kind) {
        case PreStep::Split:
          step.pattern.find_all(p.text, matches);
          splits_of(p.text, matches, step.invert, splits);
          apply_behavior(splits, step.behavior, ranges);
          break;
        case PreStep::ByteLevel: {
          if (step.add_prefix_space && (p.text.empty() || p.text[0] != ' ')) p.text.insert(0, " ");
          if (!step.use_regex) {
            if (!p.text.empty()) ranges.emplace_back(0, p.text.size());
            break;
          }
          Gpt2PreTokenizer gpt2(p.text);
          std::string_view piece;
          while (gpt2.next(piece)) {
            const size_t b = static_cast<size_t>(piece.data() - p.text.data());
            ranges.emplace_back(b, b + piece.size());
          }
          break;
        }
        case PreStep::Digits: {
          for (size_t i = 0, len; i < p.text.size(); i += len) {
            const size_t b = i;
            if (is_numeric(code_point_at(p.text, i, len))) matches.emplace_back(b, b + len);
          }
          splits_of(p.text, matches, false, splits);
          apply_behavior(splits, step.individual_digits ? Behavior::Isolated : Behavior::Contiguous, ranges);
          break;
        }
        case PreStep::Metaspace: {
          p.text = replace_all(p.text, " ", step.replacement);
          const bool starts = p.text.compare(0, step.replacement.size(), step.replacement) == 0;
          if (!starts && (step.prepend == PreStep::Always || (step.prepend == PreStep::First && p.at_start)))
            p.text.insert(0, step.replacement);
          if (step.split) {
            for (size_t at = p.text.find(step.replacement); at != std::string::npos;
                 at = p.text.find(step.replacement, at + step.replacement.size()))
              matches.emplace_back(at, at + step.replacement.size());
            splits_of(p.text, matches, false, splits);
            apply_behavior(splits, Behavior::MergedWithNext, ranges);
          } else if (!p.text.empty()) {
            ranges.emplace_back(0, p.text.size());
          }
          break;
        }
      }
      for (auto [b, e] : ranges) next.push_back({p.text.substr(b, e - b), p.at_start && b == 0});
    }
    pieces = std::move(next);
  }
}

// --- decoders --------------------------------------------------------------

struct DecodeStep {
  enum Kind { ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace } kind;
  explicit DecodeStep(Kind k) : kind(k) {}
  Pattern pattern;          // Replace
  std::string text;         // Replace's content, Strip's character, Metaspace's replacement
  size_t start = 0, stop = 0;  // Strip
  bool prepend = true;      // Metaspace: prepend_scheme is not "never"
};

void read_decoders(const json& j, const Where& w, std::vector<DecodeStep>& out) {
  if (j.is_null()) return;
  const std::string type = type_of(j, w);
  if (type == "Sequence") {
    for_each_item(j, "decoders", w, [&](const json& item, const Where& iw) { read_decoders(item, iw, out); });
  } else if (type == "ByteLevel") {
    out.emplace_back(DecodeStep::ByteLevel);
  } else if (type == "Replace") {
    DecodeStep s(DecodeStep::Replace);
    s.pattern = read_pattern(j, w);
    s.text = string_field(j, "content", w);
    out.push_back(std::move(s));
  } else if (type == "ByteFallback") {
    out.emplace_back(DecodeStep::ByteFallback);
  } else if (type == "Fuse") {
    out.emplace_back(DecodeStep::Fuse);
  } else if (type == "Strip") {
    DecodeStep s(DecodeStep::Strip);
    s.text = string_field(j, "content", w);
    size_t len;
    if (s.text.empty() || !valid_utf8(s.text) || (code_point_at(s.text, 0, len), len) != s.text.size())
      w.at("content").fail("is not one character");
    const json& a = field(j, "start", w);
    const json& b = field(j, "stop", w);
    if (!a.is_number_unsigned() || !b.is_number_unsigned()) w.fail("start and stop must be counts");
    s.start = a.get<size_t>();
    s.stop = b.get<size_t>();
    out.push_back(std::move(s));
  } else if (type == "Metaspace") {
    DecodeStep s(DecodeStep::Metaspace);
    s.text = string_field(j, "replacement", w);
    if (j.contains("prepend_scheme") && j["prepend_scheme"].is_string())
      s.prepend = j["prepend_scheme"].get<std::string>() != "never";
    else
      s.prepend = bool_field(j, "add_prefix_space", true, w);
    out.push_back(std::move(s));
  } else {
    w.fail("decoder '" + type +
           "' is not supported (supported: Sequence, ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace)");
  }
}

void run_decoder(const DecodeStep& d, std::vector<std::string>& toks) {
  switch (d.kind) {
    case DecodeStep::ByteLevel: {
      std::string bytes;
      for (const std::string& t : toks) bytes += bpe_token_bytes(t);
      toks.assign(1, utf8_lossy(bytes));
      break;
    }
    case DecodeStep::Replace:
      for (std::string& t : toks) {
        std::vector<std::pair<size_t, size_t>> m;
        d.pattern.find_all(t, m);
        if (m.empty()) continue;
        std::string out;
        size_t at = 0;
        for (auto [b, e] : m) out.append(t, at, b - at).append(d.text), at = e;
        out.append(t, at);
        t = std::move(out);
      }
      break;
    case DecodeStep::ByteFallback: {
      std::vector<std::string> out;
      std::string pending;
      size_t pending_n = 0;
      auto flush = [&] {
        if (pending_n == 0) return;
        if (valid_utf8(pending))
          out.push_back(pending);
        else
          for (size_t i = 0; i < pending_n; ++i) out.push_back("\xEF\xBF\xBD");
        pending.clear();
        pending_n = 0;
      };
      auto hex = [](char c) -> int {
        return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      };
      for (std::string& t : toks) {
        if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' && hex(t[3]) >= 0 && hex(t[4]) >= 0) {
          pending.push_back(static_cast<char>(hex(t[3]) * 16 + hex(t[4])));
          ++pending_n;
        } else {
          flush();
          out.push_back(std::move(t));
        }
      }
      flush();
      toks = std::move(out);
      break;
    }
    case DecodeStep::Fuse: {
      std::string all;
      for (const std::string& t : toks) all += t;
      toks.assign(1, std::move(all));
      break;
    }
    case DecodeStep::Strip: {
      size_t len;
      const uint32_t c = code_point_at(d.text, 0, len);
      for (std::string& t : toks) {
        std::vector<std::pair<uint32_t, size_t>> cps;  // (code point, byte offset)
        for (size_t i = 0, n; i < t.size(); i += n) cps.emplace_back(code_point_at(t, i, n), i);
        size_t start_cut = 0, stop_cut = cps.size();
        for (size_t i = 0; i < d.start && i < cps.size() && cps[i].first == c; ++i) start_cut = i + 1;
        for (size_t i = 0; i < d.stop && i < cps.size() && cps[cps.size() - 1 - i].first == c; ++i)
          stop_cut = cps.size() - 1 - i;
        if (stop_cut < start_cut) stop_cut = start_cut;
        const size_t b = start_cut < cps.size() ? cps[start_cut].second : t.size();
        const size_t e = stop_cut < cps.size() ? cps[stop_cut].second : t.size();
        t = t.substr(b, e - b);
      }
      break;
    }
    case DecodeStep::Metaspace:
      for (size_t i = 0; i < toks.size(); ++i)
        toks[i] = replace_all(toks[i], d.text, i == 0 && d.prepend ? "" : " ");
      break;
  }
}

// --- added tokens ----------------------------------------------------------

struct AddedToken {
  int32_t id;
  std::string content;
  bool special, lstrip, rstrip, single_word, normalized;
};

// A byte trie of added tokens, searched leftmost-longest (as the reference's
// Aho-Corasick automaton with MatchKind::LeftmostLongest). Its edges are one
// open-addressing table keyed by (node, byte): built without an allocation
// per node, as a vocabulary may add thousands of tokens (Gemma 3's 6k).
class AddedTrie {
 public:
  // Room for `bytes` more edges at a load of at most 3/4.
  void reserve(size_t bytes) {
    size_t cap = 16;
    while (3 * cap < 4 * (bytes + 1)) cap *= 2;
    slots_.assign(cap, Slot{kEmpty, 0});
    terminal_.reserve(bytes + 1);
  }
  void add(std::string_view s, int32_t index) {
    if (terminal_.size() + s.size() >= kMaxNodes) throw Error("too many added tokens' bytes");
    if (slots_.empty() || 4 * (terminal_.size() + s.size()) > 3 * slots_.size()) grow(terminal_.size() + s.size());
    uint32_t node = 0;
    for (unsigned char c : s) {
      const uint32_t key = (node << 8) | c;
      uint64_t h = slot_of(key);
      while (slots_[h].key != kEmpty && slots_[h].key != key) h = (h + 1) & (slots_.size() - 1);
      if (slots_[h].key == kEmpty) {
        slots_[h] = Slot{key, static_cast<uint32_t>(terminal_.size())};
        terminal_.push_back(-1);
      }
      node = slots_[h].child;
    }
    if (terminal_[node] < 0) terminal_[node] = index;  // the first token of equal content wins
    first_[static_cast<unsigned char>(s[0])] = true;
  }
  bool empty() const { return terminal_.size() == 1; }
  // The longest token starting at text[pos]: its index and end, or -1.
  int32_t longest_at(std::string_view text, size_t pos, size_t& end) const {
    if (slots_.empty() || !first_[static_cast<unsigned char>(text[pos])]) return -1;
    uint32_t node = 0;
    int32_t best = -1;
    const uint64_t mask = slots_.size() - 1;
    for (size_t i = pos; i < text.size(); ++i) {
      const uint32_t key = (node << 8) | static_cast<unsigned char>(text[i]);
      uint64_t h = slot_of(key);
      while (slots_[h].key != kEmpty && slots_[h].key != key) h = (h + 1) & mask;
      if (slots_[h].key == kEmpty) break;
      node = slots_[h].child;
      if (terminal_[node] >= 0) best = terminal_[node], end = i + 1;
    }
    return best;
  }

 private:
  // A key is (node << 8) | byte, so nodes stay below 2^24; kEmpty is no key.
  static constexpr uint32_t kEmpty = ~uint32_t{0};
  static constexpr size_t kMaxNodes = size_t(1) << 24;
  struct Slot {
    uint32_t key, child;
  };
  uint64_t slot_of(uint32_t key) const { return bpe_first_slot(key, slots_.size() - 1); }
  void grow(size_t edges) {
    std::vector<Slot> old = std::move(slots_);
    reserve(std::max(edges, old.size()));
    for (const Slot& e : old) {
      if (e.key == kEmpty) continue;
      uint64_t s = slot_of(e.key);
      while (slots_[s].key != kEmpty) s = (s + 1) & (slots_.size() - 1);
      slots_[s] = e;
    }
  }

  std::vector<Slot> slots_;
  std::vector<int32_t> terminal_{-1};  // node -> the index of the token ending there, or -1
  bool first_[256] = {};
};

// An entry of the pipeline's added_tokens: its id and the flags it sets (-1: not set).
struct ScannedAdded {
  uint64_t id = 0;
  int8_t special = -1, lstrip = -1, rstrip = -1, single_word = -1, normalized = -1;
};

// Reads the added_tokens list at the start of a pipeline's text in the form
// the writer stores it (tokenizer_json.cpp: keys sorted, no spaces, each
// entry its id and the flags that differ from their defaults, as true or
// false):
//   {"added_tokens":[{"id":0,"special":true},{"id":4,"normalized":false},...],...
// Some tokenizers add thousands of tokens (Gemma 3 6k), and a JSON object
// each costs more to build than the rest of the tokenizer. Returns the offset
// just past the list, or 0 when the text takes any other form (for the JSON
// parser to read whole).
size_t scan_added_tokens(std::string_view text, std::vector<ScannedAdded>& out) {
  size_t i = 0;
  auto eat = [&](std::string_view s) {
    if (text.substr(i, s.size()) != s) return false;
    i += s.size();
    return true;
  };
  if (!eat("{\"added_tokens\":[")) return 0;
  if (eat("]")) return i;
  do {
    ScannedAdded a;
    if (!eat("{\"id\":")) return 0;
    // A JSON unsigned integer (no leading zero) of at most 10 digits: ids are below 2^31.
    const size_t digits = i;
    for (; i < text.size() && i - digits < 10 && text[i] >= '0' && text[i] <= '9'; ++i)
      a.id = 10 * a.id + (text[i] - '0');
    if (i == digits || (text[digits] == '0' && i - digits > 1)) return 0;
    while (eat(",\"")) {
      int8_t* flag = eat("lstrip\":")        ? &a.lstrip
                     : eat("normalized\":")  ? &a.normalized
                     : eat("rstrip\":")      ? &a.rstrip
                     : eat("single_word\":") ? &a.single_word
                     : eat("special\":")     ? &a.special
                                             : nullptr;
      if (flag == nullptr) return 0;
      if (eat("true"))
        *flag = 1;
      else if (eat("false"))
        *flag = 0;
      else
        return 0;
    }
    if (!eat("}")) return 0;
    out.push_back(a);
  } while (eat(","));
  return eat("]") ? i : 0;
}

}  // namespace hf_parts

using namespace hf_parts;

struct HfTokenizer::Impl {
  std::string where;
  // The vocabulary, in the file's tables (stored) or built here from strings
  // (owned_*): id -> spelling (decoding), id -> key in the model's space (raw
  // bytes when byte-level, the spelling otherwise; empty outside the model),
  // the keys' index, and id -> the bytes a token shows as on its own.
  const StoredBpeTables* stored = nullptr;
  std::span<const std::string_view> spelling;
  std::vector<std::string> owned_spelling_strings;
  std::vector<std::string_view> owned_spelling;
  std::vector<std::string> owned_keys;
  StringIndex owned_index;
  // token_bytes() hands out strings: made from the stored bytes on its first call.
  mutable std::once_flag bytes_once;
  mutable std::vector<std::string> bytes;
  bool byte_level = false;
  std::unique_ptr<BpeModel> bpe;

  std::string_view key(size_t id) const { return stored ? stored->token_key(id) : std::string_view(owned_keys[id]); }
  int32_t find(std::string_view s) const {
    if (!stored) return owned_index.find(s, [this](size_t i) { return key(i); });
    // The stored index is checked here, where it is read: a bounded probe and every id in range.
    const std::span<const int32_t> slots = stored->vocab_slots;
    const uint64_t mask = slots.size() - 1;
    uint64_t h = string_hash(s) & mask;
    for (uint64_t step = 0; step <= mask && !s.empty(); ++step, h = (h + 1) & mask) {
      const int32_t id = slots[h];
      if (id < 0) break;
      if (static_cast<uint64_t>(id) >= stored->token_count)
        throw Error(where + ": tokenizer tables section: vocabulary slot " + std::to_string(h) + " holds the id " +
                    std::to_string(id) + ", past the tokenizer");
      if (key(static_cast<size_t>(id)) == s) return id;
    }
    return -1;
  }
  bool ignore_merges = false, byte_fallback = false, fuse_unk = false;
  int32_t unk = -1;
  // Around it
  std::vector<Normalizer> normalizers;
  std::vector<PreStep> pre;
  std::vector<DecodeStep> decoders;
  std::vector<AddedToken> added;
  AddedTrie raw_trie, normalized_trie;
  // Post-processor (TemplateProcessing "single"): special ids and -1 for the sequence.
  std::vector<int32_t> template_single;
  bool has_template = false;
  std::string chat_json;  // the pipeline's "chat" entry, or empty
  std::vector<int32_t> end_ids;  // sorted

  void split_added(const std::string& text, const AddedTrie& trie, bool allow_special, bool at_start,
                   std::vector<std::pair<Piece, int32_t>>& out) const;
  void model_encode(std::string_view piece, std::vector<int32_t>& out) const;
};

HfTokenizer::HfTokenizer(std::span<const std::string_view> tokens,
                         std::span<const std::pair<std::string_view, std::string_view>> merges,
                         std::span<const int32_t> merge_ranks, const json& pipeline, const std::string& where,
                         const StoredBpeTables* stored)
    : impl_(std::make_unique<Impl>()) {
  init(tokens, merges, merge_ranks, pipeline, where, stored, nullptr);
}

HfTokenizer::HfTokenizer(std::span<const std::string_view> tokens,
                         std::span<const std::pair<std::string_view, std::string_view>> merges,
                         std::span<const int32_t> merge_ranks, JsonText pipeline, const std::string& where,
                         const StoredBpeTables* stored)
    : impl_(std::make_unique<Impl>()) {
  // The added tokens as the writer stores them, read by scan_added_tokens;
  // the JSON parser reads the rest, with null in the list's place (valid JSON
  // exactly when the whole text is). A second added_tokens key would be the
  // one that counts, as in the JSON parser: then it reads the whole text.
  std::vector<ScannedAdded> scanned;
  json spec;
  bool have_scanned = false;
  if (const size_t end = scan_added_tokens(pipeline.text, scanned)) {
    int lists = 0;
    auto count_lists = [&lists](int depth, json::parse_event_t event, json& parsed) {
      if (depth == 1 && event == json::parse_event_t::key && parsed == "added_tokens") ++lists;
      return true;
    };
    try {
      spec = json::parse("{\"added_tokens\":null" + std::string(pipeline.text.substr(end)), count_lists);
      have_scanned = lists == 1;
    } catch (const json::exception&) {
      // read whole below, for the parser's message about the text as it is
    }
  }
  if (!have_scanned) {
    scanned.clear();
    try {
      spec = json::parse(pipeline.text);
    } catch (const json::exception& e) {
      throw Error(where + ": the tokenizer pipeline is not valid JSON: " + e.what());
    }
  }
  init(tokens, merges, merge_ranks, spec, where, stored, have_scanned ? &scanned : nullptr);
}

void HfTokenizer::init(std::span<const std::string_view> tokens,
                       std::span<const std::pair<std::string_view, std::string_view>> merges,
                       std::span<const int32_t> merge_ranks, const json& pipeline, const std::string& where,
                       const StoredBpeTables* stored,
                       const std::vector<ScannedAdded>* scanned) {
  Impl& m = *impl_;
  m.stored = stored;
  if (stored && (stored->table_kind != mmgpt_file::kTablesBpe || stored->token_count != tokens.size()))
    throw Error(where + ": the tokenizer tables do not belong to this tokenizer");
  m.where = where;
  const Where root{where, ""};
  if (!pipeline.is_object()) root.fail("the tokenizer pipeline is not a JSON object");
  const json& model = field(pipeline, "model", root);
  const Where mw = root.at("model");
  const std::string type = model.contains("type") ? type_of(model, mw) : "BPE";
  if (type != "BPE") mw.fail("model '" + type + "' is not supported (only BPE)");
  if (model.contains("dropout") && !model["dropout"].is_null() &&
      !(model["dropout"].is_number() && model["dropout"].get<double>() == 0.0))
    mw.at("dropout").fail("BPE dropout is random: not supported");
  for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (model.contains(k) && !model[k].is_null() && !(model[k].is_string() && model[k].get<std::string>().empty()))
      mw.at(k).fail("is not supported (only empty)");
  m.ignore_merges = bool_field(model, "ignore_merges", false, mw);
  m.byte_fallback = bool_field(model, "byte_fallback", false, mw);
  m.fuse_unk = bool_field(model, "fuse_unk", false, mw);

  if (pipeline.contains("chat")) {
    const json& chat = pipeline["chat"];
    if (!chat.is_object() || !chat.contains("chat_template")) root.at("chat").fail("has no chat_template");
    m.chat_json = chat.dump();
  }
  if (pipeline.contains("end_ids")) {
    const json& ids = pipeline["end_ids"];
    if (!ids.is_array()) root.at("end_ids").fail("is not a list");
    for (const json& id : ids) {
      if (!id.is_number_unsigned() || id.get<uint64_t>() >= tokens.size())
        root.at("end_ids").fail("holds " + id.dump() + ", not a token id");
      m.end_ids.push_back(id.get<int32_t>());
    }
    std::sort(m.end_ids.begin(), m.end_ids.end());
  }
  read_normalizers(pipeline.value("normalizer", json()), root.at("normalizer"), m.normalizers);
  read_pre_tokenizers(pipeline.value("pre_tokenizer", json()), root.at("pre_tokenizer"), m.pre);
  read_decoders(pipeline.value("decoder", json()), root.at("decoder"), m.decoders);
  for (size_t i = 0; i < m.pre.size(); ++i)
    if (m.pre[i].kind == PreStep::ByteLevel) {
      if (i + 1 != m.pre.size())
        root.at("pre_tokenizer").fail("a ByteLevel pre-tokenizer followed by others is not supported");
      m.byte_level = true;
    }

  // Which ids the BPE model's vocabulary holds: all but the added tokens listed as outside it.
  std::vector<bool> in_model(tokens.size(), true);
  if (pipeline.contains("not_in_model")) {
    const json& list = pipeline["not_in_model"];
    if (!list.is_array()) root.at("not_in_model").fail("is not a list");
    for (const json& v : list) {
      if (!v.is_number_unsigned() || v.get<uint64_t>() >= tokens.size())
        root.at("not_in_model").fail("holds an id that is not a token");
      in_model[v.get<size_t>()] = false;
    }
  }

  if (stored) {
    m.spelling = tokens;  // the caller's views into the file, kept alive with it
  } else {
    m.owned_spelling_strings.assign(tokens.begin(), tokens.end());
    m.owned_spelling.assign(m.owned_spelling_strings.begin(), m.owned_spelling_strings.end());
    m.spelling = m.owned_spelling;
    m.bytes.reserve(tokens.size());
    m.owned_keys.resize(tokens.size());
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string key = m.byte_level && in_model[i] ? bpe_token_bytes(tokens[i]) : std::string(tokens[i]);
      if (in_model[i]) m.owned_keys[i] = key;
      if (!m.byte_level && in_model[i]) {
        // Text space: "▁" shows as a space, <0xNN> as its byte.
        std::string_view t = tokens[i];
        if (t.size() == 6 && t.substr(0, 3) == "<0x" && t[5] == '>' &&
            std::isxdigit(static_cast<unsigned char>(t[3])) && std::isxdigit(static_cast<unsigned char>(t[4])))
          key = std::string(1, static_cast<char>(std::stoi(std::string(t.substr(3, 2)), nullptr, 16)));
        else
          key = replace_all(t, kMetaspace, " ");
      }
      m.bytes.push_back(std::move(key));
    }
    m.owned_index.build(m.owned_keys.size(), [&m](size_t i) { return m.key(i); });
  }

  if (model.contains("unk_token") && !model["unk_token"].is_null()) {
    const std::string unk = string_field(model, "unk_token", mw);
    m.unk = m.find(m.byte_level ? bpe_token_bytes(unk) : unk);
    if (m.unk < 0) mw.at("unk_token").fail("'" + unk + "' is not in the vocabulary");
  }

  if (stored) {
    m.bpe = std::make_unique<BpeModel>(stored->table, nullptr);  // the caller keeps the file mapped
  } else {
    // The merges name tokens of the model's vocabulary only.
    std::vector<std::string_view> model_spelling(tokens.size());
    for (size_t i = 0; i < tokens.size(); ++i)
      if (in_model[i]) model_spelling[i] = tokens[i];
    std::vector<std::pair<std::string_view, std::string_view>> rules(merges.begin(), merges.end());
    try {
      BpeTables t =
          BpeTables::build(model_spelling, rules, m.byte_level ? ByteTokens::Gpt2 : ByteTokens::Hex, merge_ranks);
      if (!m.byte_level && !m.byte_fallback) t.byte_id.fill(-1);  // in text space bytes serve only byte fallback
      m.bpe = std::make_unique<BpeModel>(std::move(t));
    } catch (const Error& e) {
      throw Error(where + ": " + e.what());
    }
  }

  // Added tokens.
  const Where aw = root.at("added_tokens");
  auto add = [&](size_t i, size_t id, bool special, bool lstrip, bool rstrip, bool single_word,
                 std::optional<bool> normalized, const json* content) {
    // The stored pipeline leaves out the content (the id's spelling) and every default.
    AddedToken t{static_cast<int32_t>(id), std::string(m.spelling[id]), special, lstrip, rstrip, single_word, false};
    t.normalized = normalized.value_or(!t.special);
    if (content) {
      if (!content->is_string()) aw.at(i).fail("content is not a string");
      if (content->get_ref<const std::string&>() != t.content)
        aw.at(i).fail("content '" + content->get<std::string>() + "' is not the spelling of id " + std::to_string(id));
    }
    if (t.content.empty()) aw.at(i).fail("content is empty");
    if (!stored) m.bytes[id] = t.content;  // the stored bytes have it already
    m.added.push_back(std::move(t));
  };
  if (scanned) {
    m.added.reserve(scanned->size());
    for (size_t i = 0; i < scanned->size(); ++i) {
      const ScannedAdded& a = (*scanned)[i];
      if (a.id >= tokens.size()) aw.at(i).fail("id is not an id of the vocabulary");
      add(i, a.id, a.special > 0, a.lstrip > 0, a.rstrip > 0, a.single_word > 0,
          a.normalized < 0 ? std::nullopt : std::optional<bool>(a.normalized > 0), nullptr);
    }
  } else if (pipeline.contains("added_tokens") && !pipeline["added_tokens"].is_null()) {
    const json& list = pipeline["added_tokens"];
    if (!list.is_array()) aw.fail("is not a list");
    m.added.reserve(list.size());
    for (size_t i = 0; i < list.size(); ++i) {
      // Read without building the entry's name (thousands of entries): it is made only for an error.
      const json& a = list[i];
      auto fail = [&](const std::string& what) { aw.at(i).fail(what); };
      if (!a.is_object()) fail("is not an object");
      auto flag = [&](const char* key) -> std::optional<bool> {
        auto it = a.find(key);
        if (it == a.end() || it->is_null()) return std::nullopt;
        if (!it->is_boolean()) fail(std::string(key) + " is not true or false");
        return it->get<bool>();
      };
      auto idj = a.find("id");
      if (idj == a.end() || !idj->is_number_unsigned() || idj->get<uint64_t>() >= tokens.size())
        fail("id is not an id of the vocabulary");
      const bool special = flag("special").value_or(false), lstrip = flag("lstrip").value_or(false),
                 rstrip = flag("rstrip").value_or(false), single_word = flag("single_word").value_or(false);
      const std::optional<bool> normalized = flag("normalized");
      auto content = a.find("content");
      add(i, idj->get<size_t>(), special, lstrip, rstrip, single_word, normalized,
          content == a.end() ? nullptr : &*content);
    }
  }
  if (!m.added.empty()) {
    size_t trie_bytes = 0;
    for (const AddedToken& t : m.added) trie_bytes += t.content.size();
    m.raw_trie.reserve(trie_bytes);
    for (size_t i = 0; i < m.added.size(); ++i) {
      const AddedToken& t = m.added[i];
      if (t.normalized) {
        const std::string n = normalize(t.content, m.normalizers);
        if (!n.empty()) m.normalized_trie.add(n, static_cast<int32_t>(i));
      } else {
        m.raw_trie.add(t.content, static_cast<int32_t>(i));
      }
    }
  }

  // Post-processor: what add_special adds.
  if (pipeline.contains("post_processor") && !pipeline["post_processor"].is_null()) {
    std::vector<const json*> procs;
    const json& pp = pipeline["post_processor"];
    const Where pw = root.at("post_processor");
    if (type_of(pp, pw) == "Sequence") {
      for_each_item(pp, "processors", pw, [&](const json& item, const Where&) { procs.push_back(&item); });
    } else {
      procs.push_back(&pp);
    }
    for (const json* p : procs) {
      const std::string t = type_of(*p, pw);
      if (t == "ByteLevel") continue;  // offsets only
      if (t != "TemplateProcessing")
        pw.fail("post-processor '" + t + "' is not supported (supported: TemplateProcessing, ByteLevel, Sequence)");
      if (m.has_template) pw.fail("more than one TemplateProcessing");
      m.has_template = true;
      const json& single = field(*p, "single", pw);
      const json& specials = p->value("special_tokens", json::object());
      if (!single.is_array()) pw.at("single").fail("is not a list");
      for (const json& item : single) {
        if (item.contains("Sequence")) {
          if (item["Sequence"].value("id", "A") != "A") pw.at("single").fail("names a sequence other than A");
          m.template_single.push_back(-1);
        } else if (item.contains("SpecialToken") && item["SpecialToken"].contains("id")) {
          const json& name = item["SpecialToken"]["id"];
          if (!name.is_string() || !specials.contains(name.get<std::string>()))
            pw.at("single").fail("names a special token not in special_tokens");
          const json& ids = field(specials[name.get<std::string>()], "ids", pw.at("special_tokens"));
          if (!ids.is_array()) pw.at("special_tokens").fail("ids is not a list");
          for (const json& id : ids) {
            if (!id.is_number_unsigned() || id.get<uint64_t>() >= tokens.size())
              pw.at("special_tokens").fail("holds an id that is not a token");
            m.template_single.push_back(id.get<int32_t>());
          }
        } else {
          pw.at("single").fail("holds an item that is neither Sequence nor SpecialToken");
        }
      }
    }
  }
}

HfTokenizer::~HfTokenizer() = default;

size_t HfTokenizer::size() const { return impl_->spelling.size(); }

const std::string& HfTokenizer::chat_json() const { return impl_->chat_json; }

bool HfTokenizer::is_end(int32_t id) const {
  return std::binary_search(impl_->end_ids.begin(), impl_->end_ids.end(), id);
}

std::vector<int32_t> HfTokenizer::special_ids() const {
  std::vector<int32_t> ids;
  for (const AddedToken& a : impl_->added)
    if (a.special) ids.push_back(a.id);
  std::sort(ids.begin(), ids.end());
  return ids;
}

const std::string& HfTokenizer::token_bytes(int32_t id) const {
  static const std::string empty;
  const Impl& m = *impl_;
  if (m.stored)
    std::call_once(m.bytes_once, [&m] {
      m.bytes.reserve(m.stored->token_count);
      for (uint64_t i = 0; i < m.stored->token_count; ++i) m.bytes.emplace_back(m.stored->token_bytes(i));
    });
  if (id < 0 || static_cast<size_t>(id) >= m.bytes.size()) return empty;
  return m.bytes[static_cast<size_t>(id)];
}

std::array<int32_t, 256> HfTokenizer::byte_ids() const {
  std::array<int32_t, 256> out;
  std::copy_n(impl_->bpe->table().byte_id, 256, out.begin());
  return out;
}

std::string HfTokenizer::key_of(int32_t id) const { return std::string(impl_->key(static_cast<size_t>(id))); }

// The reference's find_matches: pieces of `text` and the added tokens cut out of it.
void HfTokenizer::Impl::split_added(const std::string& text, const AddedTrie& trie, bool allow_special, bool at_start,
                                    std::vector<std::pair<Piece, int32_t>>& out) const {
  if (trie.empty() || text.empty()) {
    if (!text.empty()) out.push_back({{text, at_start}, -1});
    return;
  }
  size_t start_offset = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = 0;
    const int32_t index = trie.longest_at(text, pos, end);
    if (index < 0) {
      ++pos;
      continue;
    }
    const AddedToken& t = added[static_cast<size_t>(index)];
    size_t start = pos, stop = end;
    pos = end;
    if (t.special && !allow_special) continue;
    if (t.single_word) {
      const bool start_ok = start == 0 || !is_word_char(last_code_point(std::string_view(text).substr(0, start)));
      size_t len;
      const bool stop_ok = stop == text.size() || !is_word_char(code_point_at(text, stop, len));
      if (!start_ok || !stop_ok) continue;
    }
    if (t.lstrip) {
      size_t s = start;
      while (s > 0) {
        size_t b = s - 1;
        while (b > 0 && (static_cast<unsigned char>(text[b]) & 0xC0) == 0x80) --b;
        size_t len;
        if (!is_gpt2_space(code_point_at(text, b, len))) break;
        s = b;
      }
      start = std::max(s, start_offset);
    }
    if (t.rstrip) {
      size_t len;
      while (stop < text.size() && is_gpt2_space(code_point_at(text, stop, len))) stop += len;
    }
    if (start_offset < start) out.push_back({{text.substr(start_offset, start - start_offset), at_start && start_offset == 0}, -1});
    out.push_back({{{}, false}, t.id});
    start_offset = stop;
  }
  if (start_offset < text.size())
    out.push_back({{text.substr(start_offset), at_start && start_offset == 0}, -1});
}

void HfTokenizer::Impl::model_encode(std::string_view piece, std::vector<int32_t>& out) const {
  if (ignore_merges) {
    if (const int32_t id = find(piece); id >= 0) {
      out.push_back(id);
      return;
    }
  }
  std::vector<int32_t> ids;
  ids.reserve(piece.size());
  const int32_t* byte_id = bpe->table().byte_id;
  if (byte_level) {
    for (unsigned char b : piece) {
      if (byte_id[b] < 0) {
        if (unk < 0) continue;  // the reference drops a symbol it has no token for
        ids.push_back(unk);
      } else {
        ids.push_back(byte_id[b]);
      }
    }
  } else {
    int32_t pending_unk = -1;  // an unknown token not yet written (fuse_unk joins the next ones to it)
    std::string ch;
    for (size_t i = 0, len; i < piece.size(); i += len) {
      code_point_at(piece, i, len);
      ch.assign(piece.substr(i, len));
      if (const int32_t id = find(ch); id >= 0) {
        if (pending_unk >= 0) ids.push_back(pending_unk), pending_unk = -1;
        ids.push_back(id);
        continue;
      }
      if (byte_fallback) {
        bool all = true;
        for (unsigned char b : ch) all &= byte_id[b] >= 0;
        if (all) {
          for (unsigned char b : ch) ids.push_back(byte_id[b]);
          continue;
        }
      }
      if (unk >= 0) {
        if (pending_unk < 0 || !fuse_unk) {
          if (pending_unk >= 0) ids.push_back(pending_unk);
          pending_unk = unk;
        }
      }
    }
    if (pending_unk >= 0) ids.push_back(pending_unk);
  }
  bpe->merge(ids);
  out.insert(out.end(), ids.begin(), ids.end());
}

void HfTokenizer::encode(std::string_view text, bool allow_special, bool add_special, std::vector<int32_t>& out) const {
  const Impl& m = *impl_;
  if (!valid_utf8(text)) throw Error("the text is not valid UTF-8, which " + m.where + "'s tokenizer needs");
  std::vector<int32_t> ids;
  std::vector<std::pair<Piece, int32_t>> raw, normalized;
  m.split_added(std::string(text), m.raw_trie, allow_special, true, raw);
  for (auto& [piece, id] : raw) {
    if (id >= 0) {
      ids.push_back(id);
      continue;
    }
    normalized.clear();
    m.split_added(normalize(piece.text, m.normalizers), m.normalized_trie, allow_special, piece.at_start, normalized);
    for (auto& [p, nid] : normalized) {
      if (nid >= 0) {
        ids.push_back(nid);
        continue;
      }
      std::vector<Piece> pieces{std::move(p)};
      pre_tokenize(pieces, m.pre);
      for (const Piece& q : pieces) m.model_encode(q.text, ids);
    }
  }
  if (add_special && m.has_template) {
    for (int32_t t : m.template_single) {
      if (t < 0)
        out.insert(out.end(), ids.begin(), ids.end());
      else
        out.push_back(t);
    }
  } else {
    out.insert(out.end(), ids.begin(), ids.end());
  }
}

std::string HfTokenizer::decode(std::span<const int32_t> ids) const {
  const Impl& m = *impl_;
  std::vector<std::string> toks;
  toks.reserve(ids.size());
  for (int32_t id : ids) {
    if (id < 0 || static_cast<size_t>(id) >= m.spelling.size())
      throw Error("token id " + std::to_string(id) + " is not one of the " + std::to_string(m.spelling.size()) +
                  " tokens of " + m.where + "'s tokenizer");
    toks.emplace_back(m.spelling[static_cast<size_t>(id)]);
  }
  if (m.decoders.empty()) {
    std::string out;
    for (size_t i = 0; i < toks.size(); ++i) out += (i ? " " : "") + toks[i];
    return out;
  }
  for (const DecodeStep& d : m.decoders) run_decoder(d, toks);
  std::string out;
  for (const std::string& t : toks) out += t;
  return out;
}

}  // namespace mmgpt
