#include "engine/sequence.hpp"

#include <algorithm>
#include <limits>

namespace mmgpt {

GenerationSequence::GenerationSequence(const ModelConfig& config, const GenerateOptions& options,
                                       std::span<const int32_t> prompt, KVCache cache, size_t cached_tokens)
    : n_ctx_(config.n_ctx),
      max_new_tokens_(options.max_new_tokens),
      ignore_eos_(options.ignore_eos),
      logprobs_(options.logprobs),
      prompt_logprobs_(options.prompt_logprobs),
      top_logprobs_(options.top_logprobs),
      prompt_size_(prompt.size()),
      history_(prompt.begin(), prompt.end()),
      cache_(std::move(cache)),
      sampler_(options.sampling),
      text_(options.stop),
      grammar_(options.grammar) {
  if (prompt.empty()) throw Error("the prompt is empty: generation needs a token");
  if (prompt.size() > n_ctx_)
    throw Error("the prompt has " + std::to_string(prompt.size()) + " tokens, more than the context length " +
                std::to_string(n_ctx_));
  if (cached_tokens >= prompt.size())
    throw Error("a cached prefix must leave at least one prompt token to run");
  check_top_logprobs(top_logprobs_);
  if (prompt_logprobs_ && cached_tokens > 0) throw Error("the prompt's log-probabilities need the whole prompt run");
  cache_.set_length(cached_tokens);
  result_.timings.prompt_tokens = prompt.size();
  // Nothing to generate: done at once, unless there is a prompt to score.
  if (max_new_tokens_ == 0 && !(prompt_logprobs_ && prompt.size() > 1)) finish(StopReason::Length);
}

SequenceStep GenerationSequence::next_step(size_t max_rows) {
  size_t pending = pending_tokens();
  if (cache_.length() + pending > n_ctx_) {  // slide: re-run the last n_ctx tokens at positions 0..n_ctx-1
    cache_.clear();
    window_start_ = history_.size() - n_ctx_;
    pending = n_ctx_;
  }
  const size_t begin = window_start_ + cache_.length();
  const bool scored = prompt_logprobs_ && begin < prompt_size_;
  if (scored) max_rows = std::min(max_rows, kScoredRowsPerStep);
  const size_t rows = std::min(pending, std::max<size_t>(max_rows, 1));
  planned_end_ = begin + rows;
  planned_logit_rows_ = scored ? rows : 1;
  return {std::span<const int32_t>(history_).subspan(begin, rows), &cache_, planned_logit_rows_};
}

std::optional<GenerationSequence::Sampled> GenerationSequence::advance(std::span<const float> logits,
                                                                       const Tokenizer& tokenizer) {
  const size_t vocab = logits.size() / planned_logit_rows_;
  if (prompt_logprobs_) {
    // Row j is position planned_end_ - rows + j, which predicts the token after it.
    const size_t first = planned_end_ - planned_logit_rows_;
    for (size_t j = 0; j < planned_logit_rows_; ++j)
      if (first + j + 1 < prompt_size_)
        result_.prompt_logprobs.push_back(
            position_logprobs(logits.subspan(j * vocab, vocab), history_[first + j + 1], top_logprobs_));
  }
  if (!samples()) return std::nullopt;
  logits = logits.subspan((planned_logit_rows_ - 1) * vocab, vocab);
  if (max_new_tokens_ == 0) {  // the prompt was only scored
    finish(StopReason::Length);
    return std::nullopt;
  }
  std::span<const float> sampled_from = logits;
  if (grammar_) {  // only what the grammar allows: the others' logits are -infinity
    if (!matcher_) {
      trie_ = tokenizer.token_trie(logits.size());
      matcher_.emplace(grammar_, trie_);
    }
    masked_.assign(logits.begin(), logits.end());
    matcher_->mask(masked_);
    if (ignore_eos_)  // no end token then: the grammar's end ends the sequence
      for (int32_t id : trie_->end_tokens) masked_[static_cast<size_t>(id)] = -std::numeric_limits<float>::infinity();
    sampled_from = masked_;
  }
  const int32_t token = sampler_.next(sampled_from, history_);
  if (!ignore_eos_ && tokenizer.is_end(token)) {
    finish(StopReason::EndOfText);
    return Sampled{};
  }
  if (logprobs_) result_.logprobs.push_back(position_logprobs(logits, token, top_logprobs_));
  history_.push_back(token);
  result_.tokens.push_back(token);
  Sampled out{token, text_.push(tokenizer.token_bytes(token))};
  bool grammar_done = false;
  if (matcher_) {
    const std::string& bytes = tokenizer.token_bytes(token);
    if (!matcher_->accept(std::span<const char>(bytes.data(), bytes.size())))
      throw Error("token " + std::to_string(token) + " was sampled outside the grammar");
    // Nothing may follow, or the output is whole and the vocabulary has no end token to say so.
    grammar_done = matcher_->finished() ||
                   (matcher_->complete() && (ignore_eos_ || trie_->end_tokens.empty()));
  }
  if (text_.stopped())
    finish(StopReason::StopString);
  else if (grammar_done)
    finish(StopReason::EndOfText);
  else if (result_.tokens.size() >= max_new_tokens_)
    finish(StopReason::Length);
  return out;
}

void GenerationSequence::finish(StopReason why) {
  if (done_ && result_.reason == StopReason::StopString) return;
  done_ = true;
  result_.reason = why;
}

std::string GenerationSequence::flush() {
  std::string rest = text_.flush();
  result_.text = text_.text();
  return rest;
}

}  // namespace mmgpt
