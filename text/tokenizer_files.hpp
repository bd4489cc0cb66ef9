#pragma once
// Tokenizer files a checkpoint comes with, read into TokenizerData:
//   nanoGPT's meta.pkl (character vocabulary: itos / stoi),
//   GPT-2 BPE as vocab.json + merges.txt (Hugging Face names) or
//   encoder.json + vocab.bpe (OpenAI names),
//   Hugging Face's tokenizer.json (text/tokenizer_json.hpp),
//   tiktoken's rank files and pickled Encodings (text/tiktoken.hpp).
// Every error names the tokenizer file and, where there is one, the line or entry.
#include <optional>
#include <string>

#include "formats/model_config.hpp"

namespace mmgpt {

struct FoundTokenizer {
  TokenizerData data;
  std::string source;  // the file(s) it was read from, for the summary
};

// meta.pkl: itos {int: str} with ids exactly 0..n-1, one character each;
// stoi, when present, must be its inverse.
TokenizerData read_char_meta(const std::string& meta_pkl);

// A pickle: a tiktoken Encoding (nanochat's tokenizer.pkl), else a meta.pkl.
TokenizerData read_pickled_tokenizer(const std::string& path);


// vocab.json / encoder.json {token: id} with ids exactly 0..n-1, and the
// merges file (optional "#version" header, then one "a b" pair per line).
TokenizerData read_bpe_files(const std::string& vocab_json, const std::string& merges_txt);

// --tokenizer PATH: a tokenizer.json, a tiktoken rank file (*.model,
// *.tiktoken), a pickle (tokenizer.pkl or meta.pkl), a vocab.json /
// encoder.json with its merges file beside it, or a directory holding one of
// those sets.
FoundTokenizer load_tokenizer_path(const std::string& path);

// The tokenizer files in `dir`, or nothing when it holds none. Throws when
// it holds an incomplete set or several different ones.
std::optional<FoundTokenizer> find_tokenizer_in(const std::string& dir);

}  // namespace mmgpt
