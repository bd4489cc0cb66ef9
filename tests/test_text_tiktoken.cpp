// tiktoken files (text/tiktoken.hpp): rank files and pickled Encodings read
// into tokenizers that compute tiktoken's encoding, against a plain restatement
// of tiktoken's merge loop on random vocabularies, in memory and stored in a
// .mmgpt file; and every malformed file refused with one line naming it. The
// real vocabularies are checked against js-tiktoken in
// tests/tokenizer/test_tiktoken_conformance.py.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "formats/error.hpp"
#include "formats/mmgpt_file.hpp"
#include "text/tiktoken.hpp"
#include "text/tokenizer.hpp"
#include "text/tokenizer_files.hpp"

namespace fs = std::filesystem;
using namespace mmgpt;

namespace {

fs::path test_dir(const std::string& name) {
  const fs::path d = fs::path(MMGPT_TEST_TMP) / "text_tiktoken" / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

fs::path write_file(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string base64(const std::string& s) {
  static const char* digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < s.size(); i += 3) {
    const size_t n = std::min<size_t>(3, s.size() - i);
    uint32_t v = 0;
    for (size_t k = 0; k < 3; ++k) v = (v << 8) | (k < n ? static_cast<unsigned char>(s[i + k]) : 0u);
    for (size_t k = 0; k < 4; ++k) out += k <= n ? digits[(v >> (18 - 6 * k)) & 63] : '=';
  }
  return out;
}

// ranked[r]: the bytes of rank r.
std::string rank_file(const std::vector<std::string>& ranked) {
  std::string text;
  for (size_t r = 0; r < ranked.size(); ++r) text += base64(ranked[r]) + " " + std::to_string(r) + "\n";
  return text;
}

// tiktoken's byte_pair_encode (tiktoken/src/lib.rs): a piece that is a token is
// that token; otherwise its bytes merge, always the adjacent pair whose
// concatenation has the lowest rank, the leftmost of equals.
std::vector<int32_t> tiktoken_bpe(const std::string& piece, const std::map<std::string, int32_t>& rank) {
  if (auto it = rank.find(piece); it != rank.end()) return {it->second};
  std::vector<std::string> parts;
  for (char c : piece) parts.emplace_back(1, c);
  while (parts.size() > 1) {
    int32_t best = INT32_MAX;
    size_t at = 0;
    for (size_t i = 0; i + 1 < parts.size(); ++i)
      if (auto it = rank.find(parts[i] + parts[i + 1]); it != rank.end() && it->second < best) best = it->second, at = i;
    if (best == INT32_MAX) break;
    parts[at] += parts[at + 1];
    parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(at) + 1);
  }
  std::vector<int32_t> ids;
  for (const std::string& p : parts) ids.push_back(rank.at(p));
  return ids;
}

// A zero-weight model carrying `tok`, written as the converter writes one.
void write_model(const std::string& path, const TokenizerData& tok) {
  ModelConfig c;
  c.n_layer = 1, c.n_head = 1, c.n_embd = 4, c.n_ff = 8, c.n_ctx = 8;
  c.vocab_size = static_cast<uint32_t>(tok.tokens.size());
  std::vector<std::vector<float>> storage;
  std::vector<TensorToWrite> tensors;
  const std::vector<TensorSpec> specs = required_tensors(c);
  storage.reserve(specs.size());
  for (const TensorSpec& s : specs) {
    uint64_t n = 1;
    for (uint64_t d : s.shape) n *= d;
    storage.emplace_back(n, 0.0f);
    tensors.push_back({s.name, WeightType::F32, Layout::RowMajor, s.shape, storage.back().data(), n * 4, {}});
  }
  write_model_file(path, c, tok, tensors);
}

}  // namespace

