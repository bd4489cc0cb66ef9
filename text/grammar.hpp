#pragma once
// Constrained decoding: a context-free grammar over the bytes of the output,
// and the per-sequence state that says which tokens may come next.
//
// A grammar is written in GBNF, llama.cpp's form of BNF:
//
//   root   ::= "{" ws "\"name\"" ws ":" ws string ws "}"
//   string ::= "\"" ( [^"\\\x00-\x1f] | "\\" ["\\/bfnrt] )* "\""
//   ws     ::= [ \t\n]{0,8}
//
// Rules are alternatives (|) of sequences of literals ("..."), character
// classes ([a-z], [^...], over Unicode code points), rule names, groups
// ((...)), any character (.), each maybe repeated (*, +, ?, {m}, {m,}, {m,n});
// escapes \n \t \r \\ \" \[ \] \- \^ \/ and \xHH, \uHHHH, \UHHHHHHHH (code points);
// # comments to the end of the line. A rule ends at the end of its line,
// unless the next line does not begin a new rule or the line ends inside ().
// `root` is the whole output. Classes and literals are compiled to the UTF-8
// bytes they stand for, so the matcher walks bytes and accepts only valid
// UTF-8 where a class is used; a literal's bytes are matched as written.
// json_schema_grammar() writes the grammar of a JSON schema
// (text/json_schema.hpp).
//
// Bounds: a grammar of at most kMaxGrammarElements elements after repetitions
// are expanded, groups nested at most 64 deep; a rule that can reach itself without consuming a byte (left
// recursion) is refused when the grammar is built; at run time nesting deeper
// than kMaxGrammarDepth rule calls is cut (a deeper path is not taken).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace mmgpt {

class Tokenizer;
struct TokenTrie;

inline constexpr size_t kMaxGrammarElements = size_t{1} << 18;
inline constexpr size_t kMaxGrammarDepth = 256;

class Grammar {
 public:
  // Parses GBNF text; throws mmgpt::Error naming `where`, the line and what is wrong.
  static std::shared_ptr<const Grammar> parse(std::string_view gbnf, const std::string& where = "the grammar");

  // What the compiled grammar is made of (see grammar.cpp).
  struct Element {
    enum Kind : uint8_t { Bytes, Ref, End } kind;
    uint32_t arg = 0;  // Bytes: index into byte_sets; Ref: rule id
  };
  struct ByteSet {
    uint64_t bits[4] = {0, 0, 0, 0};
    bool has(uint8_t b) const { return (bits[b >> 6] >> (b & 63)) & 1; }
    void add(uint8_t b) { bits[b >> 6] |= uint64_t{1} << (b & 63); }
  };
  std::vector<Element> elements;                  // every alternative, each ending with End
  std::vector<std::vector<uint32_t>> rule_starts; // rule id -> its alternatives' first elements
  std::vector<std::string> rule_names;
  std::vector<ByteSet> byte_sets;
  uint32_t root = 0;

  // What matchers of this grammar over one vocabulary share: the parse
  // states met so far, their transitions and their token masks (grammar.cpp).
  struct Context;
  std::shared_ptr<Context> context(const std::shared_ptr<const TokenTrie>& trie) const;

 private:
  mutable std::mutex contexts_mutex_;
  mutable std::vector<std::shared_ptr<Context>> contexts_;
};

// The bytes the vocabulary's tokens spell, as a trie, for computing which
// tokens a grammar state allows: built once per tokenizer and shared.
// Special tokens and tokens with no bytes are left out; the end tokens are
// handled apart (allowed where the grammar is complete).
struct TokenTrie {
  struct Node {
    uint32_t first_child = 0, child_count = 0;  // children: nodes [first_child, first_child + child_count)
    uint32_t first_token = 0, token_count = 0;  // tokens ending here: tokens[first_token, ...)
    uint8_t byte = 0;
  };
  std::vector<Node> nodes;  // nodes[0] is the root; children sorted by byte
  std::vector<int32_t> tokens;
  std::vector<int32_t> end_tokens;  // the tokens that end generation
  size_t vocab = 0;
  size_t max_length = 0;  // the longest token's bytes
  static std::shared_ptr<const TokenTrie> build(const Tokenizer& tokenizer, size_t vocab_size);
};

// One sequence's place in a grammar: which tokens may come next, and the
// state after each token generated. Matchers of one grammar and vocabulary
// share what they learn of it (thread-safe); one matcher is one sequence's.
class GrammarMatcher {
 public:
  GrammarMatcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenTrie> trie);
  // A copy is the same place in the same grammar, going on on its own.

  // Sets logits[t] to -infinity for every token t the grammar does not allow
  // next (an end token is allowed once the grammar is complete). Throws
  // mmgpt::Error when no token of the vocabulary can continue the output.
  void mask(std::span<float> logits);
  // Advances over a token's bytes; false when the grammar does not allow them.
  bool accept(std::span<const char> bytes);
  // The output so far is a whole sentence of the grammar ...
  bool complete() const;
  // ... and nothing may follow it.
  bool finished() const;
  // Whether `bytes`, from the start, can begin (prefix) or are (whole) a sentence.
  static bool matches(const Grammar& g, std::string_view bytes, bool whole);

  // The number of parse states the shared context holds (for tests and stats).
  size_t states_seen() const;

 private:
  std::shared_ptr<const Grammar> grammar_;
  std::shared_ptr<Grammar::Context> ctx_;
  uint32_t state_ = 0;
};

}  // namespace mmgpt
