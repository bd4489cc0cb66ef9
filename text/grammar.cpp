#include "text/grammar.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <mutex>
#include <unordered_set>

#include "formats/error.hpp"
#include "text/tokenizer.hpp"

namespace mmgpt {

namespace {

// ---- GBNF parsing ----------------------------------------------------------

using Seq = std::vector<Grammar::Element>;

struct Builder {
  std::string where;
  std::vector<std::vector<Seq>> rules;  // rule id -> alternatives
  std::vector<std::string> names;
  std::map<std::string, uint32_t, std::less<>> ids;
  std::vector<bool> defined;
  std::vector<Grammar::ByteSet> sets;
  std::map<std::array<uint64_t, 4>, uint32_t> set_ids;
  size_t elements = 0;

  [[noreturn]] void fail(const std::string& what) const { throw Error(where + ": " + what); }

  void count(size_t n) {
    elements += n;
    if (elements > kMaxGrammarElements)
      fail("the grammar has more than " + std::to_string(kMaxGrammarElements) +
           " elements once its repetitions are expanded");
  }
  uint32_t rule_id(std::string_view name) {
    auto it = ids.find(name);
    if (it != ids.end()) return it->second;
    const uint32_t id = static_cast<uint32_t>(rules.size());
    rules.emplace_back();
    names.emplace_back(name);
    defined.push_back(false);
    ids.emplace(std::string(name), id);
    return id;
  }
  uint32_t anonymous(std::vector<Seq> alts, const std::string& base) {
    const uint32_t id = static_cast<uint32_t>(rules.size());
    for (const Seq& s : alts) count(s.size() + 1);
    rules.push_back(std::move(alts));
    names.push_back(base + "-" + std::to_string(id));
    defined.push_back(true);
    return id;
  }
  Grammar::Element set_element(const Grammar::ByteSet& s) {
    const std::array<uint64_t, 4> key = {s.bits[0], s.bits[1], s.bits[2], s.bits[3]};
    auto [it, added] = set_ids.emplace(key, static_cast<uint32_t>(sets.size()));
    if (added) sets.push_back(s);
    return {Grammar::Element::Bytes, it->second};
  }
  Grammar::Element byte_element(uint8_t b) {
    Grammar::ByteSet s;
    s.add(b);
    return set_element(s);
  }
};

void append_utf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// A code point range as byte-range sequences whose UTF-8 encodings are exactly
// the range's (the utf8-ranges construction): each sequence is a list of
// [lo, hi] byte ranges, one per byte.
using ByteRanges = std::vector<std::pair<uint8_t, uint8_t>>;
void utf8_sequences(uint32_t lo, uint32_t hi, std::vector<ByteRanges>& out) {
  if (lo > hi) return;
  if (lo <= 0xDFFF && hi >= 0xD800) {  // surrogates have no UTF-8 encoding
    if (lo < 0xD800) utf8_sequences(lo, 0xD7FF, out);
    if (hi > 0xDFFF) utf8_sequences(0xE000, hi, out);
    return;
  }
  for (uint32_t edge : {0x7Fu, 0x7FFu, 0xFFFFu})
    if (lo <= edge && hi > edge) {
      utf8_sequences(lo, edge, out);
      utf8_sequences(edge + 1, hi, out);
      return;
    }
  if (hi < 0x80) {
    out.push_back({{static_cast<uint8_t>(lo), static_cast<uint8_t>(hi)}});
    return;
  }
  for (int i = 1; i < 4; ++i) {
    const uint32_t m = (uint32_t{1} << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        utf8_sequences(lo, lo | m, out);
        utf8_sequences((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        utf8_sequences(lo, (hi & ~m) - 1, out);
        utf8_sequences(hi & ~m, hi, out);
        return;
      }
    }
  }
  std::string a, b;
  append_utf8(lo, a);
  append_utf8(hi, b);
  ByteRanges seq;
  for (size_t k = 0; k < a.size(); ++k) seq.push_back({static_cast<uint8_t>(a[k]), static_cast<uint8_t>(b[k])});
  out.push_back(std::move(seq));
}

class Parser {
 public:
  Parser(std::string_view text, Builder& b) : s_(text), b_(b) {}

  void parse() {
    skip_space(true);
    while (pos_ < s_.size()) {
      const std::string name = read_name();
      if (name.empty()) fail("expected a rule name");
      skip_space(false);
      if (s_.substr(pos_, 3) != "::=") fail("expected '::=' after the rule name '" + name + "'");
      pos_ += 3;
      skip_space(true);
      const uint32_t id = b_.rule_id(name);
      if (b_.defined[id]) fail("the rule '" + name + "' is defined twice");
      b_.defined[id] = true;
      std::vector<Seq> alts = alternatives(false);
      for (const Seq& s : alts) b_.count(s.size() + 1);
      b_.rules[id] = std::move(alts);
      if (pos_ < s_.size() && s_[pos_] != '\n') fail("expected the end of the rule");
      skip_space(true);
    }
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    const size_t line = static_cast<size_t>(std::count(s_.begin(), s_.begin() + static_cast<std::ptrdiff_t>(pos_), '\n')) + 1;
    b_.fail("line " + std::to_string(line) + ": " + what);
  }
  // Spaces and comments; newlines too when `newlines` (inside parentheses, or between rules).
  void skip_space(bool newlines) {
    while (pos_ < s_.size()) {
      const char c = s_[pos_];
      if (c == ' ' || c == '\t' || c == '\r' || (newlines && c == '\n')) {
        ++pos_;
      } else if (c == '#') {
        while (pos_ < s_.size() && s_[pos_] != '\n') ++pos_;
      } else if (!newlines && c == '\n' && continues()) {
        ++pos_;  // a rule goes on over lines that start with | or that do not start a new rule
      } else {
        break;
      }
    }
  }
  // After a newline: whether the next non-blank line continues the rule (it is not "name ::=").
  bool continues() const {
    size_t p = pos_ + 1;
    while (p < s_.size() && (s_[p] == ' ' || s_[p] == '\t' || s_[p] == '\r' || s_[p] == '\n')) ++p;
    if (p >= s_.size() || s_[p] == '#') return false;
    size_t q = p;
    while (q < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[q])) || s_[q] == '-' || s_[q] == '_')) ++q;
    if (q == p) return true;
    while (q < s_.size() && (s_[q] == ' ' || s_[q] == '\t')) ++q;
    return s_.substr(q, 3) != "::=";
  }
  std::string read_name() {
    const size_t start = pos_;
    while (pos_ < s_.size() &&
           (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '-' || s_[pos_] == '_'))
      ++pos_;
    return std::string(s_.substr(start, pos_ - start));
  }
  uint32_t hex(size_t digits) {
    uint32_t v = 0;
    for (size_t i = 0; i < digits; ++i) {
      if (pos_ >= s_.size() || !std::isxdigit(static_cast<unsigned char>(s_[pos_]))) fail("a bad \\x, \\u or \\U escape");
      const char c = s_[pos_++];
      v = v * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(c)) ? c - '0' : (c | 0x20) - 'a' + 10);
    }
    return v;
  }
  // One character of a literal or class, as a code point (\xHH is U+00HH).
  uint32_t character() {
    if (pos_ >= s_.size()) fail("unterminated literal or class");
    const unsigned char c = static_cast<unsigned char>(s_[pos_]);
    if (c == '\\') {
      ++pos_;
      if (pos_ >= s_.size()) fail("unterminated escape");
      const char e = s_[pos_++];
      switch (e) {
        case 'n': return '\n';
        case 't': return '\t';
        case 'r': return '\r';
        case '\\': case '"': case '[': case ']': case '-': case '^': case '/': case '\'': return static_cast<uint8_t>(e);
        case 'x': return hex(2);
        case 'u': return hex(4);
        case 'U': return hex(8);
        default: fail(std::string("unknown escape \\") + e);
      }
    }
    // A UTF-8 sequence as its code point.
    const size_t n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (n == 0 || pos_ + n > s_.size()) fail("the grammar is not valid UTF-8");
    uint32_t cp = n == 1 ? c : c & (0x7F >> n);
    for (size_t i = 1; i < n; ++i) {
      const unsigned char k = static_cast<unsigned char>(s_[pos_ + i]);
      if ((k & 0xC0) != 0x80) fail("the grammar is not valid UTF-8");
      cp = (cp << 6) | (k & 0x3F);
    }
    pos_ += n;
    return cp;
  }
  void check_code_point(uint32_t cp) const {
    if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) fail("a literal or class holds an invalid code point");
  }

  std::vector<Seq> alternatives(bool nested) {
    std::vector<Seq> alts;
    alts.push_back(sequence(nested));
    while (pos_ < s_.size() && s_[pos_] == '|') {
      ++pos_;
      skip_space(nested);
      alts.push_back(sequence(nested));
    }
    return alts;
  }

  Seq sequence(bool nested) {
    Seq seq;
    for (;;) {
      skip_space(nested);
      if (pos_ >= s_.size()) break;
      const char c = s_[pos_];
      if (c == '|' || c == ')' || c == '\n') break;
      Seq item = primary();
      skip_space(nested);
      if (pos_ < s_.size() && (s_[pos_] == '*' || s_[pos_] == '+' || s_[pos_] == '?' || s_[pos_] == '{'))
        item = repeat(std::move(item));
      seq.insert(seq.end(), item.begin(), item.end());
      b_.count(item.size());
    }
    return seq;
  }

  Seq primary() {
    const char c = s_[pos_];
    if (c == '"') {
      ++pos_;
      Seq seq;
      while (pos_ < s_.size() && s_[pos_] != '"') {
        const uint32_t cp = character();
        check_code_point(cp);
        std::string bytes;
        append_utf8(cp, bytes);
        for (char ch : bytes) seq.push_back(b_.byte_element(static_cast<uint8_t>(ch)));
      }
      if (pos_ >= s_.size()) fail("unterminated literal");
      ++pos_;
      return seq;
    }
    if (c == '[' || c == '.') return char_class();
    if (c == '(') {
      if (++groups_ > kMaxGroupDepth) fail("groups nest more than " + std::to_string(kMaxGroupDepth) + " deep");
      ++pos_;
      skip_space(true);
      std::vector<Seq> alts = alternatives(true);
      skip_space(true);
      if (pos_ >= s_.size() || s_[pos_] != ')') fail("expected ')'");
      ++pos_;
      --groups_;
      if (alts.size() == 1) return alts[0];
      return {{Grammar::Element::Ref, b_.anonymous(std::move(alts), "group")}};
    }
    const std::string name = read_name();
    if (name.empty()) fail(std::string("unexpected '") + c + "'");
    return {{Grammar::Element::Ref, b_.rule_id(name)}};
  }

  Seq char_class() {
    std::vector<std::pair<uint32_t, uint32_t>> ranges;  // code points
    bool negated = false;
    if (s_[pos_] == '.') {
      ++pos_;
      negated = true;  // [^] : every code point
    } else {
      ++pos_;
      if (pos_ < s_.size() && s_[pos_] == '^') negated = true, ++pos_;
      while (pos_ < s_.size() && s_[pos_] != ']') {
        const uint32_t lo = character();
        uint32_t hi = lo;
        if (pos_ + 1 < s_.size() && s_[pos_] == '-' && s_[pos_ + 1] != ']') {
          ++pos_;
          hi = character();
        }
        if (hi < lo) fail("a class range runs backwards");
        if (hi > 0x10FFFF) fail("a class holds an invalid code point");
        ranges.push_back({lo, hi});
      }
      if (pos_ >= s_.size()) fail("unterminated class");
      ++pos_;
    }
    std::sort(ranges.begin(), ranges.end());
    if (negated) {
      std::vector<std::pair<uint32_t, uint32_t>> inverse;
      uint32_t next = 0;
      for (auto [lo, hi] : ranges) {
        if (lo > next) inverse.push_back({next, lo - 1});
        next = std::max(next, hi + 1);
      }
      if (next <= 0x10FFFF) inverse.push_back({next, 0x10FFFF});
      ranges = std::move(inverse);
    }
    std::vector<ByteRanges> seqs;
    for (auto [lo, hi] : ranges) utf8_sequences(lo, hi, seqs);
    // One-byte sequences share one byte set; longer ones are alternatives of their own.
    Grammar::ByteSet single;
    bool has_single = false;
    std::vector<Seq> alts;
    for (const ByteRanges& r : seqs) {
      if (r.size() == 1) {
        for (uint32_t v = r[0].first; v <= r[0].second; ++v) single.add(static_cast<uint8_t>(v));
        has_single = true;
        continue;
      }
      Seq s;
      for (auto [lo, hi] : r) {
        Grammar::ByteSet set;
        for (uint32_t v = lo; v <= hi; ++v) set.add(static_cast<uint8_t>(v));
        s.push_back(b_.set_element(set));
      }
      alts.push_back(std::move(s));
    }
    if (has_single) alts.insert(alts.begin(), Seq{b_.set_element(single)});
    if (alts.empty()) fail("a class matches nothing");
    if (alts.size() == 1) return alts[0];
    return {{Grammar::Element::Ref, b_.anonymous(std::move(alts), "class")}};
  }

  size_t number() {
    const size_t start = pos_;
    size_t v = 0;
    while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) {
      v = v * 10 + static_cast<size_t>(s_[pos_++] - '0');
      if (v > kMaxGrammarElements) fail("a repetition count is too large");
    }
    if (pos_ == start) fail("expected a number in {m,n}");
    return v;
  }

  Seq repeat(Seq item) {
    // The item as one element: itself when it is one, else a rule of its own.
    auto single = [&](const Seq& s) -> Grammar::Element {
      if (s.size() == 1) return s[0];
      return {Grammar::Element::Ref, b_.anonymous({s}, "item")};
    };
    const char op = s_[pos_++];
    size_t min = 0, max = SIZE_MAX;
    if (op == '*') min = 0;
    else if (op == '+') min = 1;
    else if (op == '?') min = 0, max = 1;
    else {
      skip_space(true);
      min = number();
      skip_space(true);
      max = min;
      if (pos_ < s_.size() && s_[pos_] == ',') {
        ++pos_;
        skip_space(true);
        max = pos_ < s_.size() && s_[pos_] == '}' ? SIZE_MAX : number();
        skip_space(true);
      }
      if (pos_ >= s_.size() || s_[pos_] != '}') fail("expected '}'");
      ++pos_;
      if (max < min) fail("a repetition {m,n} with n < m");
    }
    const Grammar::Element x = single(item);
    Seq out;
    for (size_t i = 0; i < min; ++i) out.push_back(x);
    b_.count(min);
    if (max == SIZE_MAX) {  // star ::= x star | (empty): right recursion, which the matcher runs in constant depth
      const uint32_t star = b_.anonymous({}, "star");
      b_.rules[star] = {Seq{x, {Grammar::Element::Ref, star}}, Seq{}};
      b_.count(3);
      out.push_back({Grammar::Element::Ref, star});
    } else if (max > min) {  // opt_k ::= x opt_{k-1} | (empty)
      uint32_t prev = b_.anonymous({Seq{x}, Seq{}}, "opt");
      for (size_t k = 1; k < max - min; ++k) prev = b_.anonymous({Seq{x, {Grammar::Element::Ref, prev}}, Seq{}}, "opt");
      out.push_back({Grammar::Element::Ref, prev});
    }
    return out;
  }

  static constexpr size_t kMaxGroupDepth = 64;  // the parser recurses per group: bounded
  std::string_view s_;
  Builder& b_;
  size_t pos_ = 0;
  size_t groups_ = 0;
};

