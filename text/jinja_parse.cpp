// The chat-template compiler: Jinja2's lexer and parser for the subset we
// interpret. The lexer follows jinja2/lexer.py rule for rule (newline
// normalisation, the dropped trailing newline, `-`/`+` signs, trim_blocks,
// lstrip_blocks, bracket balancing inside tags); the parser follows
// jinja2/parser.py's grammar and precedence. Nesting is bounded, so hostile
// input cannot exhaust the stack.
#include "text/jinja_parse.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>

#include "formats/error.hpp"
#include "text/utf8.hpp"

namespace mmgpt::jinja {

namespace {

// Brackets, unary operators and blocks nested deeper than this are refused.
constexpr int kMaxParseDepth = 100;

// --- builtin names

struct Builtin {
  const char* name;
  bool supported;
};

// Jinja2's filters, in one table: those we do not interpret are named so the
// error can say "not supported" rather than "unknown".
constexpr std::array kFilters = {
    Builtin{"abs", true},         Builtin{"attr", true},        Builtin{"batch", true},
    Builtin{"capitalize", true},  Builtin{"center", true},      Builtin{"count", true},
    Builtin{"d", true},           Builtin{"default", true},     Builtin{"dictsort", true},
    Builtin{"e", true},           Builtin{"escape", true},      Builtin{"first", true},
    Builtin{"float", true},       Builtin{"forceescape", true}, Builtin{"indent", true},
    Builtin{"int", true},         Builtin{"join", true},        Builtin{"last", true},
    Builtin{"length", true},      Builtin{"list", true},        Builtin{"lower", true},
    Builtin{"items", true},       Builtin{"map", true},         Builtin{"min", true},
    Builtin{"max", true},         Builtin{"reject", true},      Builtin{"rejectattr", true},
    Builtin{"replace", true},     Builtin{"reverse", true},     Builtin{"round", true},
    Builtin{"safe", true},        Builtin{"select", true},      Builtin{"selectattr", true},
    Builtin{"sort", true},        Builtin{"string", true},      Builtin{"sum", true},
    Builtin{"title", true},       Builtin{"trim", true},        Builtin{"unique", true},
    Builtin{"upper", true},       Builtin{"wordcount", true},   Builtin{"tojson", true},
    Builtin{"filesizeformat", false}, Builtin{"format", false},   Builtin{"groupby", false},
    Builtin{"pprint", false},     Builtin{"random", false},     Builtin{"slice", false},
    Builtin{"striptags", false},  Builtin{"truncate", false},   Builtin{"urlencode", false},
    Builtin{"urlize", false},     Builtin{"wordwrap", false},   Builtin{"xmlattr", false},
};

constexpr std::array kTests = {
    Builtin{"odd", true},      Builtin{"even", true},        Builtin{"divisibleby", true}, Builtin{"defined", true},
    Builtin{"undefined", true}, Builtin{"filter", true},     Builtin{"test", true},        Builtin{"none", true},
    Builtin{"boolean", true},  Builtin{"false", true},       Builtin{"true", true},        Builtin{"integer", true},
    Builtin{"float", true},    Builtin{"lower", true},       Builtin{"upper", true},       Builtin{"string", true},
    Builtin{"mapping", true},  Builtin{"number", true},      Builtin{"sequence", true},    Builtin{"iterable", true},
    Builtin{"callable", true}, Builtin{"sameas", true},      Builtin{"in", true},          Builtin{"==", true},
    Builtin{"eq", true},       Builtin{"equalto", true},     Builtin{"!=", true},          Builtin{"ne", true},
    Builtin{">", true},        Builtin{"gt", true},          Builtin{"greaterthan", true}, Builtin{"ge", true},
    Builtin{">=", true},       Builtin{"<", true},           Builtin{"lt", true},          Builtin{"lessthan", true},
    Builtin{"<=", true},       Builtin{"le", true},          Builtin{"escaped", false},
};

template <size_t N>
int find_builtin(const std::array<Builtin, N>& table, std::string_view name) {
  for (size_t k = 0; k < N; ++k)
    if (name == table[k].name) return static_cast<int>(k);
  return -1;
}

// --- tokens

enum class Tok : uint8_t { Data, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, Eof };

struct Token {
  Tok type = Tok::Eof;
  uint32_t line = 0;
  std::string text;  // Data, Name, Op: the text; String: the decoded value
  int64_t int_value = 0;
  double float_value = 0;
};

bool is_ascii_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_ascii_digit(c); }

class Lexer {
 public:
  Lexer(std::string_view source, const std::string& name) : name_(name) {
    // Jinja2 reads \r\n, \r and \n as one newline and, keep_trailing_newline
    // being off, drops one newline at the very end of the template.
    src_.reserve(source.size());
    for (size_t i = 0; i < source.size(); ++i) {
      if (source[i] == '\r') {
        src_.push_back('\n');
        if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
      } else {
        src_.push_back(source[i]);
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
  }

  std::vector<Token> run() {
    bool line_starting = true;  // the text before the next tag starts a line
    while (pos_ < src_.size()) {
      size_t at = find_tag(pos_);
      if (at == std::string::npos) {
        emit_data(pos_, src_.size() - pos_);
        break;
      }
      std::string text = src_.substr(pos_, at - pos_);
      const char kind = src_[at + 1];  // '{', '%' or '#'
      size_t after = at + 2;
      char sign = 0;
      if (after < src_.size() && (src_[after] == '-' || src_[after] == '+')) sign = src_[after++];
      const bool raw = kind == '%' && is_raw_begin(after);
      if (sign == '-') {
        text = rstrip_ws(text);
      } else if (sign != '+' && kind != '{') {
        // lstrip_blocks: whitespace alone between a line's start and a block or comment tag goes.
        size_t l_pos = text.rfind('\n');
        l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
        if ((l_pos > 0 || line_starting) && l_pos < text.size() && all_ws(text, l_pos)) text.resize(l_pos);
      }
      uint32_t data_line = line_at(pos_);
      if (!text.empty()) tokens_.push_back(Token{Tok::Data, data_line, std::move(text), 0, 0});
      const uint32_t tag_line = line_at(at);
      if (raw) {
        line_starting = lex_raw(after, tag_line);
      } else if (kind == '#') {
        line_starting = lex_comment(after, tag_line);
      } else {
        line_starting = lex_tag(after, kind == '{', tag_line);
      }
    }
    tokens_.push_back(Token{Tok::Eof, line_at(src_.size()), {}, 0, 0});
    return std::move(tokens_);
  }

 private:
  std::string src_;
  const std::string& name_;
  size_t pos_ = 0;
  std::vector<Token> tokens_;
  size_t line_pos_ = 0;
  uint32_t line_ = 1;

  [[noreturn]] void fail(uint32_t line, const std::string& what) const {
    throw Error(name_ + ": line " + std::to_string(line) + ": " + what);
  }

  // Line of a byte offset; offsets are asked for in increasing order.
  uint32_t line_at(size_t offset) {
    if (offset < line_pos_) {
      line_pos_ = 0;
      line_ = 1;
    }
    for (; line_pos_ < offset && line_pos_ < src_.size(); ++line_pos_)
      if (src_[line_pos_] == '\n') ++line_;
    return line_;
  }

  size_t find_tag(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1))
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    return std::string::npos;
  }