TEST_CASE("a rank file is read as Meta's Llama 3 tokenizer reads it: pattern, special tokens, chat format") {
  const fs::path d = test_dir("llama3");
  std::vector<std::string> ranked;
  for (int b = 0; b < 256; ++b) ranked.emplace_back(1, static_cast<char>(b));
  for (const char* t : {"He", "ll", "llo", "Hello", " w", " wor", " world", "'s"}) ranked.emplace_back(t);
  const fs::path path = write_file(d / "tokenizer.model", rank_file(ranked));
  const TokenizerData data = read_tiktoken_ranks(path.string());
  CHECK(data.kind == TokenizerKind::Bpe);
  REQUIRE(data.tokens.size() == 264 + 256);
  CHECK(data.tokens[264] == "<|begin_of_text|>");
  CHECK(data.tokens[264 + 9] == "<|eot_id|>");
  CHECK(data.tokens[264 + 255] == "<|reserved_special_token_246|>");
  CHECK(data.eos_id == 265);
  const Tokenizer t(data);
  const int32_t hello = 259, world = 262, s = 263;
  CHECK(t.encode("Hello world") == std::vector<int32_t>{hello, world});
  // The pattern's contraction: "'s" is its own piece, in any case.
  CHECK(t.encode("world's") == std::vector<int32_t>{'w', 'o', 'r', 'l', 'd', s});
  CHECK(t.encode("Hello<|eot_id|>") == std::vector<int32_t>{hello, 264 + 9});
  CHECK(t.encode("Hello", true, true) == std::vector<int32_t>{264, hello});
  CHECK(t.is_end(264 + 9));   // <|eot_id|>
  CHECK(t.is_end(264 + 8));   // <|eom_id|>
  CHECK(t.is_end(265));       // <|end_of_text|>
  CHECK_FALSE(t.is_end(264));
  CHECK(t.chat_json().find("start_header_id") != std::string::npos);
  CHECK(t.decode(std::vector<int32_t>{hello, world, 264 + 9}) == "Hello world<|eot_id|>");
}

TEST_CASE("random vocabularies with random ranks: tiktoken's merges, in memory and stored in a .mmgpt file") {
  const fs::path d = test_dir("random");
  std::mt19937 rng(1234);
  for (int vocab = 0; vocab < 12; ++vocab) {
    // Every byte is a token (the rank file then needs nothing else); on top,
    // random strings over "ab" with random ranks among them.
    std::vector<std::string> extra;
    std::uniform_int_distribution<int> len(2, 5), letter(0, 1);
    while (extra.size() < 45) {
      std::string s;
      for (int k = len(rng); k > 0; --k) s += static_cast<char>('a' + letter(rng));
      if (std::find(extra.begin(), extra.end(), s) == extra.end()) extra.push_back(s);
    }
    std::vector<std::string> ranked;
    for (int b = 0; b < 256; ++b) ranked.emplace_back(1, static_cast<char>(b));
    ranked.insert(ranked.end(), extra.begin(), extra.end());
    std::shuffle(ranked.begin() + 'a', ranked.end(), rng);  // the letters' ranks mixed in too
    std::map<std::string, int32_t> rank;
    for (size_t r = 0; r < ranked.size(); ++r) rank[ranked[r]] = static_cast<int32_t>(r);
    if (rank.count("a") == 0) continue;

    const fs::path file = write_file(d / ("v" + std::to_string(vocab) + ".tiktoken"), rank_file(ranked));
    const TokenizerData data = load_tokenizer_path(file.string()).data;
    const Tokenizer in_memory(data);
    const std::string model = (d / ("v" + std::to_string(vocab) + ".mmgpt")).string();
    write_model(model, data);
    // As a model loads it (searched in the file's tables), and as the file reads it back (merges and ranks).
    const auto mapped = std::make_shared<const ModelFile>(ModelFile::open(model));
    REQUIRE(mapped->bpe_tables() != nullptr);
    const Tokenizer stored(mapped->stored_tokenizer(), *mapped->bpe_tables(), mapped, model);
    const Tokenizer reread(mapped->tokenizer());
    for (int k = 0; k < 60; ++k) {
      std::string text;
      for (int n = std::uniform_int_distribution<int>(1, 60)(rng); n > 0; --n) text += static_cast<char>('a' + letter(rng));
      const std::vector<int32_t> want = tiktoken_bpe(text, rank);
      CHECK(in_memory.encode(text) == want);
      CHECK(stored.encode(text) == want);
      CHECK(reread.encode(text) == want);
    }
  }
}