// Refuses a rule that can reach itself before consuming a byte: the matcher's
// expansion of it would not end.
void check_left_recursion(const Builder& b) {
  const size_t n = b.rules.size();
  std::vector<bool> nullable(n, false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n; ++r) {
      if (nullable[r]) continue;
      for (const Seq& alt : b.rules[r]) {
        bool all = true;
        for (const Grammar::Element& e : alt)
          if (e.kind == Grammar::Element::Bytes || !nullable[e.arg]) {
            all = false;
            break;
          }
        if (all) {
          nullable[r] = changed = true;
          break;
        }
      }
    }
  }
  // left[r]: rules r may call before consuming a byte.
  std::vector<std::vector<uint32_t>> left(n);
  for (size_t r = 0; r < n; ++r)
    for (const Seq& alt : b.rules[r])
      for (const Grammar::Element& e : alt) {
        if (e.kind == Grammar::Element::Bytes) break;
        left[r].push_back(e.arg);
        if (!nullable[e.arg]) break;
      }
  // A cycle in `left` is left recursion: iterative DFS with colours.
  std::vector<uint8_t> colour(n, 0);
  for (size_t start = 0; start < n; ++start) {
    if (colour[start]) continue;
    std::vector<std::pair<uint32_t, size_t>> stack = {{static_cast<uint32_t>(start), 0}};
    colour[start] = 1;
    while (!stack.empty()) {
      auto& [r, i] = stack.back();
      if (i < left[r].size()) {
        const uint32_t next = left[r][i++];
        if (colour[next] == 1)
          b.fail("the rule '" + b.names[next] +
                 "' can reach itself without consuming anything (left recursion, or a $ref loop that produces "
                 "nothing)");
        if (colour[next] == 0) {
          colour[next] = 1;
          stack.push_back({next, 0});
        }
      } else {
        colour[r] = 2;
        stack.pop_back();
      }
    }
  }
}

}  // namespace