  // Whitespace as Python's \s sees it, one code point at `i` (0 when not whitespace).
  size_t ws_len(const std::string& s, size_t i) const {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) return is_space(c) ? 1 : 0;
    const size_t n = utf8::sequence_length(c);
    if (n == 0 || i + n > s.size()) return 0;
    return is_space(to_u32(std::string_view(s).substr(i, n))[0]) ? n : 0;
  }
  bool all_ws(const std::string& s, size_t from) const {
    for (size_t i = from; i < s.size();) {
      size_t n = ws_len(s, i);
      if (!n) return false;
      i += n;
    }
    return true;
  }
  size_t skip_ws(size_t i) const {
    while (i < src_.size()) {
      size_t n = ws_len(src_, i);
      if (!n) break;
      i += n;
    }
    return i;
  }
  std::string rstrip_ws(const std::string& s) const {
    std::u32string u = to_u32(s);
    while (!u.empty() && is_space(u.back())) u.pop_back();
    return to_utf8(u);
  }

  void emit_data(size_t from, size_t n) {
    if (n) tokens_.push_back(Token{Tok::Data, line_at(from), src_.substr(from, n), 0, 0});
    pos_ = from + n;
  }

  // A tag's end: `-%}` and the whitespace after it, `+%}` (block and comment
  // tags only), or `%}` and, with trim_blocks, one newline (block and comment
  // tags only). Returns its length, 0 when there is no end at `i`.
  size_t match_end(size_t i, char close, bool block) const {
    auto at = [&](size_t k, char c) { return k < src_.size() && src_[k] == c; };
    const bool trim = block;
    if (((block && at(i, '+')) || at(i, '-')) && at(i + 1, close) && at(i + 2, '}')) {
      if (src_[i] == '+') return 3;
      return skip_ws(i + 3) - i;
    }
    if (at(i, close) && at(i + 1, '}')) return 2 + (trim && at(i + 2, '\n') ? 1 : 0);
    return 0;
  }

  bool is_raw_begin(size_t after) const {
    size_t i = skip_ws(after);
    if (src_.compare(i, 3, "raw") != 0) return false;
    i = skip_ws(i + 3);
    return src_.compare(i, 3, "-%}") == 0 || src_.compare(i, 2, "%}") == 0;
  }

  bool lex_comment(size_t i, uint32_t line) {
    for (; i < src_.size(); ++i) {
      if (size_t n = (src_[i] == '#' || src_[i] == '+' || src_[i] == '-') ? match_end(i, '#', true) : 0) {
        pos_ = i + n;
        return src_[pos_ - 1] == '\n';
      }
    }
    fail(line, "the comment opened here is not closed with '#}'");
  }

  // {% raw %}...{% endraw %}: the text between, untouched. `i` is just past
  // the opener's sign; the opener is `raw` then `%}`, or `-%}` and whitespace.
  bool lex_raw(size_t i, uint32_t line) {
    i = skip_ws(skip_ws(i) + 3);
    i = src_[i] == '-' ? skip_ws(i + 3) : i + 2;
    const size_t body = i;
    const bool line_starting = src_[i - 1] == '\n';
    for (size_t k = src_.find("{%", body); k != std::string::npos; k = src_.find("{%", k + 1)) {
      size_t j = k + 2;
      char sign = 0;
      if (j < src_.size() && (src_[j] == '-' || src_[j] == '+')) sign = src_[j++];
      j = skip_ws(j);
      if (src_.compare(j, 6, "endraw") != 0) continue;
      j = skip_ws(j + 6);
      size_t n = match_end(j, '%', true);
      if (!n) continue;
      std::string text = src_.substr(body, k - body);
      if (sign == '-') {
        text = rstrip_ws(text);
      } else if (sign != '+') {
        size_t l_pos = text.rfind('\n');
        l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
        if ((l_pos > 0 || line_starting) && l_pos < text.size() && all_ws(text, l_pos)) text.resize(l_pos);
      }
      if (!text.empty()) tokens_.push_back(Token{Tok::Data, line_at(body), std::move(text), 0, 0});
      pos_ = j + n;
      return src_[pos_ - 1] == '\n';
    }
    fail(line, "the raw block opened here is not closed with '{% endraw %}'");
  }

