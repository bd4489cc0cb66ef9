// GPT-2 byte-level BPE: hand-checked ids with the bundled OpenAI vocabulary,
// the pre-tokenizer's pieces, special tokens, bytes that are not UTF-8, and
// the two merge strategies agreeing. (Whole-corpus conformance with
// js-tiktoken is tests/tokenizer/test_bpe_conformance.py.)
#include <doctest/doctest.h>

#include <random>
#include <string>
#include <vector>

#include "text/bpe.hpp"
#include "text/pretokenize.hpp"
#include "text/tokenizer.hpp"
#include "formats/error.hpp"
#include "text/tokenizer_files.hpp"

using namespace mmgpt;

namespace {

const TokenizerData& gpt2_data() {
  static const TokenizerData data = [] {
    TokenizerData d =
        read_bpe_files(MMGPT_SOURCE_DIR "/data/gpt2/encoder.json", MMGPT_SOURCE_DIR "/data/gpt2/vocab.bpe");
    d.eos_id = 50256;
    return d;
  }();
  return data;
}

const Tokenizer& gpt2() {
  static const Tokenizer t(gpt2_data());
  return t;
}

std::vector<std::string> pieces(std::string_view text) {
  std::vector<std::string> out;
  Gpt2PreTokenizer pre(text);
  std::string_view p;
  while (pre.next(p)) out.emplace_back(p);
  return out;
}

using Ids = std::vector<int32_t>;

}  // namespace

TEST_CASE("hand-checked GPT-2 ids") {
  const Tokenizer& t = gpt2();
  CHECK(t.can_encode());
  CHECK(t.encode("Hello world") == Ids{15496, 995});
  CHECK(t.encode("Hello, world!") == Ids{15496, 11, 995, 0});
  CHECK(t.encode(" Hello world") == Ids{18435, 995});
  CHECK(t.encode("\n\n") == Ids{628});
  CHECK(t.encode("").empty());
}

TEST_CASE("the pre-tokenizer splits as GPT-2's regex does") {
  CHECK(pieces("Hello  world\n\n x's 'S") ==
        std::vector<std::string>{"Hello", " ", " world", "\n\n", " x", "'s", " '", "S"});
  CHECK(pieces("I'll they're WE'LL") == std::vector<std::string>{"I", "'ll", " they", "'re", " WE", "'", "LL"});
  CHECK(pieces("abc123 45!? ") == std::vector<std::string>{"abc", "123", " 45", "!?", " "});
  CHECK(pieces("a  \n") == std::vector<std::string>{"a", "  \n"});  // trailing whitespace run stays whole
  CHECK(pieces("\ty") == std::vector<std::string>{"\t", "y"});      // only U+0020 joins the next word
  // U+0085 is White_Space (as in Python's regex), U+FEFF is not (unlike JavaScript's \s).
  CHECK(pieces("x \xC2\x85y") == std::vector<std::string>{"x", " ", "\xC2\x85", "y"});
  CHECK(pieces("x \xEF\xBB\xBFy") == std::vector<std::string>{"x", " \xEF\xBB\xBF", "y"});
  // Non-ASCII letters, numbers and spaces: é is a letter, ½ a number, U+3000 a space.
  CHECK(pieces(" caf\xC3\xA9 \xC2\xBD\xE3\x80\x80z") ==
        std::vector<std::string>{" caf\xC3\xA9", " \xC2\xBD", "\xE3\x80\x80", "z"});
  CHECK(pieces("").empty());
}

TEST_CASE("<|endoftext|> is the end-of-text token unless special tokens are off") {
  const Tokenizer& t = gpt2();
  CHECK(t.encode("a<|endoftext|>b") == Ids{64, 50256, 65});
  CHECK(t.encode("<|endoftext|><|endoftext|>") == Ids{50256, 50256});
  const Ids plain = t.encode("a<|endoftext|>b", false);
  CHECK(plain.size() > 3);
  for (int32_t id : plain) CHECK(id != 50256);
  CHECK(t.decode(plain) == "a<|endoftext|>b");
  CHECK(t.decode(t.encode("a<|endoftext|>b")) == "a<|endoftext|>b");
}

TEST_CASE("bytes that are not UTF-8 still encode and decode exactly") {
  const Tokenizer& t = gpt2();
  const std::vector<std::string> texts = {"\xFF",
                                          "a\xFF"
                                          "b",
                                          "\xE2\x82",
                                          "caf\xC3",
                                          "\x80\x80 x",
                                          "\xED\xA0\x80",
                                          "\xC0\xAF",
                                          "\xF4\x90\x80\x80",
                                          " \xFE\xFF\xFE",
                                          std::string("nul\0byte", 8)};
  for (const std::string& s : texts) {
    CAPTURE(s);
    const Ids ids = t.encode(s);
    CHECK(!ids.empty());
    CHECK(t.decode(ids) == s);
  }
  CHECK(t.encode("\xFF").size() == 1);
  CHECK(t.token_bytes(t.encode("\xFF")[0]) == "\xFF");
  // An invalid byte is punctuation-like: glued to a preceding space, split from letters.
  CHECK(pieces("ab\xFF"
               "cd \xFE") == std::vector<std::string>{"ab", "\xFF", "cd", " \xFE"});

  std::mt19937 rng(42);
  std::string junk(100000, '\0');
  for (char& c : junk) c = static_cast<char>(rng() & 0xFF);
  CHECK(t.decode(t.encode(junk)) == junk);
}

TEST_CASE("scan and heap merging give the same ids, cached or not") {
  const TokenizerData& d = gpt2_data();
  BpeModel bpe(d.tokens, d.merges);
  std::mt19937 rng(7);
  const std::string alphabet = "aaabcdeeefghiilmnoorsttu ";
  for (int trial = 0; trial < 300; ++trial) {
    std::string word;
    const size_t n = 1 + rng() % 200;
    for (size_t i = 0; i < n; ++i) word.push_back(trial % 3 ? alphabet[rng() % alphabet.size()] : char(rng() & 0xFF));
    Ids scan, heap;
    bpe.encode_piece(word, scan, BpeModel::Strategy::Scan);
    bpe.encode_piece(word, heap, BpeModel::Strategy::Heap);
    CAPTURE(word);
    REQUIRE(scan == heap);
  }
  const std::string text = "the cat the cat sat on the mat, the cat! " + std::string(300, 'x') + " the cat";
  Ids cached, uncached;
  bpe.encode(text, cached, true);
  bpe.encode(text, uncached, false);
  CHECK(cached == uncached);
  CHECK(cached == gpt2().encode(text));
}

TEST_CASE("a merge rule naming an unknown token is a clear error") {
  TokenizerData d;
  d.kind = TokenizerKind::Gpt2Bpe;
  d.tokens = {"a", "b", "ab"};
  d.merges = {{"a", "b"}, {"a", "c"}};
  CHECK_THROWS_WITH_AS(Tokenizer{d}, doctest::Contains("merge rule 2 'a c': its right part is not in the vocabulary"),
                       Error);
}