std::shared_ptr<const Grammar> Grammar::parse(std::string_view gbnf, const std::string& where) {
  Builder b;
  b.where = where;
  Parser(gbnf, b).parse();
  for (size_t r = 0; r < b.rules.size(); ++r)
    if (!b.defined[r]) b.fail("the rule '" + b.names[r] + "' is used but not defined");
  const auto root = b.ids.find("root");
  if (root == b.ids.end()) b.fail("the grammar has no 'root' rule");
  check_left_recursion(b);
  auto g = std::make_shared<Grammar>();
  g->root = root->second;
  g->rule_names = b.names;
  g->byte_sets = std::move(b.sets);
  g->rule_starts.resize(b.rules.size());
  for (size_t r = 0; r < b.rules.size(); ++r)
    for (const Seq& alt : b.rules[r]) {
      g->rule_starts[r].push_back(static_cast<uint32_t>(g->elements.size()));
      g->elements.insert(g->elements.end(), alt.begin(), alt.end());
      g->elements.push_back({Element::End, 0});
    }
  return g;
}

// ---- The vocabulary trie ---------------------------------------------------

std::shared_ptr<const TokenTrie> TokenTrie::build(const Tokenizer& tokenizer, size_t vocab_size) {
  auto t = std::make_shared<TokenTrie>();
  t->vocab = vocab_size;
  const std::vector<int32_t> special = tokenizer.special_ids();
  std::vector<std::pair<std::string_view, int32_t>> spelled;
  for (size_t id = 0; id < vocab_size; ++id) {
    const int32_t i = static_cast<int32_t>(id);
    if (tokenizer.is_end(i)) {
      t->end_tokens.push_back(i);
      continue;
    }
    if (std::binary_search(special.begin(), special.end(), i)) continue;
    const std::string& b = tokenizer.token_bytes(i);
    if (!b.empty()) spelled.push_back({b, i});
    t->max_length = std::max(t->max_length, b.size());
  }
  std::sort(spelled.begin(), spelled.end());
  // Nodes level by level: a node's children are contiguous, in byte order.
  struct Range {
    size_t node, begin, end, depth;
  };
  t->nodes.push_back({});
  std::vector<Range> level = {{0, 0, spelled.size(), 0}};
  while (!level.empty()) {
    std::vector<Range> next;
    for (const Range& r : level) {
      size_t i = r.begin;
      // Tokens that end at this node (their spelling is exactly `depth` bytes).
      const size_t tokens_begin = t->tokens.size();
      while (i < r.end && spelled[i].first.size() == r.depth) t->tokens.push_back(spelled[i++].second);
      t->nodes[r.node].first_token = static_cast<uint32_t>(tokens_begin);
      t->nodes[r.node].token_count = static_cast<uint32_t>(t->tokens.size() - tokens_begin);
      t->nodes[r.node].first_child = static_cast<uint32_t>(t->nodes.size());
      while (i < r.end) {
        const char byte = spelled[i].first[r.depth];
        size_t j = i;
        while (j < r.end && spelled[j].first[r.depth] == byte) ++j;
        TokenTrie::Node child;
        child.byte = static_cast<uint8_t>(byte);
        next.push_back({t->nodes.size(), i, j, r.depth + 1});
        t->nodes.push_back(child);
        i = j;
      }
      t->nodes[r.node].child_count = static_cast<uint32_t>(t->nodes.size() - t->nodes[r.node].first_child);
    }
    level = std::move(next);
  }
  return t;
}