  // The tokens of a {{ ... }} or {% ... %} tag, up to and including its end.
  bool lex_tag(size_t i, bool variable, uint32_t line) {
    tokens_.push_back(Token{variable ? Tok::VarBegin : Tok::BlockBegin, line, {}, 0, 0});
    std::string brackets;  // the closers expected, innermost last
    const char close = variable ? '}' : '%';
    while (true) {
      if (i >= src_.size())
        fail(line, std::string("the tag opened here is not closed with '") + (variable ? "}}" : "%}") + "'");
      if (brackets.empty()) {
        if (size_t n = match_end(i, close, !variable)) {
          tokens_.push_back(Token{variable ? Tok::VarEnd : Tok::BlockEnd, line_at(i), {}, 0, 0});
          pos_ = i + n;
          return src_[pos_ - 1] == '\n';
        }
      }
      if (size_t n = ws_len(src_, i)) {
        i = skip_ws(i + n);
        continue;
      }
      const uint32_t tline = line_at(i);
      const char c = src_[i];
      if (is_ascii_digit(c)) {
        i = lex_number(i, tline);
      } else if (is_name_start(c)) {
        size_t j = i;
        while (j < src_.size() && is_name_char(src_[j])) ++j;
        if (j < src_.size() && static_cast<unsigned char>(src_[j]) >= 0x80 && !ws_len(src_, j))
          fail(tline, "names with non-ASCII characters are not supported");
        tokens_.push_back(Token{Tok::Name, tline, src_.substr(i, j - i), 0, 0});
        i = j;
      } else if (c == '\'' || c == '"') {
        i = lex_string(i, tline);
      } else if (static_cast<unsigned char>(c) >= 0x80) {
        fail(tline, "unexpected character in a tag (names with non-ASCII characters are not supported)");
      } else {
        static constexpr const char* kOps[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[",
                                               "]",  "(",  ")",  "{",  "}",  ">",  "<", "=", ".", ":", "|", ",", ";"};
        const char* op = nullptr;
        for (const char* o : kOps)
          if (src_.compare(i, std::char_traits<char>::length(o), o) == 0) {
            op = o;
            break;
          }
        if (!op) fail(tline, std::string("unexpected character '") + c + "'");
        const std::string o(op);
        if (o == "(" || o == "[" || o == "{") {
          if (brackets.size() >= kMaxParseDepth) fail(tline, "brackets nested too deeply");
          brackets.push_back(o == "(" ? ')' : o == "[" ? ']' : '}');
        } else if (o == ")" || o == "]" || o == "}") {
          if (brackets.empty()) fail(tline, "unexpected '" + o + "'");
          if (brackets.back() != o[0]) fail(tline, "unexpected '" + o + "', expected '" + brackets.back() + "'");
          brackets.pop_back();
        }
        tokens_.push_back(Token{Tok::Op, tline, o, 0, 0});
        i += o.size();
      }
    }
  }

  // Jinja2's float and integer patterns: digits with `_` separators, 0b/0o/0x
  // prefixes, a float needing a fraction or an exponent.
  size_t lex_number(size_t i, uint32_t line) {
    auto digits = [&](size_t k, auto is_digit) {  // (\d+_)*\d+ from k; returns the end or k
      size_t j = k;
      if (j >= src_.size() || !is_digit(src_[j])) return k;
      while (j < src_.size()) {
        if (is_digit(src_[j])) {
          ++j;
        } else if (src_[j] == '_' && j + 1 < src_.size() && is_digit(src_[j + 1])) {
          ++j;
        } else {
          break;
        }
      }
      return j;
    };
    auto dec = [](char c) { return is_ascii_digit(c); };
    const bool after_dot = i > 0 && src_[i - 1] == '.';
    // A float, unless the number follows a dot (`x.0.1` is attribute access).
    if (!after_dot) {
      size_t j = digits(i, dec);
      size_t frac_end = 0;
      if (j < src_.size() && src_[j] == '.') {
        size_t f = digits(j + 1, dec);
        if (f > j + 1) frac_end = f;
      }
      size_t k = frac_end ? frac_end : j;
      size_t exp_end = 0;
      if (k < src_.size() && (src_[k] == 'e' || src_[k] == 'E')) {
        size_t e = k + 1;
        if (e < src_.size() && (src_[e] == '+' || src_[e] == '-')) ++e;
        size_t d = digits(e, dec);
        if (d > e) exp_end = d;
      }
      if (frac_end || exp_end) {
        size_t end = exp_end ? exp_end : frac_end;
        std::string text;
        for (size_t p = i; p < end; ++p)
          if (src_[p] != '_') text.push_back(src_[p]);
        tokens_.push_back(Token{Tok::Float, line, text, 0, std::strtod(text.c_str(), nullptr)});
        return end;
      }
    }
    int base = 10;
    size_t start = i, end = i;
    const char p = i + 1 < src_.size() ? static_cast<char>(src_[i + 1] | 0x20) : 0;
    auto prefixed = [&](int b, auto is_digit) {  // 0x(_?[digits])+
      size_t j = i + 2;
      while (j < src_.size()) {
        if (is_digit(src_[j])) {
          ++j;
        } else if (src_[j] == '_' && j + 1 < src_.size() && is_digit(src_[j + 1])) {
          j += 2;
        } else {
          break;
        }
      }
      if (j > i + 2) {
        base = b;
        start = i + 2;
        end = j;
      }
    };
    if (src_[i] == '0' && p == 'b') prefixed(2, [](char c) { return c == '0' || c == '1'; });
    if (src_[i] == '0' && p == 'o') prefixed(8, [](char c) { return c >= '0' && c <= '7'; });
    if (src_[i] == '0' && p == 'x')
      prefixed(16, [](char c) { return is_ascii_digit(c) || ((c | 0x20) >= 'a' && (c | 0x20) <= 'f'); });
    if (end == i) {
      if (src_[i] == '0') {  // 0(_?0)*
        end = i + 1;
        while (end < src_.size() && (src_[end] == '0' || (src_[end] == '_' && end + 1 < src_.size() &&
                                                          src_[end + 1] == '0')))
          end += src_[end] == '_' ? 2 : 1;
      } else {
        end = digits(i, dec);
      }
    }
    int64_t value = 0;
    for (size_t k = start; k < end; ++k) {
      if (src_[k] == '_') continue;
      const char c = static_cast<char>(src_[k] | 0x20);
      const int d = c >= 'a' ? c - 'a' + 10 : c - '0';
      if (__builtin_mul_overflow(value, base, &value) || __builtin_add_overflow(value, d, &value))
        fail(line, "integer literal too large (past int64)");
    }
    tokens_.push_back(Token{Tok::Int, line, src_.substr(i, end - i), value, 0});
    return end;
  }

  // A quoted string; escapes decoded as Python's unicode-escape codec does
  // (Jinja2 decodes them so), unknown escapes kept with their backslash.
  size_t lex_string(size_t i, uint32_t line) {
    const char quote = src_[i];
    size_t j = i + 1;
    while (j < src_.size() && src_[j] != quote) j += src_[j] == '\\' ? 2 : 1;
    if (j >= src_.size()) fail(line, "the string starting here is not closed");
    const std::string_view body = std::string_view(src_).substr(i + 1, j - i - 1);
    std::string out;
    for (size_t k = 0; k < body.size();) {
      if (body[k] != '\\') {
        out.push_back(body[k++]);
        continue;
      }
      const char e = body[k + 1];
      k += 2;
      auto hex = [&](int n, const char* what) {
        char32_t v = 0;
        for (int d = 0; d < n; ++d, ++k) {
          if (k >= body.size() || !std::isxdigit(static_cast<unsigned char>(body[k])))
            fail(line, std::string("truncated ") + what + " escape in a string");
          const char c = static_cast<char>(body[k] | 0x20);
          v = v * 16 + static_cast<char32_t>(c >= 'a' ? c - 'a' + 10 : c - '0');
        }
        return v;
      };
      char32_t cp = 0;
      switch (e) {
        case '\n': continue;  // a backslash-newline is a line continuation
        case '\\': out.push_back('\\'); continue;
        case '\'': out.push_back('\''); continue;
        case '"': out.push_back('"'); continue;
        case 'a': out.push_back('\a'); continue;
        case 'b': out.push_back('\b'); continue;
        case 'f': out.push_back('\f'); continue;
        case 'n': out.push_back('\n'); continue;
        case 'r': out.push_back('\r'); continue;
        case 't': out.push_back('\t'); continue;
        case 'v': out.push_back('\v'); continue;
        case 'x': cp = hex(2, "\\xXX"); break;
        case 'u': cp = hex(4, "\\uXXXX"); break;
        case 'U': cp = hex(8, "\\UXXXXXXXX"); break;
        case 'N': fail(line, "\\N{...} escapes in strings are not supported");
        default:
          if (e >= '0' && e <= '7') {
            cp = static_cast<char32_t>(e - '0');
            for (int d = 0; d < 2 && k < body.size() && body[k] >= '0' && body[k] <= '7'; ++d, ++k)
              cp = cp * 8 + static_cast<char32_t>(body[k] - '0');
            break;
          }
          if (static_cast<unsigned char>(e) >= 0x80) {
            // Jinja2 first writes non-ASCII as \xNN / \uNNNN / \UNNNNNNNN, so an escaped
            // non-ASCII character comes out as that escape's text.
            const size_t n = utf8::sequence_length(static_cast<unsigned char>(e));
            const char32_t c = to_u32(body.substr(k - 1, n))[0];
            char buf[16];
            std::snprintf(buf, sizeof buf, c < 0x100 ? "\\x%02x" : c < 0x10000 ? "\\u%04x" : "\\U%08x",
                          static_cast<unsigned>(c));
            out += buf;
            k += n - 1;
            continue;
          }
          out.push_back('\\');  // an unknown escape stays as written
          out.push_back(e);
          continue;
      }
      if (cp > 0x10FFFF) fail(line, "escape in a string is past U+10FFFF");
      if (cp >= 0xD800 && cp < 0xE000) fail(line, "escape in a string names a lone surrogate");
      append_utf8(out, cp);
    }
    tokens_.push_back(Token{Tok::String, line, std::move(out), 0, 0});
    return j + 1;
  }
};

// --- parser

class Parser {
 public:
  Parser(std::vector<Token> tokens, const std::string& name) : t_(std::move(tokens)), name_(name) {}

