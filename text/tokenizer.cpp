#include "text/tokenizer.hpp"

#include <algorithm>
#include <cstdio>
#include <mutex>

#include "text/bpe.hpp"
#include "text/grammar.hpp"
#include "text/utf8.hpp"
#include "text/hf_tokenizer.hpp"
#include "formats/bpe_table.hpp"
#include "formats/error.hpp"

namespace mmgpt {

namespace {

// Decodes a UTF-8 string into code points; returns false on malformed input.
bool decode_utf8(std::string_view s, std::vector<uint32_t>& out) {
  out.clear();
  for (size_t i = 0; i < s.size();) {
    size_t n = utf8::sequence_length(static_cast<unsigned char>(s[i]));
    if (n == 0 || i + n > s.size()) return false;
    uint32_t cp = n == 1 ? static_cast<unsigned char>(s[i]) : (static_cast<unsigned char>(s[i]) & (0x7F >> n));
    for (size_t k = 1; k < n; ++k) {
      unsigned char c = static_cast<unsigned char>(s[i + k]);
      if ((c & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (c & 0x3F);
    }
    out.push_back(cp);
    i += n;
  }
  return true;
}

}  // namespace

// GPT-2's only special token, end of text: its text, matched as raw bytes.
void Tokenizer::set_special() {
  if (eos_id_ >= 0 && static_cast<uint64_t>(eos_id_) < token_bytes_.size())
    special_ = token_bytes_[static_cast<size_t>(eos_id_)];
}

namespace {

std::shared_ptr<const HfTokenizer> make_hf(std::span<const std::string_view> tokens,
                                           std::span<const std::pair<std::string_view, std::string_view>> merges,
                                           std::span<const int32_t> merge_ranks, std::string_view pipeline,
                                           const std::string& where, const StoredBpeTables* tables = nullptr) {
  return std::make_shared<const HfTokenizer>(tokens, merges, merge_ranks, HfTokenizer::JsonText{pipeline}, where,
                                             tables);
}

}  // namespace

Tokenizer::Tokenizer(const StoredTokenizer& stored, const StoredBpeTables& tables,
                     std::shared_ptr<const void> keep_alive, const std::string& where)
    : kind_(TokenizerKind::Bpe), eos_id_(stored.eos_id), keep_alive_(std::move(keep_alive)) {
  if (stored.kind != TokenizerKind::Bpe) throw Error(where + ": the tokenizer is not a tokenizer.json BPE");
  hf_ = make_hf(stored.tokens, stored.merges, {}, stored.pipeline, where, &tables);
}

bool Tokenizer::is_end(int32_t id) const { return (eos_id_ >= 0 && id == eos_id_) || (hf_ && hf_->is_end(id)); }

std::string Tokenizer::chat_json() const { return hf_ ? hf_->chat_json() : std::string(); }

std::vector<int32_t> Tokenizer::special_ids() const {
  std::vector<int32_t> ids = hf_ ? hf_->special_ids() : std::vector<int32_t>{};
  if (eos_id_ >= 0) ids.push_back(static_cast<int32_t>(eos_id_));
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

std::shared_ptr<const TokenTrie> Tokenizer::token_trie(size_t vocab) const {
  std::lock_guard lock(trie_->mutex);
  if (!trie_->trie || trie_->trie->vocab != vocab) trie_->trie = TokenTrie::build(*this, vocab);
  return trie_->trie;
}

size_t Tokenizer::size() const { return hf_ ? hf_->size() : token_bytes_.size(); }

Tokenizer::Tokenizer(const TokenizerData& data) : kind_(data.kind), eos_id_(data.eos_id) {
  if (kind_ == TokenizerKind::Bpe) {
    std::vector<std::string_view> tokens(data.tokens.begin(), data.tokens.end());
    std::vector<std::pair<std::string_view, std::string_view>> merges(data.merges.begin(), data.merges.end());
    hf_ = make_hf(tokens, merges, data.merge_ranks, data.pipeline, "the tokenizer");
    return;
  }
  token_bytes_.reserve(data.tokens.size());
  if (kind_ == TokenizerKind::Gpt2Bpe) {
    for (const std::string& tok : data.tokens) token_bytes_.push_back(bpe_token_bytes(tok));
    bpe_ = std::make_shared<const BpeModel>(data.tokens, data.merges);
    set_special();
  } else {
    token_bytes_ = data.tokens;
    for (size_t i = 0; i < token_bytes_.size(); ++i) char_to_id_.emplace(token_bytes_[i], static_cast<int32_t>(i));
  }
}

Tokenizer::Tokenizer(int64_t eos_id, const StoredBpeTables& stored, std::shared_ptr<const void> keep_alive)
    : kind_(TokenizerKind::Gpt2Bpe), eos_id_(eos_id) {
  token_bytes_.reserve(stored.token_count);
  for (uint64_t i = 0; i < stored.token_count; ++i) token_bytes_.emplace_back(stored.token_bytes(i));
  bpe_ = std::make_shared<const BpeModel>(stored.table, std::move(keep_alive));
  set_special();
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool allow_special, bool add_special) const {
  if (kind_ == TokenizerKind::None) throw Error("the model has no tokenizer: give the prompt as token ids with --ids");
  std::vector<int32_t> ids;
  if (hf_) {
    hf_->encode(text, allow_special, add_special, ids);
    return ids;
  }
  if (kind_ == TokenizerKind::Gpt2Bpe) {
    // Text between special tokens is pre-tokenized on its own: no piece spans one.
    size_t start = 0;
    if (allow_special && !special_.empty()) {
      for (size_t at = text.find(special_); at != std::string_view::npos; at = text.find(special_, start)) {
        bpe_->encode(text.substr(start, at - start), ids);
        ids.push_back(static_cast<int32_t>(eos_id_));
        start = at + special_.size();
      }
    }
    bpe_->encode(text.substr(start), ids);
    return ids;
  }
  for (size_t i = 0; i < text.size();) {
    size_t n = utf8::sequence_length(static_cast<unsigned char>(text[i]));
    if (n == 0 || i + n > text.size()) throw Error("prompt is not valid UTF-8 at byte " + std::to_string(i));
    std::string ch(text.substr(i, n));
    auto it = char_to_id_.find(ch);
    if (it == char_to_id_.end()) {
      std::vector<uint32_t> cp;
      char code[16] = "?";
      if (decode_utf8(ch, cp) && cp.size() == 1) std::snprintf(code, sizeof code, "U+%04X", cp[0]);
      std::string shown = (ch == "\n") ? "\\n" : (ch == "\t") ? "\\t" : ch;
      throw Error("prompt character '" + shown + "' (" + code + ") at byte " + std::to_string(i) +
                  " is not in the model's vocabulary");
    }
    ids.push_back(it->second);
    i += n;
  }
  return ids;
}

const std::string& Tokenizer::token_bytes(int32_t id) const {
  if (hf_) return hf_->token_bytes(id);
  static const std::string empty;
  if (id < 0 || static_cast<size_t>(id) >= token_bytes_.size()) return empty;
  return token_bytes_[static_cast<size_t>(id)];
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  if (hf_) return hf_->decode(ids);
  std::string out;
  for (int32_t id : ids) out += token_bytes(id);
  return out;
}

}  // namespace mmgpt