// ---- The matcher -----------------------------------------------------------
//
// A parse state is a set of stacks. A stack is a node (pos, parent): pos is
// the element to match next (always a Bytes element at the top), parent the
// node to continue at when the rule holding pos ends. Nodes are interned, so
// a stack is an id; node 0 is "the root rule ended" (the output is complete).
// A rule call whose next element ends its caller's alternative continues
// straight at the caller's parent (a tail call), so repetitions run in
// constant depth. States are interned too (state 0 is the dead, empty set),
// with their transitions on each byte kept once computed: walking the
// vocabulary's trie from a state mostly follows known transitions.

struct Grammar::Context {
  const Grammar* g = nullptr;
  std::shared_ptr<const TokenTrie> trie;
  std::mutex mutex;

  struct Node {
    uint32_t pos, parent, depth;
  };
  std::vector<Node> nodes = {{0, 0, 0}};
  std::unordered_map<uint64_t, uint32_t> interned;

  struct VecHash {
    size_t operator()(const std::vector<uint32_t>& v) const {
      uint64_t h = 1469598103934665603ull;
      for (uint32_t x : v) h = (h ^ x) * 1099511628211ull;
      return static_cast<size_t>(h);
    }
  };
  struct State {
    std::vector<uint32_t> stacks;  // sorted node ids
    ByteSet first;                 // the bytes some stack takes next
    bool complete = false, finished = false;
    std::unique_ptr<std::array<uint32_t, 256>> next;  // transitions (kUnknown until computed)
  };
  static constexpr uint32_t kUnknown = UINT32_MAX;
  std::vector<State> states;
  std::unordered_map<std::vector<uint32_t>, uint32_t, VecHash> state_ids;
  std::unordered_map<uint32_t, std::vector<uint64_t>> masks;  // by state
  std::vector<uint32_t> scratch;

