// Tokenizer files for the converter: BPE vocab/merges pairs under both naming
// schemes, nanoGPT meta.pkl character vocabularies, directory lookup, and
// every malformed input refused with the file (and line) named.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "formats/error.hpp"
#include "text/tokenizer_files.hpp"

namespace fs = std::filesystem;
using namespace mmgpt;

namespace {

fs::path fresh_dir(const std::string& name) {
  const fs::path d = fs::path(MMGPT_TEST_TMP) / "convert_tokenizer" / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

void write(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }

// meta.pkl written by Python's pickle, as nanoGPT's prepare.py does.
fs::path make_meta(const std::string& name, const std::string& python_dict) {
  const fs::path d = fresh_dir(name);
  const fs::path script = d / "make.py";
  write(script, "import pickle, sys\nwith open(sys.argv[1], 'wb') as f: pickle.dump(" + python_dict + ", f)\n");
  const std::string cmd = std::string(MMGPT_PYTHON) + " " + script.string() + " " + (d / "meta.pkl").string();
  REQUIRE_MESSAGE(std::system(cmd.c_str()) == 0, "python failed: " << cmd);
  return d / "meta.pkl";
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const mmgpt::Error& e) {
    return e.what();
  }
  return "";
}

const char* kVocab = R"({"a": 0, "b": 1, "ab": 2, "<|endoftext|>": 3})";

}  // namespace

TEST_CASE("BPE vocab.json + merges.txt") {
  const fs::path d = fresh_dir("bpe_ok");
  write(d / "vocab.json", kVocab);
  write(d / "merges.txt", "#version: 0.2\r\na b\r\n\n");
  const mmgpt::TokenizerData t = read_bpe_files((d / "vocab.json").string(), (d / "merges.txt").string());
  CHECK(t.kind == mmgpt::TokenizerKind::Gpt2Bpe);
  CHECK(t.tokens == std::vector<std::string>{"a", "b", "ab", "<|endoftext|>"});
  REQUIRE(t.merges.size() == 1);
  CHECK(t.merges[0] == std::pair<std::string, std::string>{"a", "b"});
  CHECK(t.eos_id == 3);

  SUBCASE("a merges file without header, eos absent") {
    write(d / "vocab.json", R"({"x": 1, "y": 0})");
    write(d / "merges.txt", "x y");
    const auto u = read_bpe_files((d / "vocab.json").string(), (d / "merges.txt").string());
    CHECK(u.tokens == std::vector<std::string>{"y", "x"});
    CHECK(u.merges.size() == 1);
    CHECK(u.eos_id == -1);
  }
}

TEST_CASE("bad BPE files are refused naming the file and the line") {
  const fs::path d = fresh_dir("bpe_bad");
  const std::string v = (d / "vocab.json").string(), m = (d / "merges.txt").string();
  write(d / "merges.txt", "#version: 0.2\na b\n");
  auto bad_vocab = [&](const std::string& json, const std::string& part) {
    write(d / "vocab.json", json);
    const std::string e = error_of([&] { read_bpe_files(v, m); });
    CAPTURE(e);
    CHECK(e.find("vocab.json") != std::string::npos);
    CHECK(e.find(part) != std::string::npos);
  };
  bad_vocab(R"({"a": 0, "b": 2})", "id 2");  // gap
  bad_vocab(R"({"a": 0, "b": 0})", "id 0");  // duplicate
  bad_vocab(R"({"a": 0, "b": -1})", "id -1");
  bad_vocab(R"({"a": 0, "b": "1"})", "not an integer");
  bad_vocab(R"(["a", "b"])", "JSON object");
  bad_vocab(R"({"a": 0, )", "JSON object");
  bad_vocab(R"({})", "JSON object");

  write(d / "vocab.json", kVocab);
  auto bad_merges = [&](const std::string& text, const std::string& part) {
    write(d / "merges.txt", text);
    const std::string e = error_of([&] { read_bpe_files(v, m); });
    CAPTURE(e);
    CHECK(e.find("merges.txt") != std::string::npos);
    CHECK(e.find(part) != std::string::npos);
  };
  bad_merges("#version: 0.2\na b\nab c d\n", "line 3");  // three parts
  bad_merges("a b\nab\n", "line 2");                     // one part
  bad_merges("a b\n b\n", "line 2");                     // empty first part
  bad_merges("a b\na \n", "line 2");                     // empty second part
  bad_merges("a b\n\na b\n", "line 2");                  // blank line inside
  bad_merges("a b\nx\xff y\n", "UTF-8");
  CHECK(error_of([&] { read_bpe_files(v, (d / "absent.txt").string()); }).find("absent.txt") != std::string::npos);
}