  Body parse() {
    Body body = subparse({});
    return body;
  }

 private:
  std::vector<Token> t_;
  size_t p_ = 0;
  const std::string& name_;
  int depth_ = 0;
  int loops_ = 0;                                  // enclosing for loops (for break/continue)
  std::vector<std::pair<std::string, uint32_t>> open_;  // open blocks: tag and line

  struct DepthGuard {
    Parser& p;
    explicit DepthGuard(Parser& parser, uint32_t line) : p(parser) {
      if (++p.depth_ > kMaxParseDepth) p.fail(line, "the template nests more than 100 levels deep");
    }
    ~DepthGuard() { --p.depth_; }
  };

  [[noreturn]] void fail(uint32_t line, const std::string& what) const {
    throw Error(name_ + ": line " + std::to_string(line) + ": " + what);
  }
  const Token& cur() const { return t_[p_]; }
  const Token& look() const { return t_[std::min(p_ + 1, t_.size() - 1)]; }
  void next() {
    if (p_ + 1 < t_.size()) ++p_;
  }
  bool is_op(const char* op) const { return cur().type == Tok::Op && cur().text == op; }
  bool is_name(const char* n) const { return cur().type == Tok::Name && cur().text == n; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(const char* n) {
    if (!is_name(n)) return false;
    next();
    return true;
  }
  static std::string describe(const Token& t) {
    switch (t.type) {
      case Tok::Data: return "template text";
      case Tok::VarBegin: return "'{{'";
      case Tok::VarEnd: return "'}}'";
      case Tok::BlockBegin: return "'{%'";
      case Tok::BlockEnd: return "'%}'";
      case Tok::Name: return "'" + t.text + "'";
      case Tok::String: return "a string";
      case Tok::Int:
      case Tok::Float: return "a number";
      case Tok::Op: return "'" + t.text + "'";
      case Tok::Eof: return "the end of the template";
    }
    return "?";
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) fail(cur().line, std::string("expected '") + op + "', got " + describe(cur()));
  }
  std::string expect_name() {
    if (cur().type != Tok::Name) fail(cur().line, "expected a name, got " + describe(cur()));
    std::string n = cur().text;
    next();
    return n;
  }
  void expect_block_end() {
    if (cur().type != Tok::BlockEnd) fail(cur().line, "expected '%}' to end the tag, got " + describe(cur()));
    next();
  }