  static constexpr size_t kMaxMasks = 512;
  static constexpr size_t kMaxStacks = 4096;
  static constexpr size_t kMaxNodes = size_t{1} << 22;
  static constexpr size_t kMaxStates = size_t{1} << 18;

  uint32_t intern(uint32_t pos, uint32_t parent) {
    const uint64_t key = (uint64_t{pos} << 32) | parent;
    auto [it, added] = interned.emplace(key, static_cast<uint32_t>(nodes.size()));
    if (added) {
      if (nodes.size() >= kMaxNodes) throw Error("the grammar's parse grew past its bound");
      nodes.push_back({pos, parent, parent == 0 ? 1 : nodes[parent].depth + 1});
    }
    return it->second;
  }

  // The stacks that continue at element `pos` with `parent` after it, each
  // with a Bytes element on top (or 0: complete).
  void expand(uint32_t pos, uint32_t parent, std::vector<uint32_t>& out, size_t guard = 0) {
    if (guard > 4 * kMaxGrammarDepth) return;
    const Element& e = g->elements[pos];
    switch (e.kind) {
      case Element::Bytes:
        if (parent != 0 && nodes[parent].depth >= kMaxGrammarDepth) return;  // too deep: not taken
        out.push_back(intern(pos, parent));
        return;
      case Element::End:
        if (parent == 0) {
          out.push_back(0);
        } else {
          const Node n = nodes[parent];
          expand(n.pos, n.parent, out, guard + 1);
        }
        return;
      case Element::Ref: {
        const uint32_t cont = g->elements[pos + 1].kind == Element::End ? parent : intern(pos + 1, parent);
        if (cont != 0 && nodes[cont].depth > kMaxGrammarDepth) return;
        for (uint32_t start : g->rule_starts[e.arg]) expand(start, cont, out, guard + 1);
        return;
      }
    }
  }

