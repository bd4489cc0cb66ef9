// Constrained decoding (text/grammar.hpp, text/json_schema.hpp): GBNF parsing
// and its refusals, the byte-level matcher against texts a grammar does and
// does not accept, JSON schemas' grammars against instances, integer ranges
// exhaustively, and the token masks against a brute force over the real
// GPT-2 vocabulary.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "formats/error.hpp"
#include "text/grammar.hpp"
#include "text/json_schema.hpp"
#include "text/tokenizer.hpp"
#include "text/tokenizer_files.hpp"

using namespace mmgpt;

namespace {

bool whole(const Grammar& g, std::string_view s) { return GrammarMatcher::matches(g, s, true); }
bool prefix(const Grammar& g, std::string_view s) { return GrammarMatcher::matches(g, s, false); }

std::shared_ptr<const Grammar> schema(const std::string& json) { return Grammar::parse(json_schema_grammar(json)); }

const Tokenizer& gpt2() {
  static const Tokenizer t(
      read_bpe_files(MMGPT_SOURCE_DIR "/data/gpt2/encoder.json", MMGPT_SOURCE_DIR "/data/gpt2/vocab.bpe"));
  return t;
}

}  // namespace

TEST_CASE("GBNF: literals, classes, groups and repetitions, matched as UTF-8 bytes") {
  const auto g = Grammar::parse(R"(
# a comment
root ::= greeting " " name ("!" | "?"){0,2}
greeting ::= "hi" | "hello" | "h\u00e9"
name ::= [A-Z] [a-z]* | "\"" [^"\\]+ "\""
)");
  CHECK(whole(*g, "hi Bob"));
  CHECK(whole(*g, "hello Al!?"));
  CHECK(whole(*g, "h\xc3\xa9 Z"));
  CHECK(whole(*g, "hi \"\xe6\x9d\xb1\xe4\xba\xac \xf0\x9f\x99\x82\""));  // any character but " and \ between quotes
  CHECK_FALSE(whole(*g, "hi bob"));
  CHECK_FALSE(whole(*g, "hi Bob!!!"));
  CHECK_FALSE(whole(*g, "hi \"\xff\""));      // not UTF-8
  CHECK_FALSE(whole(*g, "hi \"\xed\xa0\x80\""));  // a surrogate's encoding
  CHECK_FALSE(whole(*g, "hi \"\xc0\xaf\""));  // an overlong encoding
  CHECK(prefix(*g, "hel"));
  CHECK_FALSE(whole(*g, "hel"));
  CHECK_FALSE(prefix(*g, "hex"));

  const auto counts = Grammar::parse("root ::= \"a\"{2,3} \"b\"{2} \"c\"{1,} \"d\"?");
  for (const char* ok : {"aabbc", "aaabbccc", "aabbcd"}) CHECK(whole(*counts, ok));
  for (const char* bad : {"abbc", "aaaabbc", "aabc", "aabb", "aabbcdd"}) CHECK_FALSE(whole(*counts, bad));

  // A rule over several lines; a dot is any character.
  const auto multi = Grammar::parse("root ::= \"x\"\n  | \"y\" .\nother ::= \"z\"");
  CHECK(whole(*multi, "x"));
  CHECK(whole(*multi, "y\xe2\x82\xac"));
  CHECK_FALSE(whole(*multi, "z"));
}

TEST_CASE("GBNF: errors name the line and what is wrong") {
  auto refused = [](const char* text, const char* what) {
    CAPTURE(text);
    CHECK_THROWS_WITH_AS(Grammar::parse(text, "g.gbnf"), doctest::Contains(what), Error);
  };
  refused("rot ::= \"a\"", "no 'root'");
  refused("root ::= a", "'a' is used but not defined");
  refused("root ::= \"a\"\nroot ::= \"b\"", "line 2: the rule 'root' is defined twice");
  refused("root ::= \"a", "unterminated");
  refused("root ::= [a-", "unterminated");
  refused("root ::= [z-a]", "backwards");
  refused("root ::= (\"a\"", "expected ')'");
  refused("root ::= \"a\"{3,2}", "n < m");
  refused("root ::= \"\\q\"", "unknown escape");
  refused("root ::= \"a\"{99999999}", "too large");
  refused("root ::= root \"a\" | \"b\"", "left recursion");
  refused("root ::= x\nx ::= y? root\ny ::= \"a\"", "left recursion");
  refused("root ::= \"\\ud800\"", "invalid code point");
  refused("root ::= \"a\"{200000} \"b\"{200000}", "elements");
  const std::string deep = "root ::= " + std::string(100000, '(') + "\"a\"" + std::string(100000, ')');
  refused(deep.c_str(), "groups nest more than 64 deep");
  CHECK_NOTHROW(Grammar::parse("root ::= \"(\" root \")\" | \"\""));  // recursion that consumes is fine
}

TEST_CASE("GBNF: nesting past the depth bound is not taken; right recursion runs in constant depth") {
  const auto g = Grammar::parse("root ::= \"(\" root \")\" | \"x\"");
  const std::string ok = std::string(100, '(') + "x" + std::string(100, ')');
  CHECK(whole(*g, ok));
  const std::string deep = std::string(kMaxGrammarDepth + 10, '(');
  CHECK_FALSE(prefix(*g, deep));
  const auto list = Grammar::parse("root ::= \"[\" (\"a\" \",\")* \"]\"");
  std::string many = "[";
  for (int i = 0; i < 5000; ++i) many += "a,";
  CHECK(whole(*list, many + "]"));
}

TEST_CASE("JSON schema: instances of each supported form match whole; others do not") {
  struct Case {
    const char* schema;
    std::vector<const char*> valid, invalid;
  };
  const std::vector<Case> cases = {
      {R"({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
           "required": ["name", "age"], "additionalProperties": false})",
       {R"({"name":"Al","age":3})", "{ \"name\" : \"A\\\"l\" ,\n  \"age\": -12 }", R"({"name":"\u00e9","age":0})"},
       {R"({"age":3,"name":"Al"})", R"({"name":"Al"})", R"({"name":"Al","age":3.5})", R"({"name":"Al","age":03})",
        R"({"name":"Al","age":3,"x":1})", R"({"name":"Al","age":3} )", " {\"name\":\"Al\",\"age\":3}"}},
      {R"({"type": "object", "properties": {"a": {"type": "boolean"}, "b": {"type": "null"}, "c": {"type": "number"}},
           "required": ["b"]})",
       {R"({"b":null})", R"({"a":true,"b":null})", R"({"b":null,"c":1.5e3})", R"({"a":false,"b":null,"c":-0.25})"},
       {R"({})", R"({"a":true})", R"({"b":null,"a":true})", R"({"b":null,})", R"({,"b":null})"}},
      {R"({"type": "array", "items": {"enum": ["x", 1, null, {"k": [true]}]}, "minItems": 1, "maxItems": 3})",
       {R"(["x"])", R"([1,null,{"k":[true]}])", R"([ "x" , "x" ])"},
       {R"([])", R"(["x","x","x","x"])", R"(["y"])", R"([2])"}},
      {R"({"type": ["string", "null"], "minLength": 2, "maxLength": 4})",
       {R"("ab")", R"("abcd")", R"(null)", R"("\n\t")"},
       {R"("a")", R"("abcde")", R"(3)"}},
      {R"({"anyOf": [{"type": "integer", "minimum": 1, "maximum": 12}, {"const": "never"}]})",
       {"1", "9", "12", R"("never")"},
       {"0", "13", "-1", R"("Never")", "1.0"}},
      {R"({"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
           "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}}, "required": ["v", "next"],
           "additionalProperties": false}}, "$ref": "#/$defs/node"})",
       {R"({"v":1,"next":null})", R"({"v":1,"next":{"v":2,"next":{"v":3,"next":null}}})"},
       {R"({"v":1})", R"({"v":1,"next":{"v":2}})"}},
      {R"({"type": "object", "additionalProperties": {"type": "integer"}})",
       {R"({})", R"({"a":1,"b":2})"},
       {R"({"a":"x"})"}},
      {R"({"type": "array", "prefixItems": [{"type": "string", "format": "date"}, {"format": "uuid"}], "items": false})",
       {R"(["2024-02-29","123e4567-e89b-12d3-a456-426614174000"])"},
       {R"(["2024-13-01","123e4567-e89b-12d3-a456-426614174000"])", R"(["2024-02-29"])"}},
      {R"({"type": "string", "format": "date"})",
       {R"("2024-02-29")", R"("2000-02-29")", R"("1999-12-31")", R"("0001-01-01")", R"("2023-04-30")"},
       {R"("2023-02-29")", R"("1900-02-29")", R"("2024-02-30")", R"("2023-04-31")", R"("0000-01-01")",
        R"("2024-00-10")", R"("2024-01-00")"}},
      {R"({"type": "string", "format": "date-time"})",
       {R"("2024-02-29T12:30:00Z")", R"("2024-02-29T12:30:00.123+05:30")"},
       {R"("2024-02-29 12:30:00Z")", R"("2024-02-29T24:00:00Z")"}},
      {R"({})", {R"({"any":[1,"two",{"three":null}]})", "3", "\"s\""}, {"{\"a\":}", "tru"}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.schema);
    const auto g = schema(c.schema);
    for (const char* v : c.valid) {
      CAPTURE(v);
      CHECK(whole(*g, v));
    }
    for (const char* v : c.invalid) {
      CAPTURE(v);
      CHECK_FALSE(whole(*g, v));
    }
  }
  // json_object: any object, nothing else.
  const auto obj = Grammar::parse(json_object_grammar());
  CHECK(whole(*obj, R"({"a": [1, {"b": "c"}], "d": null})"));
  CHECK_FALSE(whole(*obj, "[1]"));
  CHECK_FALSE(whole(*obj, "{\"a\": 1"));
}