  static ExprPtr make(ExprType type, uint32_t line) {
    auto e = std::make_unique<Expr>();
    e->type = type;
    e->line = line;
    return e;
  }

  // --- statements

  // Parses until a block tag named in `ends` (left current) or the end of input.
  Body subparse(const std::vector<std::string>& ends) {
    Body body;
    while (true) {
      const Token& tok = cur();
      if (tok.type == Tok::Eof) {
        if (!ends.empty()) {
          const auto& [tag, line] = open_.back();
          fail(cur().line, "unexpected end of template: the '" + tag + "' block opened on line " +
                               std::to_string(line) + " is not closed (expected '{% " + ends.back() + " %}')");
        }
        return body;
      }
      if (tok.type == Tok::Data) {
        auto n = std::make_unique<Node>();
        n->type = NodeType::Data;
        n->line = tok.line;
        n->text = tok.text;
        body.push_back(std::move(n));
        next();
      } else if (tok.type == Tok::VarBegin) {
        auto n = std::make_unique<Node>();
        n->type = NodeType::Output;
        n->line = tok.line;
        next();
        n->exprs.push_back(parse_tuple(true, {}, false));
        if (cur().type != Tok::VarEnd) fail(cur().line, "expected '}}' to end the expression, got " + describe(cur()));
        next();
        body.push_back(std::move(n));
      } else if (tok.type == Tok::BlockBegin) {
        next();
        if (cur().type == Tok::Name && std::find(ends.begin(), ends.end(), cur().text) != ends.end()) return body;
        body.push_back(parse_statement());
        expect_block_end();
      } else {
        fail(tok.line, "unexpected " + describe(tok));
      }
    }
  }

  // After a statement's head: `%}`, the body, and the end tag (left current).
  Body parse_statements(const std::string& tag, uint32_t line, const std::vector<std::string>& ends) {
    skip_op(":");
    expect_block_end();
    DepthGuard guard(*this, line);
    open_.emplace_back(tag, line);
    Body body = subparse(ends);
    open_.pop_back();
    return body;
  }

  std::unique_ptr<Node> node(NodeType type, uint32_t line) {
    auto n = std::make_unique<Node>();
    n->type = type;
    n->line = line;
    return n;
  }

  std::unique_ptr<Node> parse_statement() {
    const Token tok = cur();
    if (tok.type != Tok::Name) fail(tok.line, "expected a tag name after '{%', got " + describe(tok));
    const std::string& w = tok.text;
    const uint32_t line = tok.line;
    if (w == "for") return parse_for(line);
    if (w == "if") return parse_if(line);
    if (w == "set") return parse_set(line);
    if (w == "macro") return parse_macro(line);
    if (w == "call") return parse_call_block(line);
    if (w == "filter") return parse_filter_block(line);
    if (w == "with") return parse_with(line);
    if (w == "generation") {  // transformers' extension: marks assistant text, renders its body
      next();
      auto n = node(NodeType::Scope, line);
      n->bodies.push_back(parse_statements("generation", line, {"endgeneration"}));
      next();
      return n;
    }
    if (w == "print") {
      next();
      auto n = node(NodeType::Output, line);
      while (cur().type != Tok::BlockEnd) {
        if (!n->exprs.empty()) expect_op(",");
        n->exprs.push_back(parse_expression(true));
      }
      return n;
    }
    if (w == "break" || w == "continue") {
      if (loops_ == 0) fail(line, "'" + w + "' outside of a for loop");
      next();
      return node(w == "break" ? NodeType::Break : NodeType::Continue, line);
    }
    if (w == "block" || w == "extends" || w == "include" || w == "import" || w == "from" || w == "autoescape")
      fail(line, "'{% " + w + " %}' is not supported (a chat template is one self-contained template)");
    for (const auto& [tag, open_line] : open_) {
      if (w == "end" + tag || (w == "elif" && tag == "if") || (w == "else" && (tag == "if" || tag == "for")))
        fail(line, "'{% " + w + " %}' does not close the innermost open block, '" + open_.back().first +
                       "' from line " + std::to_string(open_.back().second));
    }
    if (w.rfind("end", 0) == 0 || w == "elif" || w == "else")
      fail(line, "unexpected '{% " + w + " %}': no block is open that it could continue or close");
    fail(line, "unknown tag '" + w + "'");
  }

  std::unique_ptr<Node> parse_for(uint32_t line) {
    next();
    auto n = node(NodeType::For, line);
    n->target = parse_assign_target(false, true);
    if (!skip_name("in")) fail(cur().line, "expected 'in' in the for loop, got " + describe(cur()));
    n->exprs.push_back(parse_tuple(false, {"recursive"}, false));
    ExprPtr test;
    if (skip_name("if")) test = parse_expression(true);
    n->exprs.push_back(std::move(test));
    if (is_name("recursive")) fail(cur().line, "recursive for loops are not supported");
    ++loops_;
    n->bodies.push_back(parse_statements("for", line, {"endfor", "else"}));
    --loops_;
    if (cur().text == "else") {
      next();
      n->bodies.push_back(parse_statements("for", line, {"endfor"}));
    } else {
      n->bodies.emplace_back();
    }
    next();
    return n;
  }