  uint32_t state_of(std::vector<uint32_t>& stacks) {
    std::sort(stacks.begin(), stacks.end());
    stacks.erase(std::unique(stacks.begin(), stacks.end()), stacks.end());
    if (stacks.empty()) return 0;
    if (stacks.size() > kMaxStacks) throw Error("the grammar is too ambiguous: more than 4096 parses at once");
    auto it = state_ids.find(stacks);
    if (it != state_ids.end()) return it->second;
    if (states.size() >= kMaxStates) throw Error("the grammar's parse grew past its bound");
    State s;
    s.stacks = stacks;
    for (uint32_t id : stacks) {
      if (id == 0) {
        s.complete = true;
        continue;
      }
      const ByteSet& b = g->byte_sets[g->elements[nodes[id].pos].arg];
      for (int k = 0; k < 4; ++k) s.first.bits[k] |= b.bits[k];
    }
    s.finished = s.complete && stacks.size() == 1;
    const uint32_t id = static_cast<uint32_t>(states.size());
    states.push_back(std::move(s));
    state_ids.emplace(stacks, id);
    return id;
  }

  uint32_t start() {
    scratch.clear();
    for (uint32_t pos : g->rule_starts[g->root]) expand(pos, 0, scratch);
    return state_of(scratch);
  }

