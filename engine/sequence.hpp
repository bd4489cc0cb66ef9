#pragma once
// One sequence being generated: its tokens, KV cache, sampler and text
// stream, and what it feeds the executor next. run_generation (a fixed batch)
// and the Scheduler (continuous batching) step sequences through this one
// state machine, so a sequence's tokens never depend on which of them ran it,
// nor on how its prompt was split into steps: rows of a step are computed
// independently, and a prefill in chunks gives the bits of a whole one.
//
// Past the context length the window slides as nanoGPT's generate() does:
// the model sees the last n_ctx tokens at positions 0..n_ctx-1, so each step
// past the context re-runs the window from an empty cache.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/executor.hpp"
#include "engine/generation.hpp"
#include "engine/kv_cache.hpp"
#include "engine/sampler.hpp"
#include "text/grammar.hpp"
#include "text/text_stream.hpp"
#include "text/tokenizer.hpp"

namespace mmgpt {

class GenerationSequence {
 public:
  // `prompt`: 1..n_ctx tokens. `cache` may already hold the keys and values
  // of a prefix of the prompt (cached_tokens of them, fewer than the prompt's).
  GenerationSequence(const ModelConfig& config, const GenerateOptions& options, std::span<const int32_t> prompt,
                     KVCache cache, size_t cached_tokens = 0);

  // The rows of this sequence's next step: at most max_rows prompt tokens not
  // yet in the cache, or the last generated token. With prompt_logprobs, a
  // prompt step asks for the logits of all its rows (at most
  // kScoredRowsPerStep of them).
  SequenceStep next_step(size_t max_rows = SIZE_MAX);
  // Whether the step planned by next_step() reaches the end of the known
  // tokens, so that its logits pick the next token.
  bool samples() const { return planned_end_ == history_.size(); }
  size_t pending_tokens() const { return history_.size() - (window_start_ + cache_.length()); }

  // What happened after a step that sampled.
  struct Sampled {
    int32_t token = -1;  // -1: the end-of-text token ended the sequence
    std::string text;    // the bytes that became printable (see TokenEvent)
  };
  // After the planned step ran: samples the next token from `logits` (the
  // step's logit rows, as many as next_step() asked for; the last one picks)
  // when samples(). Ends the sequence at end of text, a
  // stop string or max_new_tokens; finish() ends it for other reasons (or
  // changes why it ended, unless a stop string ended it).
  std::optional<Sampled> advance(std::span<const float> logits, const Tokenizer& tokenizer);
  void finish(StopReason why);
  bool done() const { return done_; }
  // Text held back so far (an incomplete character, a partial stop string);
  // called once the sequence is done. Completes result().text.
  std::string flush();

  const GenerationResult& result() const { return result_; }
  GenerationResult& result() { return result_; }
  // Every token so far, prompt and generated; the cache holds the first
  // cached_prefix() of them at positions 0.. (none once the window slid).
  const std::vector<int32_t>& tokens() const { return history_; }
  size_t cached_prefix() const { return window_start_ == 0 ? cache_.length() : 0; }
  KVCache take_cache() { return std::move(cache_); }

 private:
  size_t n_ctx_;
  size_t max_new_tokens_;
  bool ignore_eos_;
  bool logprobs_, prompt_logprobs_;
  size_t top_logprobs_;
  size_t prompt_size_;
  std::vector<int32_t> history_;
  KVCache cache_;
  Sampler sampler_;
  TextStream text_;
  GenerationResult result_;
  size_t window_start_ = 0;  // history_ index at cache position 0
  size_t planned_end_ = 0;   // history_ index just past the planned step
  size_t planned_logit_rows_ = 1;
  std::shared_ptr<const Grammar> grammar_;
  std::shared_ptr<const TokenTrie> trie_;  // the tokenizer's, taken on the first sampling step
  std::optional<GrammarMatcher> matcher_;  // made then too
  std::vector<float> masked_;
  bool done_ = false;
};

}  // namespace mmgpt
