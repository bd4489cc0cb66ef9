#pragma once
// Text <-> token ids from the tokenizer stored in the model file.
// Char: one token per Unicode character (nanoGPT's meta.pkl vocabularies).
// GPT-2 BPE: decoding maps each token's byte-level characters back to raw
// bytes; encoding is OpenAI's byte-level BPE (engine/bpe.hpp), any bytes in,
// including text that is not valid UTF-8 (see engine/pretokenize.hpp).
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "formats/mmgpt_file.hpp"
#include "formats/model_config.hpp"

namespace mmgpt {
class BpeModel;
}

namespace mmgpt {

class Tokenizer {
 public:
  explicit Tokenizer(const TokenizerData& data);
  // A GPT-2 BPE tokenizer over a file's stored tables (searched in place;
  // keep_alive owns the mapping they point into), end-of-text token eos_id
  // (-1: none). It needs nothing else of the tokenizer section.
  Tokenizer(int64_t eos_id, const StoredBpeTables& stored, std::shared_ptr<const void> keep_alive);
  // The same, eos_id taken from `data`.
  Tokenizer(const TokenizerData& data, const StoredBpeTables& stored, std::shared_ptr<const void> keep_alive)
      : Tokenizer(data.eos_id, stored, std::move(keep_alive)) {}

  TokenizerKind kind() const { return kind_; }
  size_t size() const { return token_bytes_.size(); }
  int64_t eos_id() const { return eos_id_; }
  bool can_encode() const { return kind_ == TokenizerKind::Char || kind_ == TokenizerKind::Gpt2Bpe; }

  // Char: throws mmgpt::Error naming the character (and its byte offset) that
  // is not in the vocabulary. GPT-2 BPE: with allow_special, each
  // "<|endoftext|>" (the end-of-text token's text) in `text` becomes that one
  // token, as Hugging Face's tokenizer does; without it, it is plain text.
  std::vector<int32_t> encode(std::string_view text, bool allow_special = true) const;
  // The exact bytes of one token; empty for ids the tokenizer does not cover
  // (e.g. the padding rows of a vocabulary padded to a multiple of 64).
  const std::string& token_bytes(int32_t id) const;
  std::string decode(std::span<const int32_t> ids) const;

 private:
  void set_special();

  TokenizerKind kind_;
  int64_t eos_id_;
  std::vector<std::string> token_bytes_;
  std::unordered_map<std::string, int32_t> char_to_id_;
  std::shared_ptr<const BpeModel> bpe_;  // Gpt2Bpe only; shared so Tokenizer stays cheap to copy
  std::string special_;                  // the end-of-text token's text, or empty
};

}  // namespace mmgpt