  uint32_t advance(uint32_t from, uint8_t byte) {
    if (from == 0 || !states[from].first.has(byte)) return 0;
    if (!states[from].next) {
      states[from].next = std::make_unique<std::array<uint32_t, 256>>();
      states[from].next->fill(kUnknown);
    }
    uint32_t& known = (*states[from].next)[byte];
    if (known != kUnknown) return known;
    std::vector<uint32_t> to;
    for (uint32_t id : states[from].stacks) {
      if (id == 0) continue;
      const Node n = nodes[id];
      if (g->byte_sets[g->elements[n.pos].arg].has(byte)) expand(n.pos + 1, n.parent, to);
    }
    const uint32_t s = state_of(to);
    (*states[from].next)[byte] = s;  // `known` may dangle: states grew
    return s;
  }

  // Sets the bit of every token whose bytes the grammar allows from `state`:
  // a walk of the vocabulary trie that leaves a subtree once the parse dies.
  void walk(uint32_t trie_node, uint32_t state, std::vector<uint64_t>& bits) {
    const TokenTrie::Node& tn = trie->nodes[trie_node];
    for (uint32_t c = tn.first_child; c < tn.first_child + tn.child_count; ++c) {
      const TokenTrie::Node& child = trie->nodes[c];
      if (!states[state].first.has(child.byte)) continue;
      const uint32_t next = advance(state, child.byte);
      if (next == 0) continue;
      for (uint32_t k = 0; k < child.token_count; ++k) {
        const int32_t t = trie->tokens[child.first_token + k];
        bits[static_cast<size_t>(t) >> 6] |= uint64_t{1} << (t & 63);
      }
      if (child.child_count > 0) walk(c, next, bits);
    }
  }

