// Sampler and tokenizer tests.
#include <doctest/doctest.h>

#include <cmath>
#include <map>

#include "engine/sampler.hpp"
#include "text/text_stream.hpp"
#include "text/tokenizer.hpp"
#include "formats/error.hpp"

using namespace mmgpt;

TEST_CASE("greedy picks the largest logit, the lowest id on ties") {
  std::vector<float> l = {0.5f, 2.0f, -1.0f, 2.0f};
  SamplingOptions o;
  o.greedy = true;
  Sampler s(o);
  CHECK(s.next(l) == 1);
  CHECK(argmax(std::vector<float>{-3.0f}) == 0);
}

TEST_CASE("sampling is reproducible for a seed and follows the softmax") {
  std::vector<float> l = {1.0f, 2.0f, 0.0f, -1.0f, 1.5f};
  SamplingOptions o;
  o.temperature = 1.0f;
  o.top_k = 0;
  o.seed = 42;
  Sampler a(o), b(o);
  std::map<int32_t, int> counts;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    int32_t x = a.next(l);
    CHECK_MESSAGE(x == b.next(l), "same seed, same draws");
    counts[x]++;
  }
  double z = 0;
  for (float v : l) z += std::exp(v);
  for (int32_t i = 0; i < 5; ++i) {
    double p = std::exp(l[i]) / z;
    double f = static_cast<double>(counts[i]) / n;
    CHECK(std::fabs(f - p) < 5 * std::sqrt(p * (1 - p) / n));  // within 5 sigma
  }
  o.seed = 43;
  Sampler c(o);
  int differ = 0;
  SamplingOptions o42 = o;
  o42.seed = 42;
  Sampler a2(o42);
  for (int i = 0; i < 100; ++i) differ += a2.next(l) != c.next(l);
  CHECK(differ > 0);
}

TEST_CASE("top-k keeps only the k most likely tokens; low temperature approaches greedy") {
  std::vector<float> l = {0.1f, 3.0f, 2.9f, -5.0f, 2.95f};
  SamplingOptions o;
  o.top_k = 2;
  o.temperature = 1.0f;
  o.seed = 1;
  Sampler s(o);
  for (int i = 0; i < 2000; ++i) {
    int32_t x = s.next(l);
    CHECK((x == 1 || x == 4));
  }
  o.top_k = 1;
  Sampler one(o);
  CHECK(one.next(l) == 1);
  o.top_k = 0;
  o.temperature = 1e-4f;
  Sampler cold(o);
  for (int i = 0; i < 100; ++i) CHECK(cold.next(l) == 1);
  o.temperature = 0.0f;
  CHECK_THROWS_AS(Sampler{o}, Error);
}

TEST_CASE("character tokenizer round-trips and names unknown characters") {
  TokenizerData d;
  d.kind = TokenizerKind::Char;
  for (std::string s : {"\n", " ", "a", "b", "é", "€", "😀"}) d.tokens.push_back(s);
  Tokenizer t(d);
  auto ids = t.encode("ab é€\n😀a");
  CHECK(ids == std::vector<int32_t>{2, 3, 1, 4, 5, 0, 6, 2});
  CHECK(t.decode(ids) == "ab é€\n😀a");
  CHECK_THROWS_WITH_AS(t.encode("abc"), doctest::Contains("'c' (U+0063) at byte 2"), Error);
  CHECK_THROWS_WITH_AS(t.encode("a\xff"), doctest::Contains("not valid UTF-8 at byte 1"), Error);
  CHECK(t.token_bytes(99).empty());
}

TEST_CASE("GPT-2 byte-level tokens decode to their exact bytes") {
  TokenizerData d;
  d.kind = TokenizerKind::Gpt2Bpe;
  // "Ġ" is the space byte, "Ċ" newline, "Ã©" the two UTF-8 bytes of é, "<|endoftext|>" a special token.
  d.tokens = {"Hello", "\xC4\xA0world", "\xC4\x8A", "\xC3\x83\xC2\xA9", "<|endoftext|>", "\xC3\xA2\xC4\xA2"};
  d.eos_id = 4;
  Tokenizer t(d);
  CHECK(t.token_bytes(1) == " world");
  CHECK(t.token_bytes(2) == "\n");
  CHECK(t.token_bytes(3) == "\xC3\xA9");
  CHECK(t.token_bytes(4) == "<|endoftext|>");
  CHECK(t.token_bytes(5) == "\xE2\x80");  // first two bytes of a three-byte character
  CHECK(t.decode(std::vector<int32_t>{0, 1, 2}) == "Hello world\n");
  // BPE encodes text now (tests/test_text_bpe.cpp); this toy vocabulary has
  // no single-byte tokens, so encoding says which byte it cannot spell.
  CHECK(t.can_encode());
  CHECK_THROWS_WITH_AS(t.encode("Hello"), doctest::Contains("no token for the byte 0x48"), Error);
}

