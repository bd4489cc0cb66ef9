#pragma once
// Text <-> token ids from the tokenizer stored in the model file.
// Char: one token per Unicode character (nanoGPT's meta.pkl vocabularies).
// GPT-2 BPE: decoding maps each token's byte-level characters back to raw
// bytes; encoding text arrives with the BPE issue (#3), until then a BPE model
// takes its prompt as ids.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "formats/model_config.hpp"

namespace mmgpt {

class Tokenizer {
 public:
  explicit Tokenizer(const TokenizerData& data);

  TokenizerKind kind() const { return kind_; }
  size_t size() const { return token_bytes_.size(); }
  int64_t eos_id() const { return eos_id_; }
  bool can_encode() const { return kind_ == TokenizerKind::Char; }

  // Throws mmgpt::Error naming the character (and its byte offset) that is not in the vocabulary.
  std::vector<int32_t> encode(std::string_view text) const;
  // The exact bytes of one token; empty for ids the tokenizer does not cover
  // (e.g. the padding rows of a vocabulary padded to a multiple of 64).
  const std::string& token_bytes(int32_t id) const;
  std::string decode(std::span<const int32_t> ids) const;

 private:
  TokenizerKind kind_;
  int64_t eos_id_;
  std::vector<std::string> token_bytes_;
  std::unordered_map<std::string, int32_t> char_to_id_;
};

// Splits `bytes` so that no UTF-8 character is cut in half when text is
// streamed token by token: push() returns what can be printed now and keeps
// an incomplete trailing sequence for the next call; flush() returns the rest.
class Utf8Stream {
 public:
  std::string push(std::string_view bytes);
  std::string flush();

 private:
  std::string pending_;
};

}  // namespace mmgpt