  const std::vector<uint64_t>& mask(uint32_t state) {
    auto it = masks.find(state);
    if (it != masks.end()) return it->second;
    if (masks.size() >= kMaxMasks) masks.clear();
    std::vector<uint64_t> bits((trie->vocab + 63) / 64, 0);
    walk(0, state, bits);
    if (states[state].complete)
      for (int32_t t : trie->end_tokens) bits[static_cast<size_t>(t) >> 6] |= uint64_t{1} << (t & 63);
    return masks.emplace(state, std::move(bits)).first->second;
  }
};

std::shared_ptr<Grammar::Context> Grammar::context(const std::shared_ptr<const TokenTrie>& trie) const {
  std::lock_guard lock(contexts_mutex_);
  for (const auto& c : contexts_)
    if (c->trie == trie) return c;
  auto c = std::make_shared<Context>();
  c->g = this;
  c->trie = trie;
  c->states.emplace_back();  // state 0: dead
  if (trie) contexts_.push_back(c);
  return c;
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenTrie> trie)
    : grammar_(std::move(grammar)), ctx_(grammar_->context(trie)) {
  std::lock_guard lock(ctx_->mutex);
  state_ = ctx_->start();
}

bool GrammarMatcher::complete() const {
  std::lock_guard lock(ctx_->mutex);
  return ctx_->states[state_].complete;
}
bool GrammarMatcher::finished() const {
  std::lock_guard lock(ctx_->mutex);
  return ctx_->states[state_].finished;
}
size_t GrammarMatcher::states_seen() const {
  std::lock_guard lock(ctx_->mutex);
  return ctx_->states.size() - 1;
}

bool GrammarMatcher::accept(std::span<const char> bytes) {
  std::lock_guard lock(ctx_->mutex);
  uint32_t s = state_;
  for (char c : bytes) {
    s = ctx_->advance(s, static_cast<uint8_t>(c));
    if (s == 0) return false;
  }
  state_ = s;
  return true;
}

void GrammarMatcher::mask(std::span<float> logits) {
  std::lock_guard lock(ctx_->mutex);
  const std::vector<uint64_t>& bits = ctx_->mask(state_);
  constexpr float kOff = -std::numeric_limits<float>::infinity();
  bool any = false;
  const size_t n = std::min(logits.size(), ctx_->trie->vocab);
  // A word of 64 tokens at a time: most words are all allowed or all not.
  for (size_t w = 0; w * 64 < n; ++w) {
    const uint64_t word = bits[w];
    const size_t begin = w * 64, end = std::min(n, begin + 64);
    any = any || word != 0;
    if (word == ~uint64_t{0} && end - begin == 64) continue;
    if (word == 0) {
      std::fill(logits.begin() + static_cast<std::ptrdiff_t>(begin), logits.begin() + static_cast<std::ptrdiff_t>(end),
                kOff);
      continue;
    }
    for (size_t t = begin; t < end; ++t)
      if (!((word >> (t - begin)) & 1)) logits[t] = kOff;
  }
  std::fill(logits.begin() + static_cast<std::ptrdiff_t>(n), logits.end(), kOff);
  if (!any)
    throw Error("the output's grammar allows no token of this vocabulary here (it needs bytes no token spells)");
}

bool GrammarMatcher::matches(const Grammar& g, std::string_view bytes, bool whole) {
  const std::shared_ptr<Grammar::Context> ctx = g.context(nullptr);  // a context of its own, dropped after
  uint32_t s = ctx->start();
  for (char c : bytes) {
    s = ctx->advance(s, static_cast<uint8_t>(c));
    if (s == 0) return false;
  }
  return !whole || ctx->states[s].complete;
}

}  // namespace mmgpt
