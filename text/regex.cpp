#include "text/regex.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "formats/error.hpp"

namespace mmgpt {

struct Regex::Impl {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Impl() { pcre2_code_free(code); }
};

namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  if (pcre2_get_error_message(code, buf, sizeof buf) < 0) return "error " + std::to_string(code);
  return reinterpret_cast<const char*>(buf);
}

// Match data sized for one capture group set, and a JIT stack (the default
// 32 KiB runs out on long runs of spaces under a lookahead), reused by a
// thread across calls.
struct MatchData {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(64 << 10, 16 << 20, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  MatchData() {
    if (context && stack) pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~MatchData() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
    pcre2_match_data_free(data);
  }
};

}  // namespace

namespace {

// The length of the escape starting at p[i] == '\\': \x{...}, \p{...}, \P{...} or one character.
size_t escape_length(const std::string& p, size_t i) {
  if (i + 1 >= p.size()) return 1;
  const char c = p[i + 1];
  if ((c == 'x' || c == 'p' || c == 'P' || c == 'o' || c == 'N') && i + 2 < p.size() && p[i + 2] == '{') {
    const size_t close = p.find('}', i + 3);
    return close == std::string::npos ? p.size() - i : close + 1 - i;
  }
  size_t n = 2;  // a UTF-8 character after the backslash
  while (i + n < p.size() && (static_cast<unsigned char>(p[i + n]) & 0xC0) == 0x80) ++n;
  return n;
}

// The pattern with every \s made to exclude U+180E (regex.hpp says why).
std::string without_u180e_space(const std::string& p, const std::string& where) {
  std::string out;
  for (size_t i = 0; i < p.size();) {
    if (p[i] == '\\') {
      const size_t n = escape_length(p, i);
      const std::string esc = p.substr(i, n);
      out += esc == "\\s" ? "(?:(?!\\x{180E})\\s)" : esc == "\\S" ? "(?:\\x{180E}|\\S)" : esc;
      i += n;
      continue;
    }
    if (p[i] != '[') {
      out += p[i++];
      continue;
    }
    // A character class: its items, \s among them or not.
    size_t j = i + 1;
    const bool negated = j < p.size() && p[j] == '^';
    if (negated) ++j;
    std::string items, items_without_s;
    bool has_s = false, first = true;
    while (j < p.size() && (p[j] != ']' || first)) {
      first = false;
      size_t n = 1;
      if (p[j] == '\\') {
        n = escape_length(p, j);
      } else if (p[j] == '[' && j + 1 < p.size() && p[j + 1] == ':') {
        const size_t close = p.find(":]", j + 2);
        n = close == std::string::npos ? p.size() - j : close + 2 - j;
      }
      const std::string item = p.substr(j, n);
      if (item == "\\S")
        throw Error(where + ": regular expression /" + p + "/: \\S inside a character class is not supported");
      items += item;
      if (item == "\\s")
        has_s = true;
      else
        items_without_s += item;
      j += n;
    }
    const size_t end = std::min(j + 1, p.size());
    if (!has_s) {
      out += p.substr(i, end - i);
    } else if (!negated) {  // [..\s..] less U+180E, unless another item holds it
      out += "(?:(?!\\x{180E})[" + items + "]";
      if (!items_without_s.empty()) out += "|[" + items_without_s + "]";
      out += ")";
    } else {  // [^..\s..] plus U+180E, unless another item holds it
      out += "(?:[^" + items + "]|";
      out += items_without_s.empty() ? "\\x{180E})" : "(?=[^" + items_without_s + "])\\x{180E})";
    }
    i = end;
  }
  return out;
}

}  // namespace

Regex::Regex(const std::string& pattern, const std::string& where) : pattern_(pattern), impl_(std::make_unique<Impl>()) {
  int err = 0;
  PCRE2_SIZE at = 0;
  const std::string rewritten = without_u180e_space(pattern, where);
  impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(rewritten.data()), rewritten.size(),
                              PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &err, &at, nullptr);
  if (!impl_->code)
    throw Error(where + ": regular expression /" + pattern + "/ does not compile at offset " + std::to_string(at) +
                ": " + pcre2_message(err));
  // The JIT is an accelerator only: where it is missing (or refused memory) the interpreter gives the same matches.
  impl_->jit = pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE) == 0;
}

Regex::~Regex() = default;

void Regex::find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const {
  thread_local MatchData md;
  if (!md.data || !md.stack || !md.context) throw std::bad_alloc();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  while (pos <= text.size()) {
    const int rc = impl_->jit ? pcre2_jit_match(impl_->code, subject, text.size(), pos, 0, md.data, md.context)
                              : pcre2_match(impl_->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md.data, md.context);
    if (rc == PCRE2_ERROR_NOMATCH) return;
    if (rc < 0) throw Error("regular expression /" + pattern_ + "/ failed to match: " + pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.data);
    const size_t b = ov[0], e = ov[1];
    if (e > b) {
      out.emplace_back(b, e);
      pos = e;
    } else {  // empty: step over one whole character
      if (b >= text.size()) return;
      pos = b + 1;
      while (pos < text.size() && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) ++pos;
    }
  }
}

}  // namespace mmgpt