TEST_CASE("JSON schema: integer ranges hold exactly the integers in them") {
  std::mt19937 rng(4);
  const std::vector<std::pair<int64_t, int64_t>> fixed = {{0, 0}, {0, 9}, {1, 12}, {17, 42}, {-5, 5}, {-123, -7},
                                                          {99, 101}, {0, 1000}, {-1000, -1}, {8, 8}};
  std::vector<std::pair<int64_t, int64_t>> ranges = fixed;
  for (int i = 0; i < 30; ++i) {
    std::uniform_int_distribution<int64_t> d(-2000, 2000);
    int64_t a = d(rng), b = d(rng);
    ranges.push_back({std::min(a, b), std::max(a, b)});
  }
  for (const auto& range : ranges) {
    const int64_t lo = range.first, hi = range.second;  // named, not bound: doctest's CAPTURE takes them in a lambda
    CAPTURE(lo);
    CAPTURE(hi);
    const auto g = schema("{\"type\": \"integer\", \"minimum\": " + std::to_string(lo) + ", \"maximum\": " +
                          std::to_string(hi) + "}");
    for (int64_t v = lo - 30; v <= hi + 30; ++v) {
      CAPTURE(v);
      CHECK(whole(*g, std::to_string(v)) == (v >= lo && v <= hi));
    }
    CHECK_FALSE(whole(*g, "-0"));
    CHECK_FALSE(whole(*g, "0" + std::to_string(std::abs(lo) + 1)));
  }
  // One-sided and exclusive bounds.
  const auto positive = schema(R"({"type": "integer", "exclusiveMinimum": 0})");
  for (const char* ok : {"1", "9", "10", "123456789012345"}) CHECK(whole(*positive, ok));
  for (const char* bad : {"0", "-1", "01"}) CHECK_FALSE(whole(*positive, bad));
  const auto below = schema(R"({"type": "integer", "maximum": -10.5})");
  for (const char* ok : {"-11", "-99", "-1000"}) CHECK(whole(*below, ok));
  for (const char* bad : {"-10", "0", "5"}) CHECK_FALSE(whole(*below, bad));
  const auto from = schema(R"({"type": "integer", "minimum": 250})");
  for (const char* ok : {"250", "999", "1000", "25000"}) CHECK(whole(*from, ok));
  for (const char* bad : {"249", "25", "0", "-300"}) CHECK_FALSE(whole(*from, bad));
}

