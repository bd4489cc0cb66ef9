// tokenizer.json BPE tokenizers (text/hf_tokenizer.hpp, text/tokenizer_json.hpp)
// on small hand-made files: each part of the pipeline against what Hugging
// Face's tokenizers computes for it, and every malformed or unsupported file
// refused with one line naming the file and the part. The real tokenizers are
// checked against the reference library in tests/tokenizer/test_hf_conformance.py.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "formats/error.hpp"
#include "text/tokenizer.hpp"
#include "text/tokenizer_json.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace mmgpt;

namespace {

fs::path write_json(const std::string& name, const std::string& text) {
  const fs::path d = fs::path(MMGPT_TEST_TMP) / "text_hf_tokenizer" / name;
  fs::remove_all(d);
  fs::create_directories(d);
  std::ofstream(d / "tokenizer.json", std::ios::binary) << text;
  return d / "tokenizer.json";
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A SentencePiece-style tokenizer: "▁" for spaces, byte fallback, <unk>, merges as pairs.
json sp_tokenizer() {
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"\xE2\x96\x81", 2}, {"a", 3}, {"b", 4}, {"\xE2\x96\x81" "a", 5},
                {"ab", 6},    {"\xE2\x96\x81" "ab", 7}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    vocab[name] = 8 + b;
  }
  return {{"version", "1.0"},
          {"added_tokens",
           {{{"id", 0}, {"content", "<unk>"}, {"special", true}, {"normalized", false}},
            {{"id", 1}, {"content", "<s>"}, {"special", true}, {"normalized", false}}}},
          {"normalizer",
           {{"type", "Sequence"},
            {"normalizers",
             {{{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}},
              {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}}}}}},
          {"pre_tokenizer", nullptr},
          {"post_processor",
           {{"type", "TemplateProcessing"},
            {"single", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
            {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}}},
          {"decoder",
           {{"type", "Sequence"},
            {"decoders",
             {{{"type", "Replace"}, {"pattern", {{"String", "\xE2\x96\x81"}}}, {"content", " "}},
              {{"type", "ByteFallback"}},
              {{"type", "Fuse"}},
              {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
          {"model",
           {{"type", "BPE"},
            {"unk_token", "<unk>"},
            {"byte_fallback", true},
            {"fuse_unk", true},
            {"vocab", vocab},
            // Pairs, written as arrays (a brace list of two strings would be a JSON object).
            {"merges", json::array({json::array({"\xE2\x96\x81", "a"}), json::array({"a", "b"}),
                                    json::array({"\xE2\x96\x81" "a", "b"})})}}}};
}

Tokenizer load(const json& j, const std::string& name) {
  return Tokenizer(read_tokenizer_json(write_json(name, j.dump()).string()));
}

}  // namespace

TEST_CASE("a SentencePiece-style tokenizer: metaspace, merges, byte fallback, template and decoder chain") {
  const Tokenizer t = load(sp_tokenizer(), "sp");
  CHECK(t.kind() == TokenizerKind::Bpe);
  CHECK(t.size() == 264);
  // "ab ab" -> "▁ab▁ab": the rank-0 merge (▁ a) first, then (▁a b).
  CHECK(t.encode("ab ab", true, false) == std::vector<int32_t>{7, 7});
  CHECK(t.encode("ab ab", true, true) == std::vector<int32_t>{1, 7, 7});
  // "é" is not in the vocabulary: its two bytes through byte fallback.
  CHECK(t.encode("\xC3\xA9", true, false) == std::vector<int32_t>{2, 8 + 0xC3, 8 + 0xA9});
  // The special token cuts the text; each side is normalized on its own ("▁" prepended again).
  CHECK(t.encode("a<s>b", true, false) == std::vector<int32_t>{5, 1, 2, 4});
  CHECK(t.encode("a<s>b", false, false) == std::vector<int32_t>{5, 8 + '<', 8 + 's', 8 + '>', 4});
  // Decoding: "▁" -> space, bytes fused into UTF-8, the first space stripped.
  CHECK(t.decode(std::vector<int32_t>{7, 2, 8 + 0xC3, 8 + 0xA9}) == "ab \xC3\xA9");
  // A lone continuation byte is not UTF-8: U+FFFD, as the reference decodes it.
  CHECK(t.decode(std::vector<int32_t>{3, 8 + 0xA9}) == "a\xEF\xBF\xBD");
  CHECK(t.encode("", true, false).empty());
  CHECK(t.encode("", true, true) == std::vector<int32_t>{1});
  CHECK(error_of([&] { t.decode(std::vector<int32_t>{264}); }).find("token id 264 is not one of the 264") !=
        std::string::npos);
  CHECK(error_of([&] { t.encode("\xFF", true, false); }).find("not valid UTF-8") != std::string::npos);
}

TEST_CASE("tokenizer_config.json and generation_config.json: the chat template and every end-of-turn token") {
  const fs::path p = write_json("configs", sp_tokenizer().dump());
  std::ofstream(p.parent_path() / "tokenizer_config.json")
      << R"({"eos_token": {"content": "</s>"}, "bos_token": "<s>", "chat_template": "{{ bos_token }}{{ messages[0].content }}"})";
  // </s> is not a token of this vocabulary: refused, naming both files.
  std::string e = error_of([&] { read_tokenizer_json(p.string()); });
  CHECK_MESSAGE(e.find("tokenizer_config.json: eos_token {\"content\":\"</s>\"} is not a token of") != std::string::npos, e);
  std::ofstream(p.parent_path() / "tokenizer_config.json")
      << R"({"eos_token": "<s>", "bos_token": "<s>", "chat_template": "{{ bos_token }}{{ messages[0].content }}"})";
  std::ofstream(p.parent_path() / "generation_config.json") << R"({"eos_token_id": [4, 1, 3]})";
  const Tokenizer t(read_tokenizer_json(p.string()));
  CHECK(t.eos_id() == 1);
  CHECK(t.is_end(1));
  CHECK(t.is_end(3));
  CHECK(t.is_end(4));
  CHECK(!t.is_end(5));
  const json chat = json::parse(t.chat_json());
  CHECK(chat["chat_template"] == "{{ bos_token }}{{ messages[0].content }}");
  CHECK(chat["special_tokens"]["bos_token"] == "<s>");
  std::ofstream(p.parent_path() / "generation_config.json") << R"({"eos_token_id": 9999})";
  e = error_of([&] { read_tokenizer_json(p.string()); });
  CHECK_MESSAGE(e.find("generation_config.json: eos_token_id 9999 is not a token of") != std::string::npos, e);
}

TEST_CASE("add_bos_token and add_eos_token rebuild the post-processor of Llama and Gemma tokenizers") {
  const fs::path p = write_json("add_bos", sp_tokenizer().dump());
  auto with_config = [&](const std::string& config) {
    std::ofstream(p.parent_path() / "tokenizer_config.json") << config;
    return Tokenizer(read_tokenizer_json(p.string()));
  };
  // tokenizer.json's template adds <s>; a LlamaTokenizer asked for no BOS and an EOS gets that instead.
  CHECK(with_config(R"({"tokenizer_class": "LlamaTokenizer", "add_bos_token": false, "add_eos_token": true,
                        "bos_token": "<s>", "eos_token": "<unk>"})")
            .encode("ab", true, true) == std::vector<int32_t>{7, 0});
  CHECK(with_config(R"({"tokenizer_class": "GemmaTokenizerFast", "add_bos_token": true, "bos_token": "<s>"})")
            .encode("ab", true, true) == std::vector<int32_t>{1, 7});
  // Another class keeps tokenizer.json's post-processor, as transformers does.
  CHECK(with_config(R"({"tokenizer_class": "PreTrainedTokenizerFast", "add_bos_token": false})")
            .encode("ab", true, true) == std::vector<int32_t>{1, 7});
  std::ofstream(p.parent_path() / "tokenizer_config.json")
      << R"({"tokenizer_class": "LlamaTokenizer", "add_eos_token": true, "bos_token": "<s>"})";
  const std::string e = error_of([&] { read_tokenizer_json(p.string()); });
  CHECK_MESSAGE(e.find("tokenizer_config.json: add_eos_token is true but eos_token is not a token") != std::string::npos,
                e);
}

TEST_CASE("unknown characters without byte fallback: fused into one <unk>") {
  json j = sp_tokenizer();
  j["model"]["byte_fallback"] = false;
  const Tokenizer t = load(j, "unk");
  CHECK(t.encode("a\xC3\xA9\xC3\xA8" "b", true, false) == std::vector<int32_t>{5, 0, 4});
  j["model"]["fuse_unk"] = false;
  CHECK(load(j, "unk2").encode("a\xC3\xA9\xC3\xA8" "b", true, false) == std::vector<int32_t>{5, 0, 0, 4});
}

TEST_CASE("a byte-level tokenizer with a split regex and added tokens that strip spaces") {
  // Byte-level vocabulary: every byte's GPT-2 character, plus "Ġa" (" a") and "ab".
  json vocab = json::object();
  std::vector<std::string> byte_char(256);
  {
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const uint32_t cp = printable ? static_cast<uint32_t>(b) : 256u + static_cast<uint32_t>(n++);
      std::string s;
      if (cp < 0x80) {
        s.push_back(static_cast<char>(cp));
      } else {
        s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
      }
      byte_char[static_cast<size_t>(b)] = s;
      vocab[s] = b;
    }
  }
  vocab[byte_char[' '] + "a"] = 256;
  vocab["ab"] = 257;
  const json j = {
      {"added_tokens", {{{"id", 258}, {"content", "<|x|>"}, {"special", true}, {"lstrip", true}, {"rstrip", true},
                         {"normalized", false}}}},
      {"normalizer", {{"type", "NFC"}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"}, {"pattern", {{"Regex", "\\s+|\\p{L}+|\\p{N}"}}}, {"behavior", "Isolated"}, {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"ignore_merges", true}, {"vocab", vocab}, {"merges", json::array({"a b", byte_char[' '] + " a"})}}}};
  const Tokenizer t = load(j, "byte_level");
  CHECK(t.kind() == TokenizerKind::Bpe);
  // The regex isolates " " from "ab": no " a" merge across the split; digits one by one.
  CHECK(t.encode("ab 12", true, false) == std::vector<int32_t>{257, ' ', '1', '2'});
  // lstrip and rstrip: the spaces around the added token go with it.
  CHECK(t.encode("ab  <|x|>  ab", true, false) == std::vector<int32_t>{257, 258, 257});
  // NFC: "e" + U+0301 composes to "é" before the bytes are tokens.
  CHECK(t.encode("e\xCC\x81", true, false) == std::vector<int32_t>{0xC3, 0xA9});
  CHECK(t.decode(std::vector<int32_t>{257, 258, 0xC3, 0xA9}) == "ab<|x|>\xC3\xA9");
  CHECK(t.token_bytes(256) == " a");
}

TEST_CASE("hostile and unsupported tokenizer.json files are refused naming the file and the part") {
  auto refused = [](const std::string& name, const std::string& text) {
    const fs::path p = write_json(name, text);
    const std::string e = error_of([&] { read_tokenizer_json(p.string()); });
    CHECK_MESSAGE(e.rfind(p.string() + ": ", 0) == 0, e);
    return e;
  };
  json j = sp_tokenizer();
  CHECK(refused("truncated", j.dump().substr(0, 200)).find("not valid JSON") != std::string::npos);
  CHECK(refused("not_object", "[1, 2]").find("no \"model\" object") != std::string::npos);

  json w = j;
  w["model"]["type"] = "WordPiece";
  CHECK(refused("wordpiece", w.dump()).find("model.type 'WordPiece' is not supported") != std::string::npos);
  w = j;
  w["pre_tokenizer"] = {{"type", "Whitespace"}};
  CHECK(refused("whitespace", w.dump()).find("pre_tokenizer: pre-tokenizer 'Whitespace' is not supported") !=
        std::string::npos);
  w = j;
  w["normalizer"]["normalizers"][1] = {{"type", "Lowercase"}};
  CHECK(refused("lowercase", w.dump()).find("normalizer.normalizers[1]: normalizer 'Lowercase'") != std::string::npos);
  w = j;
  w["decoder"] = {{"type", "WordPiece"}};
  CHECK(refused("decoder", w.dump()).find("decoder 'WordPiece' is not supported") != std::string::npos);
  w = j;
  w["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
  CHECK(refused("bad_regex", w.dump()).find("does not compile") != std::string::npos);
  w = j;
  w["model"]["merges"].push_back(json::array({"a", "zz"}));
  CHECK(refused("merge_unknown", w.dump()).find("its right part is not in the vocabulary") != std::string::npos);
  w = j;
  w["model"]["merges"].push_back("a b c");
  CHECK(refused("merge_three", w.dump()).find("is not \"a b\"") != std::string::npos);
  w = j;
  w["model"]["vocab"]["gap"] = 1000;
  CHECK(refused("gap", w.dump()).find("has no token (the ids must run from 0 without gaps)") != std::string::npos);
  w = j;
  w["model"]["vocab"]["huge"] = 1u << 30;
  CHECK(refused("huge_id", w.dump()).find("past the limit") != std::string::npos);
  w = j;
  w["model"]["vocab"]["dup"] = 3;
  CHECK(refused("two_tokens", w.dump()).find("id 3 is") != std::string::npos);
  w = j;
  w["added_tokens"][1]["id"] = 3;
  CHECK(refused("added_clash", w.dump()).find("id 3 is both") != std::string::npos);
  w = j;
  w["model"]["unk_token"] = "<missing>";
  CHECK(refused("unk", w.dump()).find("model.unk_token: '<missing>' is not in the vocabulary") != std::string::npos);
  w = j;
  w["model"]["dropout"] = 0.1;
  CHECK(refused("dropout", w.dump()).find("dropout") != std::string::npos);
  w = j;
  w["post_processor"] = {{"type", "RobertaProcessing"}};
  CHECK(refused("roberta", w.dump()).find("post-processor 'RobertaProcessing' is not supported") != std::string::npos);
}

TEST_CASE("the stored pipeline's added tokens: its own form and any other JSON read alike, errors too") {
  // The loader reads the added tokens in the form the writer stores them with
  // a scanner of its own, and anything else with the JSON parser.
  json j = sp_tokenizer();
  j["model"]["vocab"]["<x>"] = 264;
  j["model"]["vocab"]["<y>"] = 265;
  j["added_tokens"].push_back({{"id", 264}, {"content", "<x>"}, {"lstrip", true}, {"rstrip", true}});
  j["added_tokens"].push_back(
      {{"id", 265}, {"content", "<y>"}, {"single_word", true}, {"normalized", true}, {"special", true}});
  const TokenizerData data = read_tokenizer_json(write_json("stored_added", j.dump()).string());
  const std::string& stored = data.pipeline;
  REQUIRE(stored.rfind("{\"added_tokens\":[{\"id\":0,\"special\":true},", 0) == 0);
  REQUIRE(stored.find("{\"id\":264,\"lstrip\":true,\"rstrip\":true},{\"id\":265,\"normalized\":true,\"single_word\":"
                      "true,\"special\":true}]") != std::string::npos);
  auto with = [&data](const std::string& pipeline) {
    TokenizerData d = data;
    d.pipeline = pipeline;
    return d;
  };
  const std::vector<std::string> texts = {"ab <x> ab", "a<x>b<s>", " <y> a<y>b <y>", "<s><unk>ab ab"};
  const Tokenizer scanned(data);
  const Tokenizer parsed(with(json::parse(stored).dump(1)));  // spaces: the JSON parser's
  for (const std::string& text : texts)
    for (const bool allow : {true, false}) CHECK(scanned.encode(text, allow, true) == parsed.encode(text, allow, true));
  CHECK(scanned.encode("ab <x> ab", true, false) == std::vector<int32_t>{7, 264, 7});

  // A change to the stored text, and the same change to a spaced-out copy,
  // must give the same message (or the same tokenizer).
  auto load_error = [&](const std::string& pipeline) { return error_of([&] { Tokenizer t(with(pipeline)); }); };
  auto same = [&](const std::string& from, const std::string& to) {
    std::string a = stored;
    REQUIRE(a.find(from) != std::string::npos);
    a.replace(a.find(from), from.size(), to);
    const std::string e = load_error(a);
    if (json::accept(a)) CHECK(e == load_error(json::parse(a).dump(1)));
    return e;
  };
  CHECK(same("{\"id\":264,", "{\"id\":266,").find("added_tokens[2]: id is not an id of the vocabulary") !=
        std::string::npos);
  CHECK(same("{\"id\":264,", "{\"id\":26400000000,").find("added_tokens[2]: id is not an id") != std::string::npos);
  CHECK(same("{\"id\":264,", "{\"id\":0264,").find("not valid JSON") != std::string::npos);
  CHECK(same("{\"id\":264,", "{\"id\":-264,").find("added_tokens[2]: id is not an id") != std::string::npos);
  CHECK(same("{\"id\":264,", "{\"id\":264.0,").find("added_tokens[2]: id is not an id") != std::string::npos);
  CHECK(same("\"lstrip\":true", "\"lstrip\":1").find("added_tokens[2]: lstrip is not true or false") !=
        std::string::npos);
  CHECK(same("\"lstrip\":true", "\"lstrip\":tru").find("not valid JSON") != std::string::npos);
  CHECK(same("\"lstrip\":true", "\"lstrip\":null").empty());
  CHECK(same("\"lstrip\":true", "\"lstrip\":true,\"content\":\"<z>\"").find("content '<z>' is not the spelling") !=
        std::string::npos);
  CHECK(same("\"lstrip\":true", "\"lstrip\":true,\"other\":[1,{\"a\":2}]").empty());
  CHECK(same("\"lstrip\":true", "\"lstrip\":true,\"id\":1").empty());  // the later id counts
  CHECK(same("{\"added_tokens\":[", "{\"added_tokens\":[7,").find("added_tokens[0]: is not an object") !=
        std::string::npos);
  CHECK(same("}],", "}],,").find("not valid JSON") != std::string::npos);
  CHECK(same("}],", "}]]").find("not valid JSON") != std::string::npos);
  CHECK(same("}],", "},],").find("not valid JSON") != std::string::npos);
  // A second added_tokens key is the one that counts, as in the JSON parser.
  CHECK(same("}],", "}],\"added_tokens\":5,").find("added_tokens: is not a list") != std::string::npos);
  CHECK(same("}],", "}],\"added_tokens\":null,").empty());
  CHECK(same("}],", "}],\"added_tokens\":[],").empty());
  CHECK(same("}],", "}],\"x\":{\"added_tokens\":5},").empty());
  // The later list wins: the tokenizer has no <x> then.
  std::string later = stored;
  later.replace(later.find("}],"), 3, "}],\"added_tokens\":[{\"id\":0,\"special\":true}],");
  CHECK(Tokenizer(with(later)).encode("<x>", true, false) != scanned.encode("<x>", true, false));
  CHECK(load_error("{\"added_tokens\":[]}").find("model: is missing") != std::string::npos);
  CHECK(load_error("{\"added_tokens\":[]} x").find("not valid JSON") != std::string::npos);
  CHECK(load_error("{\"added_tokens\":[],}").find("not valid JSON") != std::string::npos);
  CHECK(load_error("{\"added_tokens\":[{\"id\":0}],}").find("not valid JSON") != std::string::npos);
}