  std::unique_ptr<Node> parse_if(uint32_t line) {
    next();
    auto n = node(NodeType::If, line);
    while (true) {
      n->exprs.push_back(parse_tuple(false, {}, false));
      n->bodies.push_back(parse_statements("if", line, {"elif", "else", "endif"}));
      const std::string which = cur().text;
      next();
      if (which == "elif") continue;
      if (which == "else") {
        n->bodies.push_back(parse_statements("if", line, {"endif"}));
        next();
      }
      break;
    }
    return n;
  }

  std::unique_ptr<Node> parse_set(uint32_t line) {
    next();
    Target target = parse_assign_target(true, true);
    if (skip_op("=")) {
      auto n = node(NodeType::Set, line);
      n->target = std::move(target);
      n->exprs.push_back(parse_tuple(true, {}, false));
      return n;
    }
    auto n = node(NodeType::SetBlock, line);
    n->target = std::move(target);
    if (is_op("|")) n->filter = parse_filter(nullptr, false);
    const int loops = loops_;
    loops_ = 0;
    n->bodies.push_back(parse_statements("set", line, {"endset"}));
    loops_ = loops;
    next();
    return n;
  }

  void parse_signature(Node& n) {
    expect_op("(");
    while (!is_op(")")) {
      if (!n.params.empty()) expect_op(",");
      const uint32_t line = cur().line;
      n.params.push_back(expect_name());
      if (skip_op("=")) {
        n.exprs.push_back(parse_expression(true));
      } else if (!n.exprs.empty()) {
        fail(line, "a parameter without a default follows one with a default");
      }
    }
    expect_op(")");
  }

  std::unique_ptr<Node> parse_macro(uint32_t line) {
    next();
    auto n = node(NodeType::Macro, line);
    n->target.name = expect_name();
    parse_signature(*n);
    const int loops = loops_;
    loops_ = 0;
    n->bodies.push_back(parse_statements("macro", line, {"endmacro"}));
    loops_ = loops;
    next();
    return n;
  }

  std::unique_ptr<Node> parse_call_block(uint32_t line) {
    next();
    auto n = node(NodeType::CallBlock, line);
    std::vector<ExprPtr> defaults;
    if (is_op("(")) {
      parse_signature(*n);
      defaults = std::move(n->exprs);
      n->exprs.clear();
    }
    ExprPtr call = parse_expression(true);
    if (call->type != ExprType::Call) fail(line, "'{% call %}' needs a macro call, like {% call m() %}");
    n->exprs.push_back(std::move(call));
    for (auto& d : defaults) n->exprs.push_back(std::move(d));
    const int loops = loops_;
    loops_ = 0;
    n->bodies.push_back(parse_statements("call", line, {"endcall"}));
    loops_ = loops;
    next();
    return n;
  }

  std::unique_ptr<Node> parse_filter_block(uint32_t line) {
    next();
    auto n = node(NodeType::FilterBlock, line);
    n->filter = parse_filter(nullptr, true);
    n->bodies.push_back(parse_statements("filter", line, {"endfilter"}));
    next();
    return n;
  }

  std::unique_ptr<Node> parse_with(uint32_t line) {
    next();
    auto n = node(NodeType::With, line);
    while (cur().type != Tok::BlockEnd) {
      if (!n->targets.empty()) expect_op(",");
      n->targets.push_back(parse_assign_target(false, false));
      expect_op("=");
      n->exprs.push_back(parse_expression(true));
    }
    n->bodies.push_back(parse_statements("with", line, {"endwith"}));
    next();
    return n;
  }

  // A name, `ns.attr` (with_namespace), or a tuple of names (`a, b` or `(a, b)`).
  Target parse_assign_target(bool with_namespace, bool with_tuple) {
    Target t;
    t.line = cur().line;
    if (with_namespace && cur().type == Tok::Name && look().type == Tok::Op && look().text == ".") {
      t.type = Target::Type::NsAttr;
      t.name = expect_name();
      next();
      t.attr = expect_name();
      return t;
    }
    if (!with_tuple) {
      t.name = expect_name();
      return t;
    }
    std::vector<Target> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (is_name("in") || cur().type == Tok::BlockEnd || is_op("=") || is_op("|") || is_op(")")) break;
      items.push_back(parse_target_primary());
      if (is_op(","))
        is_tuple = true;
      else
        break;
    }
    if (items.empty()) fail(t.line, "expected a name to assign to, got " + describe(cur()));
    if (!is_tuple) return std::move(items[0]);
    t.type = Target::Type::Tuple;
    t.items = std::move(items);
    return t;
  }

  Target parse_target_primary() {
    Target t;
    t.line = cur().line;
    if (skip_op("(")) {
      DepthGuard guard(*this, t.line);
      t.type = Target::Type::Tuple;
      while (!is_op(")")) {
        if (!t.items.empty()) expect_op(",");
        if (is_op(")")) break;
        t.items.push_back(parse_target_primary());
      }
      expect_op(")");
      if (t.items.size() == 1 && t.items[0].type == Target::Type::Name) return std::move(t.items[0]);
      return t;
    }
    if (cur().type != Tok::Name || is_name("true") || is_name("false") || is_name("none") || is_name("True") ||
        is_name("False") || is_name("None"))
      fail(t.line, "can't assign to " + describe(cur()));
    t.name = expect_name();
    return t;
  }

  // --- expressions (Jinja2's precedence, loosest first)

  bool is_tuple_end(const std::vector<std::string>& extra) const {
    if (cur().type == Tok::VarEnd || cur().type == Tok::BlockEnd || is_op(")")) return true;
    return cur().type == Tok::Name && std::find(extra.begin(), extra.end(), cur().text) != extra.end();
  }