TEST_CASE("nanochat's tokenizer.pkl: a pickled tiktoken Encoding, its special tokens and chat format") {
  const fs::path d = test_dir("pickle");
  // pickle.dump(Encoding("rustbpe", pat, {b"a": 0, b"b": 1, b"ab": 2}, specials), protocol=4),
  // written op by op: PROTO 4, STACK_GLOBAL tiktoken.core Encoding, EMPTY_TUPLE, NEWOBJ, the state dict, BUILD.
  auto s = [](const std::string& t) { return std::string("\x8c") + static_cast<char>(t.size()) + t; };
  auto b = [](const std::string& t) { return std::string("C") + static_cast<char>(t.size()) + t; };
  auto i = [](int v) { return std::string("K") + static_cast<char>(v); };
  const std::string pattern = "[ab]+| ";
  std::string state = "}(" + s("name") + s("rustbpe") + s("pat_str") + s(pattern) + s("mergeable_ranks") + "}(";
  for (int byte = 0; byte < 256; ++byte) state += b(std::string(1, static_cast<char>(byte))) + i(byte);
  state += b("ab") + "M" + std::string("\x00\x01", 2) + "u" + s("special_tokens") + "}(";
  const char* specials[] = {"<|bos|>",          "<|user_start|>",   "<|user_end|>",   "<|assistant_start|>",
                            "<|assistant_end|>", "<|python_start|>", "<|python_end|>", "<|output_start|>",
                            "<|output_end|>"};
  for (int k = 0; k < 9; ++k) state += s(specials[k]) + std::string("M") + static_cast<char>(1 + k) + "\x01";
  state += "uu";
  const std::string pkl = std::string("\x80\x04") + s("tiktoken.core") + s("Encoding") + "\x93" + ")\x81" + state + "b.";
  const fs::path path = write_file(d / "tokenizer.pkl", pkl);
  const TokenizerData data = load_tokenizer_path(d.string()).data;  // found by name in its directory
  REQUIRE(data.tokens.size() == 257 + 9);
  const Tokenizer t(data);
  // Only the pattern's matches are encoded: "c" matches nothing and is dropped, as tiktoken's find_iter drops it.
  CHECK(t.encode("abc ab") == std::vector<int32_t>{256, ' ', 256});
  CHECK(t.encode("ab<|user_end|>b") == std::vector<int32_t>{256, 259, 'b'});
  CHECK(t.encode("ab", true, true) == std::vector<int32_t>{257, 256});  // <|bos|> first
  CHECK(t.eos_id() == 257);
  CHECK(t.is_end(261));  // <|assistant_end|>
  CHECK(t.chat_json().find("assistant_start") != std::string::npos);

  // An Encoding pickled by name (one of tiktoken's own) has no ranks in the file.
  const std::string by_name = std::string("\x80\x04") + s("tiktoken.core") + s("Encoding") + "\x93)\x81" +
                              s("cl100k_base") + "b.";
  CHECK(error_of([&] { load_tokenizer_path(write_file(d / "by_name.pkl", by_name).string()); })
            .find("pickled by name ('cl100k_base'") != std::string::npos);
  // Another class is refused before anything runs.
  const std::string other = std::string("\x80\x04") + s("tiktoken.core") + s("CoreBPE") + "\x93)\x81}b.";
  CHECK(error_of([&] { load_tokenizer_path(write_file(d / "other.pkl", other).string()); })
            .find("refused to load global 'tiktoken.core.CoreBPE'") != std::string::npos);
}

TEST_CASE("hostile tiktoken files are refused with one line naming the file and the line") {
  const fs::path d = test_dir("hostile");
  auto refused = [&](const std::string& name, const std::string& bytes, const std::string& expect) {
    const fs::path p = write_file(d / name, bytes);
    const std::string e = error_of([&] { load_tokenizer_path(p.string()); });
    INFO(name << ": " << e);
    CHECK(e.find(p.string()) != std::string::npos);
    CHECK(e.find(expect) != std::string::npos);
    CHECK(e.find('\n') == std::string::npos);
  };
  refused("empty.tiktoken", "", "not a tiktoken rank file");
  refused("sentencepiece.model", std::string("\x0a\x0b\x0a\x05<unk>\x15\x00\x00\x00\x00", 14),
          "a SentencePiece model is not read");
  refused("three_fields.tiktoken", "YQ== 0\nYg== 1 2\n", "line 2 is not \"TOKEN RANK\"");
  refused("bad_base64.tiktoken", "YQ== 0\nY!== 1\n", "line 2: the token is not base64");
  refused("short_base64.tiktoken", "YQ== 0\nYQ 1\n", "line 2: the token is not base64");
  refused("negative.tiktoken", "YQ== 0\nYg== -1\n", "line 2: the rank '-1' is not an integer");
  refused("huge_rank.tiktoken", "YQ== 0\nYg== 999999999\n", "line 2: the rank '999999999' is not an integer");
  refused("repeated_token.tiktoken", "YQ== 0\nYg== 1\nYQ== 2\n", "line 3: repeats the token of line 1");
  refused("repeated_rank.tiktoken", "YQ== 0\nYg== 0\n", "line 2: rank 0 is given to two tokens");
  refused("gap.tiktoken", "YQ== 0\nYg== 2\n", "no token has rank 1");
  refused("truncated.tiktoken", "YQ== 0\nYg", "line 2 is not \"TOKEN RANK\"");
  // Blank lines and CRLF are what tiktoken's splitlines() reads past.
  const fs::path ok = write_file(d / "crlf.tiktoken", "YQ== 0\r\n\r\nYg== 1\r\nYWI= 2\r\n");
  CHECK(load_tokenizer_path(ok.string()).data.tokens.size() == 3 + 256);
}
