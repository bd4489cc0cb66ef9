#pragma once
// The tokenizer of a Hugging Face tokenizer.json with a BPE model, computed as
// the reference library (Rust `tokenizers`) computes it:
//   text -> split out the added tokens (longest match first; lstrip, rstrip,
//   single_word) -> normalize each remaining piece -> split out the added
//   tokens marked `normalized` -> pre-tokenize -> BPE each piece -> (when
//   asked) the post-processor's special tokens.
// Decoding runs the file's decoder chain over the tokens' spellings.
//
// Two spaces a BPE model can work in, both handled by the same merge code
// (text/bpe.hpp):
//   byte-level (a ByteLevel pre-tokenizer: GPT-2, Llama 3, Qwen, SmolLM2,
//     Pythia): the vocabulary spells each byte as one character, so the model
//     works on raw bytes and every byte has a token;
//   text (SentencePiece-style: Llama 2, Mistral, Gemma): the model starts from
//     the normalized text's characters (with its "▁" for spaces); a character
//     outside the vocabulary becomes its <0xNN> byte tokens (byte_fallback)
//     or the unknown token.
// What the reference library supports and this does not (WordPiece, Unigram,
// other pre-tokenizers, normalizers or decoders) is refused by name.
#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace mmgpt {

struct StoredBpeTables;
namespace hf_parts {
struct ScannedAdded;
}  // namespace hf_parts

class HfTokenizer {
 public:
  // tokens: id -> its spelling (the model vocabulary's, or an added token's
  // content); merges in rank order, with their ranks when they share some
  // (formats/bpe_table.hpp; empty: a rule's rank is its index); pipeline: tokenizer.json without the
  // model's vocab and merges (what tokenizer_json.hpp stores). Throws
  // mmgpt::Error naming `where` and the part that is wrong or unsupported.
  // With `stored` (a file's tables, table kind 2), the vocabulary, its index
  // and the merges are searched in place (merges is then unused); the
  // caller keeps the file mapped, and `tokens` alive, while this lives.
  HfTokenizer(std::span<const std::string_view> tokens,
              std::span<const std::pair<std::string_view, std::string_view>> merges,
              std::span<const int32_t> merge_ranks, const nlohmann::json& pipeline, const std::string& where,
              const StoredBpeTables* stored = nullptr);
  // The same from the pipeline's JSON text (a file's pipeline section, or
  // TokenizerData::pipeline); text that is not JSON is refused, naming `where`.
  struct JsonText {
    std::string_view text;
  };
  HfTokenizer(std::span<const std::string_view> tokens,
              std::span<const std::pair<std::string_view, std::string_view>> merges,
              std::span<const int32_t> merge_ranks, JsonText pipeline, const std::string& where,
              const StoredBpeTables* stored = nullptr);
  ~HfTokenizer();
  HfTokenizer(const HfTokenizer&) = delete;
  HfTokenizer& operator=(const HfTokenizer&) = delete;

  // The reference library's encode(text, add_special_tokens = add_special).
  // allow_special = false leaves the special added tokens' text as plain
  // text (the reference's encode_special_tokens); the other added tokens
  // still split it. Throws mmgpt::Error for text that is not valid UTF-8.
  void encode(std::string_view text, bool allow_special, bool add_special, std::vector<int32_t>& out) const;

  // The reference library's decode(ids, skip_special_tokens = false): the
  // decoder chain over the tokens' spellings. Throws mmgpt::Error naming an
  // id the tokenizer does not have.
  std::string decode(std::span<const int32_t> ids) const;

  // The bytes token `id` stands for on its own, for streaming: byte-level
  // tokens' bytes, "▁" as a space and <0xNN> as its byte in text space,
  // added tokens as their content. Empty past the tokenizer's last id.
  const std::string& token_bytes(int32_t id) const;

  size_t size() const;
  // What the file's tables store (formats/mmgpt_file.hpp): each byte's token,
  // and token id's key in the model's space (empty outside the model).
  std::array<int32_t, 256> byte_ids() const;
  std::string key_of(int32_t id) const;
  // The pipeline's "chat" entry as JSON text ({"chat_template": ...,
  // "special_tokens": {...}}), or empty when the tokenizer has no template.
  const std::string& chat_json() const;
  // Whether `id` is one of the tokens that end a turn (besides the end token).
  bool is_end(int32_t id) const;
  // The special added tokens' ids, sorted.
  std::vector<int32_t> special_ids() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  // Both constructors' work; `scanned`: the added tokens, when read from the
  // text apart from `pipeline` (which then holds none).
  void init(std::span<const std::string_view> tokens,
            std::span<const std::pair<std::string_view, std::string_view>> merges,
            std::span<const int32_t> merge_ranks, const nlohmann::json& pipeline, const std::string& where,
            const StoredBpeTables* stored,
            const std::vector<hf_parts::ScannedAdded>* scanned);
};

}  // namespace mmgpt
