#include "engine/sequence.hpp"

#include <algorithm>

namespace mmgpt {

GenerationSequence::GenerationSequence(const ModelConfig& config, const GenerateOptions& options,
                                       std::span<const int32_t> prompt, KVCache cache, size_t cached_tokens)
    : n_ctx_(config.n_ctx),
      max_new_tokens_(options.max_new_tokens),
      ignore_eos_(options.ignore_eos),
      history_(prompt.begin(), prompt.end()),
      cache_(std::move(cache)),
      sampler_(options.sampling),
      text_(options.stop) {
  if (prompt.empty()) throw Error("the prompt is empty: generation needs a token");
  if (prompt.size() > n_ctx_)
    throw Error("the prompt has " + std::to_string(prompt.size()) + " tokens, more than the context length " +
                std::to_string(n_ctx_));
  if (cached_tokens >= prompt.size())
    throw Error("a cached prefix must leave at least one prompt token to run");
  cache_.set_length(cached_tokens);
  result_.timings.prompt_tokens = prompt.size();
  if (max_new_tokens_ == 0) finish(StopReason::Length);
}

SequenceStep GenerationSequence::next_step(size_t max_rows) {
  size_t pending = pending_tokens();
  if (cache_.length() + pending > n_ctx_) {  // slide: re-run the last n_ctx tokens at positions 0..n_ctx-1
    cache_.clear();
    window_start_ = history_.size() - n_ctx_;
    pending = n_ctx_;
  }
  const size_t begin = window_start_ + cache_.length();
  const size_t rows = std::min(pending, std::max<size_t>(max_rows, 1));
  planned_end_ = begin + rows;
  return {std::span<const int32_t>(history_).subspan(begin, rows), &cache_, 1};
}

std::optional<GenerationSequence::Sampled> GenerationSequence::advance(std::span<const float> logits,
                                                                       const Tokenizer& tokenizer) {
  if (!samples()) return std::nullopt;
  const int32_t token = sampler_.next(logits, history_);
  if (!ignore_eos_ && tokenizer.is_end(token)) {
    finish(StopReason::EndOfText);
    return Sampled{};
  }
  history_.push_back(token);
  result_.tokens.push_back(token);
  Sampled out{token, text_.push(tokenizer.token_bytes(token))};
  if (text_.stopped())
    finish(StopReason::StopString);
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