TEST_CASE("meta.pkl character vocabularies") {
  const fs::path ok = make_meta("meta_ok",
                                "{'vocab_size': 3, 'itos': {1: 'b', 0: '\\n', 2: '\\u00e9'}, "
                                "'stoi': {'\\n': 0, 'b': 1, '\\u00e9': 2}}");
  const mmgpt::TokenizerData t = read_char_meta(ok.string());
  CHECK(t.kind == mmgpt::TokenizerKind::Char);
  CHECK(t.tokens == std::vector<std::string>{"\n", "b", "\xC3\xA9"});
  CHECK(t.eos_id == -1);
  CHECK(t.merges.empty());

  auto bad = [](const std::string& name, const std::string& dict, const std::string& part) {
    const fs::path p = make_meta(name, dict);
    const std::string e = error_of([&] { read_char_meta(p.string()); });
    CAPTURE(e);
    CHECK(e.find("meta.pkl") != std::string::npos);
    CHECK(e.find(part) != std::string::npos);
  };
  bad("gap", "{'itos': {0: 'a', 2: 'b'}}", "id 2");
  bad("negative", "{'itos': {-1: 'a', 0: 'b'}}", "id -1");
  bad("not_int", "{'itos': {'0': 'a'}}", "not an integer");
  bad("not_str", "{'itos': {0: 5}}", "not a string");
  bad("multichar", "{'itos': {0: 'ab'}}", "single character");
  bad("repeat", "{'itos': {0: 'a', 1: 'a'}}", "repeats");
  bad("stoi", "{'itos': {0: 'a', 1: 'b'}, 'stoi': {'a': 1, 'b': 0}}", "stoi");
  bad("stoi_size", "{'itos': {0: 'a', 1: 'b'}, 'stoi': {'a': 0}}", "stoi");
  bad("vocab_size", "{'vocab_size': 5, 'itos': {0: 'a'}}", "vocab_size");
  bad("no_itos", "{'vocab_size': 50257}", "itos");
  bad("empty", "{'itos': {}}", "empty");
  bad("list", "[1, 2]", "not a dict");
}

TEST_CASE("--tokenizer PATH and lookup beside the checkpoint") {
  const fs::path hf = fresh_dir("hf");
  write(hf / "vocab.json", kVocab);
  write(hf / "merges.txt", "a b\n");
  const fs::path openai = fresh_dir("openai");
  write(openai / "encoder.json", kVocab);
  write(openai / "vocab.bpe", "#version: 0.2\na b\n");

  CHECK(load_tokenizer_path(hf.string()).data.tokens.size() == 4);
  CHECK(load_tokenizer_path((hf / "vocab.json").string()).source.find("merges.txt") != std::string::npos);
  CHECK(load_tokenizer_path((openai / "encoder.json").string()).source.find("vocab.bpe") != std::string::npos);
  CHECK(load_tokenizer_path(openai.string()).data.merges.size() == 1);
  CHECK(error_of([&] { load_tokenizer_path((hf / "merges.txt").string()); }).find("vocab.json") != std::string::npos);
  CHECK(error_of([&] { load_tokenizer_path((hf / "nope").string()); }).find("nope") != std::string::npos);
  CHECK(error_of([&] { load_tokenizer_path(fresh_dir("empty").string()); }).find("no tokenizer files") !=
        std::string::npos);
  CHECK_FALSE(find_tokenizer_in(fresh_dir("nothing").string()).has_value());

  const fs::path meta = make_meta("meta_dir", "{'itos': {0: 'a'}}");
  CHECK(load_tokenizer_path(meta.string()).data.kind == mmgpt::TokenizerKind::Char);
  CHECK(find_tokenizer_in(meta.parent_path().string())->data.kind == mmgpt::TokenizerKind::Char);

  SUBCASE("an incomplete pair is an error, not silence") {
    const fs::path d = fresh_dir("lonely");
    write(d / "vocab.json", kVocab);
    CHECK(error_of([&] { find_tokenizer_in(d.string()); }).find("merges.txt") != std::string::npos);
  }
  SUBCASE("two different tokenizers in one directory are ambiguous") {
    write(meta.parent_path() / "vocab.json", kVocab);
    write(meta.parent_path() / "merges.txt", "a b\n");
    CHECK(error_of([&] { find_tokenizer_in(meta.parent_path().string()); }).find("--tokenizer") != std::string::npos);
  }
}

TEST_CASE("the bundled GPT-2 tokenizer files parse") {
  const fs::path dir = fs::path(MMGPT_SOURCE_DIR) / "data" / "gpt2";
  REQUIRE_MESSAGE(fs::exists(dir / "encoder.json"), "bundled tokenizer missing: " << dir);
  const mmgpt::TokenizerData t = read_bpe_files((dir / "encoder.json").string(), (dir / "vocab.bpe").string());
  CHECK(t.tokens.size() == 50257);
  CHECK(t.merges.size() == 50000);
  CHECK(t.eos_id == 50256);
  CHECK(t.tokens[0] == "!");
  CHECK(t.merges[0] == std::pair<std::string, std::string>{"\xC4\xA0", "t"});
}
