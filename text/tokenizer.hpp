#pragma once
// Text <-> token ids from the tokenizer stored in the model file.
// Char: one token per Unicode character (nanoGPT's meta.pkl vocabularies).
// GPT-2 BPE: decoding maps each token's byte-level characters back to raw
// bytes; encoding is OpenAI's byte-level BPE (text/bpe.hpp), any bytes in,
// including text that is not valid UTF-8 (see text/pretokenize.hpp).
// BPE (a tokenizer.json): Hugging Face's tokenizer, exactly (text/hf_tokenizer.hpp).
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "formats/mmgpt_file.hpp"
#include "formats/model_config.hpp"

namespace mmgpt {
class BpeModel;
class HfTokenizer;
struct TokenTrie;
}

namespace mmgpt {

class Tokenizer {
 public:
  explicit Tokenizer(const TokenizerData& data);
  // A GPT-2 BPE tokenizer over a file's stored tables (searched in place;
  // keep_alive owns the mapping they point into), end-of-text token eos_id
  // (-1: none). It needs nothing else of the tokenizer section.
  Tokenizer(int64_t eos_id, const StoredBpeTables& stored, std::shared_ptr<const void> keep_alive);
  // A tokenizer.json BPE (kind Bpe) over a file's tokenizer section and
  // tables, searched in place; keep_alive owns the mapping they point into;
  // `where` names the file in errors.
  Tokenizer(const StoredTokenizer& stored, const StoredBpeTables& tables, std::shared_ptr<const void> keep_alive,
            const std::string& where);
  // The same, eos_id taken from `data`.
  Tokenizer(const TokenizerData& data, const StoredBpeTables& stored, std::shared_ptr<const void> keep_alive)
      : Tokenizer(data.eos_id, stored, std::move(keep_alive)) {}

  TokenizerKind kind() const { return kind_; }
  size_t size() const;
  int64_t eos_id() const { return eos_id_; }
  // Whether `id` ends generation: the end-of-text token, or (tokenizer.json)
  // any end-of-turn token of its generation_config.json.
  bool is_end(int32_t id) const;
  bool can_encode() const { return kind_ != TokenizerKind::None; }
  // The special tokens' ids, sorted: control tokens that are not text (the
  // end-of-text token, a tokenizer.json's special added tokens).
  std::vector<int32_t> special_ids() const;
  // The vocabulary's first `vocab` ids as a byte trie (text/grammar.hpp), for
  // constrained decoding: built on first use, then shared by every copy.
  std::shared_ptr<const TokenTrie> token_trie(size_t vocab) const;

  // Char: throws mmgpt::Error naming the character (and its byte offset) that
  // is not in the vocabulary. GPT-2 BPE: with allow_special, each
  // "<|endoftext|>" (the end-of-text token's text) in `text` becomes that one
  // token, as Hugging Face's tokenizer does; without it, it is plain text.
  // BPE: the special added tokens likewise (the others always split the
  // text), and add_special adds what the tokenizer's post-processor adds
  // (a BOS token, say), as the reference's add_special_tokens does.
  std::vector<int32_t> encode(std::string_view text, bool allow_special = true, bool add_special = false) const;
  // The exact bytes of one token; empty for ids the tokenizer does not cover
  // (e.g. the padding rows of a vocabulary padded to a multiple of 64).
  const std::string& token_bytes(int32_t id) const;
  // The text of ids: their bytes joined; for BPE, the reference library's
  // decode (its decoder chain), which throws for an id past the tokenizer.
  std::string decode(std::span<const int32_t> ids) const;

  // The chat template the tokenizer came with, as JSON text:
  // {"chat_template": a string or a list of {name, template}, "special_tokens":
  // {"bos_token": ..., ...}}; empty when it has none.
  std::string chat_json() const;

 private:
  void set_special();

  TokenizerKind kind_;
  int64_t eos_id_;
  std::vector<std::string> token_bytes_;
  std::unordered_map<std::string, int32_t> char_to_id_;
  std::shared_ptr<const BpeModel> bpe_;  // Gpt2Bpe only; shared so Tokenizer stays cheap to copy
  std::string special_;                  // the end-of-text token's text, or empty
  std::shared_ptr<const HfTokenizer> hf_;  // Bpe only
  std::shared_ptr<const void> keep_alive_;  // owns the strings hf_ was built from (Bpe from a file)
  struct TrieCache {
    std::mutex mutex;
    std::shared_ptr<const TokenTrie> trie;
  };
  std::shared_ptr<TrieCache> trie_ = std::make_shared<TrieCache>();
};

}  // namespace mmgpt