TEST_CASE("streamed UTF-8 is never cut inside a character") {
  TextStream s;
  std::string euro = "\xE2\x82\xAC";
  CHECK(s.push("a\xE2") == "a");
  CHECK(s.push("\x82") == "");
  CHECK(s.push("\xAC"
               "b") == euro + "b");
  CHECK(s.push("\xF0\x9F") == "");
  CHECK(s.push("\x98\x80") == "\xF0\x9F\x98\x80");
  CHECK(s.push("\xC3") == "");
  CHECK(s.flush() == "\xC3");
  CHECK(s.push("\x80") == "\x80");  // stray continuation byte passes through
}

TEST_CASE("stop strings are held back until they cannot match, and cut the text") {
  TextStream s({"END", "\n\n"});
  CHECK(s.push("Hello E") == "Hello ");
  CHECK(s.push("N") == "");
  CHECK(s.push("D? no: ENx") == "");  // "END" appears: stop
  CHECK(s.stopped());
  CHECK(s.text() == "Hello ");
  CHECK(s.push("more") == "");

  TextStream t({"END"});
  CHECK(t.push("EN") == "");
  CHECK(t.push("x") == "ENx");  // "ENx" can no longer become "END"
  CHECK(t.push("\n\nE") == "\n\n");
  CHECK(t.flush() == "E");
  CHECK_FALSE(t.stopped());

  TextStream u({"\xE2\x82\xAC!"});  // a stop string that starts with a multi-byte character
  CHECK(u.push("a\xE2\x82") == "a");
  CHECK(u.push("\xAC") == "");
  CHECK(u.push("!") == "");
  CHECK(u.stopped());
  CHECK(u.text() == "a");
}

TEST_CASE("top-p keeps the smallest set reaching p; min-p drops unlikely tokens; repetition penalty") {
  // probabilities ~ [0.6, 0.3, 0.1] at temperature 1
  std::vector<float> l = {std::log(0.6f), std::log(0.3f), std::log(0.1f)};
  SamplingOptions o;
  o.temperature = 1.0f;
  o.top_k = 0;
  o.seed = 5;
  o.top_p = 0.55f;
  Sampler only_first(o);
  for (int i = 0; i < 500; ++i) CHECK(only_first.next(l) == 0);
  o.top_p = 0.85f;
  Sampler two(o);
  std::map<int32_t, int> seen;
  for (int i = 0; i < 3000; ++i) seen[two.next(l)]++;
  CHECK(seen[2] == 0);
  CHECK(seen[1] > 700);  // 1/3 of 3000 expected
  o.top_p = 1.0f;
  o.min_p = 0.4f;  // keeps p >= 0.24: tokens 0 and 1
  Sampler minp(o);
  seen.clear();
  for (int i = 0; i < 3000; ++i) seen[minp.next(l)]++;
  CHECK(seen[2] == 0);
  CHECK(seen[1] > 700);

  SamplingOptions g;
  g.greedy = true;
  g.repetition_penalty = 3.0f;
  std::vector<float> r = {2.0f, 1.0f, -1.0f};
  Sampler rep(g);
  CHECK(rep.next(r) == 0);
  const std::vector<int32_t> seen_tokens = {0, 0};
  CHECK(rep.next(r, seen_tokens) == 1);  // 2/3 < 1
  for (float bad : {0.0f, 1.5f, -0.1f, NAN}) {
    SamplingOptions b;
    b.top_p = bad;
    CHECK_THROWS_AS(Sampler{b}, Error);
  }
  SamplingOptions m;
  m.min_p = 1.0f;
  CHECK_THROWS_AS(Sampler{m}, Error);
}