TEST_CASE("JSON schema: what it cannot express is refused, naming the keyword and the path") {
  auto refused = [](const char* s, const char* what) {
    CAPTURE(s);
    CHECK_THROWS_WITH_AS(json_schema_grammar(s, "schema"), doctest::Contains(what), Error);
  };
  refused(R"({"type": "string", "pattern": "a+"})", "'pattern' is not supported");
  refused(R"({"properties": {"x": {"type": "number", "minimum": 1}}})", "#/properties/x: 'minimum' does not apply");
  refused(R"({"type": "array", "uniqueItems": true})", "'uniqueItems' is not supported");
  refused(R"({"type": "object", "patternProperties": {}})", "'patternProperties' is not supported");
  refused(R"({"type": "strin"})", "'strin' is not a JSON schema type");
  refused(R"({"type": "string", "format": "email"})", "format");
  refused(R"({"type": "array", "maxItems": 100000})", "above 4096");
  refused(R"({"allOf": [{}, {}]})", "allOf");
  refused(R"({"$ref": "https://example.com/s.json"})", "only references into this schema");
  refused(R"({"$ref": "#/$defs/missing"})", "points at nothing");
  refused(R"({"required": ["a"], "properties": {"b": {}}})", "'required' names 'a'");
  refused(R"({"type": "integer", "minimum": 5, "maximum": 4})", "empty");
  refused(R"({"type": "integer", "minimum": 1e20})", "10^15");
  refused("false", "accepts nothing");
  refused("[1]", "must be an object");
  refused("{", "not valid JSON");
  // Nesting and $ref loops stay bounded.
  std::string deep;
  for (int i = 0; i < 100; ++i) deep += R"({"type": "array", "items": )";
  deep += "{}" + std::string(100, '}');
  refused(deep.c_str(), "nested more than 64");
  CHECK_THROWS_WITH_AS(Grammar::parse(json_schema_grammar(R"({"$ref": "#"})")), doctest::Contains("left recursion"),
                       Error);
  CHECK_THROWS_WITH_AS(
      Grammar::parse(json_schema_grammar(R"({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
                                             "$ref": "#/$defs/a"})")),
      doctest::Contains("left recursion"), Error);
}

TEST_CASE("token masks equal a brute force over the GPT-2 vocabulary") {
  const Tokenizer& tok = gpt2();
  const size_t vocab = tok.size();
  const auto trie = tok.token_trie(vocab);
  CHECK(trie->end_tokens == std::vector<int32_t>{static_cast<int32_t>(tok.eos_id())});
  const auto g = schema(R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
      "n": {"type": "integer", "minimum": -40, "maximum": 300}, "tags": {"type": "array", "items": {"enum": ["a b", "c"]}}},
      "required": ["name", "n"]})");
  // Walk a few outputs; at each step compare the mask with trying every token.
  const std::vector<std::string> outputs = {R"({"name": "Al \u00e9 x", "n": -39, "tags": ["a b","c"]})",
                                            R"({ "name":"","n":300})"};
  std::mt19937 rng(1);
  for (const std::string& out : outputs) {
    CAPTURE(out);
    GrammarMatcher m(g, trie);
    std::string done;
    for (size_t cut = 0; cut <= out.size(); cut += 1 + rng() % 5) {
      CAPTURE(done);
      // Advance to `cut` bytes.
      const std::string step = out.substr(done.size(), cut - done.size());
      REQUIRE(m.accept(std::span<const char>(step.data(), step.size())));
      done = out.substr(0, cut);
      std::vector<float> logits(vocab, 0.0f);
      m.mask(logits);
      size_t allowed = 0, wrong = 0;
      for (size_t t = 0; t < vocab; ++t) {
        const std::string& bytes = tok.token_bytes(static_cast<int32_t>(t));
        bool ok;
        if (tok.is_end(static_cast<int32_t>(t))) {
          ok = m.complete();
        } else {
          GrammarMatcher copy = m;  // the same place, going on on its own
          ok = !bytes.empty() && copy.accept(std::span<const char>(bytes.data(), bytes.size()));
        }
        allowed += ok;
        wrong += ok != (logits[t] == 0.0f);
        if (ok != (logits[t] == 0.0f) && wrong < 4) {
          CAPTURE(t);
          CAPTURE(bytes);
          CHECK(ok == (logits[t] == 0.0f));
        }
      }
      CHECK(wrong == 0);
      CHECK(allowed > 0);
      CHECK(m.complete() == GrammarMatcher::matches(*g, done, true));
    }
    const std::string rest = out.substr(done.size());
    REQUIRE(m.accept(std::span<const char>(rest.data(), rest.size())));
    CHECK(m.complete());
    CHECK(m.finished());
  }
}