  ExprPtr parse_tuple(bool with_condexpr, const std::vector<std::string>& extra, bool explicit_parens) {
    const uint32_t line = cur().line;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (is_tuple_end(extra)) break;
      items.push_back(parse_expression(with_condexpr));
      if (is_op(","))
        is_tuple = true;
      else
        break;
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parens) fail(cur().line, "expected an expression, got " + describe(cur()));
    }
    auto e = make(ExprType::Tuple, line);
    e->args = std::move(items);
    return e;
  }

  ExprPtr parse_expression(bool with_condexpr) {
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExprPtr parse_condexpr() {
    DepthGuard guard(*this, cur().line);
    ExprPtr expr = parse_or();
    while (is_name("if")) {
      const uint32_t line = cur().line;
      next();
      auto e = make(ExprType::Cond, line);
      e->args.push_back(parse_or());
      e->args.push_back(std::move(expr));
      e->args.push_back(skip_name("else") ? parse_condexpr() : nullptr);
      expr = std::move(e);
    }
    return expr;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name("or")) {
      auto e = make(ExprType::Or, cur().line);
      next();
      e->args.push_back(std::move(left));
      e->args.push_back(parse_and());
      left = std::move(e);
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      auto e = make(ExprType::And, cur().line);
      next();
      e->args.push_back(std::move(left));
      e->args.push_back(parse_not());
      left = std::move(e);
    }
    return left;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard guard(*this, cur().line);
      auto e = make(ExprType::Not, cur().line);
      next();
      e->args.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const uint32_t line = cur().line;
    ExprPtr first = parse_math1();
    ExprPtr cmp;
    while (true) {
      CmpOp op;
      if (is_op("==")) {
        op = CmpOp::Eq;
      } else if (is_op("!=")) {
        op = CmpOp::Ne;
      } else if (is_op("<")) {
        op = CmpOp::Lt;
      } else if (is_op("<=")) {
        op = CmpOp::Le;
      } else if (is_op(">")) {
        op = CmpOp::Gt;
      } else if (is_op(">=")) {
        op = CmpOp::Ge;
      } else if (is_name("in")) {
        op = CmpOp::In;
      } else if (is_name("not") && look().type == Tok::Name && look().text == "in") {
        next();
        op = CmpOp::NotIn;
      } else {
        break;
      }
      next();
      if (!cmp) {
        cmp = make(ExprType::Compare, line);
        cmp->args.push_back(std::move(first));
      }
      cmp->ops.push_back(op);
      cmp->args.push_back(parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(first);
  }

  ExprPtr binary(ExprType type, ExprPtr left, ExprPtr right, uint32_t line) {
    auto e = make(type, line);
    e->args.push_back(std::move(left));
    e->args.push_back(std::move(right));
    return e;
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      const ExprType t = is_op("+") ? ExprType::Add : ExprType::Sub;
      const uint32_t line = cur().line;
      next();
      left = binary(t, std::move(left), parse_concat(), line);
    }
    return left;
  }

  ExprPtr parse_concat() {
    const uint32_t line = cur().line;
    ExprPtr first = parse_math2();
    if (!is_op("~")) return first;
    auto e = make(ExprType::Concat, line);
    e->args.push_back(std::move(first));
    while (skip_op("~")) e->args.push_back(parse_math2());
    return e;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const ExprType t = is_op("*")   ? ExprType::Mul
                         : is_op("/") ? ExprType::Div
                         : is_op("//") ? ExprType::FloorDiv
                                       : ExprType::Mod;
      const uint32_t line = cur().line;
      next();
      left = binary(t, std::move(left), parse_pow(), line);
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (is_op("**")) {  // left-associative in Jinja2, unlike Python
      const uint32_t line = cur().line;
      next();
      left = binary(ExprType::Pow, std::move(left), parse_unary(true), line);
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(*this, cur().line);
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      auto e = make(is_op("-") ? ExprType::Neg : ExprType::Pos, cur().line);
      next();
      e->args.push_back(parse_unary(false));
      node = std::move(e);
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    const Token& tok = cur();
    const uint32_t line = tok.line;
    if (tok.type == Tok::Name) {
      auto e = make(ExprType::Const, line);
      if (tok.text == "true" || tok.text == "True") {
        e->value = Value::boolean(true);
      } else if (tok.text == "false" || tok.text == "False") {
        e->value = Value::boolean(false);
      } else if (tok.text == "none" || tok.text == "None") {
        e->value = Value::none();
      } else {
        e->type = ExprType::Name;
        e->name = tok.text;
      }
      next();
      return e;
    }
    if (tok.type == Tok::String) {
      std::string s;
      while (cur().type == Tok::String) {  // adjacent strings join, as in Python
        s += cur().text;
        next();
      }
      auto e = make(ExprType::Const, line);
      e->value = Value::string(std::move(s));
      return e;
    }
    if (tok.type == Tok::Int || tok.type == Tok::Float) {
      auto e = make(ExprType::Const, line);
      e->value = tok.type == Tok::Int ? Value::integer(tok.int_value) : Value::number(tok.float_value);
      next();
      return e;
    }
    if (skip_op("(")) {
      ExprPtr e = parse_tuple(true, {}, true);
      expect_op(")");
      return e;
    }
    if (skip_op("[")) {
      auto e = make(ExprType::List, line);
      while (!is_op("]")) {
        if (!e->args.empty()) expect_op(",");
        if (is_op("]")) break;
        e->args.push_back(parse_expression(true));
      }
      expect_op("]");
      return e;
    }
    if (skip_op("{")) {
      auto e = make(ExprType::Dict, line);
      while (!is_op("}")) {
        if (!e->args.empty()) expect_op(",");
        if (is_op("}")) break;
        e->args.push_back(parse_expression(true));
        expect_op(":");
        e->args.push_back(parse_expression(true));
      }
      expect_op("}");
      return e;
    }
    fail(line, "unexpected " + describe(tok) + " in an expression");
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (is_op(".") || is_op("[")) {
        node = parse_subscript(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (is_op("|")) {
        node = parse_filter(std::move(node), false);
      } else if (is_name("is")) {
        node = parse_test(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr node) {
    const uint32_t line = cur().line;
    if (skip_op(".")) {
      if (cur().type == Tok::Name) {
        auto e = make(ExprType::Attr, line);
        e->name = cur().text;
        next();
        e->args.push_back(std::move(node));
        return e;
      }
      if (cur().type != Tok::Int) fail(cur().line, "expected a name or a number after '.'");
      auto e = make(ExprType::Item, line);
      e->args.push_back(std::move(node));
      auto idx = make(ExprType::Const, cur().line);
      idx->value = Value::integer(cur().int_value);
      next();
      e->args.push_back(std::move(idx));
      return e;
    }
    expect_op("[");
    std::vector<ExprPtr> items;
    while (!is_op("]")) {
      if (!items.empty()) expect_op(",");
      items.push_back(parse_subscribed());
    }
    expect_op("]");
    if (items.empty()) fail(line, "empty subscript '[]'");
    if (items.size() == 1 && items[0]->type == ExprType::Slice) {
      items[0]->args[0] = std::move(node);
      return std::move(items[0]);
    }
    auto e = make(ExprType::Item, line);
    e->args.push_back(std::move(node));
    if (items.size() == 1) {
      e->args.push_back(std::move(items[0]));
    } else {
      for (const auto& it : items)
        if (it->type == ExprType::Slice) fail(line, "slices inside a tuple subscript are not supported");
      auto t = make(ExprType::Tuple, line);
      t->args = std::move(items);
      e->args.push_back(std::move(t));
    }
    return e;
  }

  // An index or a slice [start:stop:step]; a slice leaves args[0] for its subject.
  ExprPtr parse_subscribed() {
    const uint32_t line = cur().line;
    ExprPtr start;
    if (!is_op(":")) {
      start = parse_expression(true);
      if (!is_op(":")) return start;
    }
    next();  // the first ':'
    auto e = make(ExprType::Slice, line);
    e->args.push_back(nullptr);
    e->args.push_back(std::move(start));
    ExprPtr stop, step;
    if (!is_op(":") && !is_op("]") && !is_op(",")) stop = parse_expression(true);
    if (skip_op(":"))
      if (!is_op("]") && !is_op(",")) step = parse_expression(true);
    e->args.push_back(std::move(stop));
    e->args.push_back(std::move(step));
    return e;
  }

  void parse_call_args(Expr& e) {
    const uint32_t line = cur().line;
    expect_op("(");
    bool require_comma = false;
    while (!is_op(")")) {
      if (require_comma) {
        expect_op(",");
        if (is_op(")")) break;
      }
      if (is_op("*") || is_op("**")) fail(cur().line, "*args and **kwargs in calls are not supported");
      if (cur().type == Tok::Name && look().type == Tok::Op && look().text == "=") {
        std::string key = cur().text;
        next();
        next();
        e.kwargs.emplace_back(std::move(key), parse_expression(true));
      } else {
        if (!e.kwargs.empty()) fail(line, "a positional argument follows a keyword argument");
        e.args.push_back(parse_expression(true));
      }
      require_comma = true;
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto e = make(ExprType::Call, cur().line);
    e->args.push_back(std::move(callee));
    parse_call_args(*e);
    return e;
  }

  // `| name(args)` chains; a null subject stands for a block's rendered body.
  ExprPtr parse_filter(ExprPtr node, bool start_inline) {
    while (is_op("|") || start_inline) {
      if (!start_inline) next();
      start_inline = false;
      const uint32_t line = cur().line;
      std::string name = expect_name();
      while (skip_op(".")) {
        name.push_back('.');
        name.append(expect_name());
      }
      const int id = filter_id(name);
      if (id < 0) fail(line, "no filter named '" + name + "'");
      if (!kFilters[static_cast<size_t>(id)].supported) fail(line, "the filter '" + name + "' is not supported");
      auto e = make(ExprType::Filter, line);
      e->name = name;
      e->id = id;
      e->args.push_back(std::move(node));
      if (is_op("(")) parse_call_args(*e);
      node = std::move(e);
    }
    return node;
  }

  ExprPtr parse_test(ExprPtr node) {
    const uint32_t line = cur().line;
    next();  // 'is'
    const bool negated = skip_name("not");
    std::string name = expect_name();
    while (skip_op(".")) {
        name.push_back('.');
        name.append(expect_name());
      }
    const int id = test_id(name);
    if (id < 0) fail(line, "no test named '" + name + "'");
    if (!kTests[static_cast<size_t>(id)].supported) fail(line, "the test '" + name + "' is not supported");
    auto e = make(ExprType::Test, line);
    e->name = name;
    e->id = id;
    e->args.push_back(std::move(node));
    if (is_op("(")) {
      parse_call_args(*e);
    } else if ((cur().type == Tok::Name || cur().type == Tok::String || cur().type == Tok::Int ||
                cur().type == Tok::Float || is_op("(") || is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) fail(cur().line, "tests cannot be chained with 'is'");
      e->args.push_back(parse_postfix(parse_primary()));
    }
    if (!negated) return e;
    auto n = make(ExprType::Not, line);
    n->args.push_back(std::move(e));
    return n;
  }
};

}  // namespace

int filter_id(std::string_view name) { return find_builtin(kFilters, name); }
int test_id(std::string_view name) { return find_builtin(kTests, name); }
const char* filter_name(int id) { return kFilters[static_cast<size_t>(id)].name; }
const char* test_name(int id) { return kTests[static_cast<size_t>(id)].name; }

Body parse_template(std::string_view source, const std::string& name) {
  if (!valid_utf8(source)) throw Error(name + ": the template is not valid UTF-8");
  Lexer lexer(source, name);
  Parser parser(lexer.run(), name);
  return parser.parse();
}

}  // namespace mmgpt::jinja
