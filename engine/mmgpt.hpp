#pragma once
// mmgpt's embedding API: everything a program needs to run a converted model.
//
//   #include "engine/mmgpt.hpp"
//   auto lm = mmgpt::LanguageModel::load("model.mmgpt");        // maps + validates, no copy
//   mmgpt::GenerateOptions opt;                                  // sampling, stops, limits
//   opt.max_new_tokens = 100;
//   lm.generate(lm.encode("ROMEO:"), opt, [](const mmgpt::TokenEvent& e) {
//     std::cout << e.text << std::flush;                         // UTF-8-safe text as it is made
//     return true;                                               // false stops early
//   });
//
// A LanguageModel is cheap to copy (it shares the mapped weights) and its
// const methods may be called from many threads at once: each call has its
// own activation buffers and KV cache, and the weights are read-only.
// Errors are thrown as mmgpt::Error with a one-line message.
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/generation.hpp"
#include "engine/model.hpp"
#include "engine/perplexity.hpp"
#include "text/tokenizer.hpp"
#include "formats/error.hpp"

namespace mmgpt {

// Where LanguageModel::load's wall time went, in seconds.
struct LoadTimes {
  double map = 0;        // opening and mapping the file
  double validate = 0;   // parsing and checking every section
  double tokenizer = 0;  // building the tokenizer's tables
};

// What LanguageModel::score gives: lm-evaluation-harness's loglikelihood.
struct ScoreResult {
  double logprob = 0.0;  // the sum of the continuation tokens' log-probabilities
  bool greedy = true;    // every continuation token is the most likely one at its position
  std::vector<PositionLogprobs> tokens;  // each continuation token's, in order
};

class LanguageModel {
 public:
  static LanguageModel load(const std::string& path);
  const LoadTimes& load_times() const { return load_times_; }

  const ModelConfig& config() const { return model_->config(); }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const Model& model() const { return *model_; }
  std::shared_ptr<const Model> shared_model() const { return model_; }

  // Text -> ids. With allow_special, "<|endoftext|>" is the end-of-text token.
  // add_special: what the tokenizer's post-processor adds (a tokenizer.json's BOS, say).
  std::vector<int32_t> encode(std::string_view text, bool allow_special = true, bool add_special = false) const;
  std::string decode(std::span<const int32_t> ids) const { return tokenizer_->decode(ids); }

  // The logits after every token, row-major [ids.size(), vocab]. At most n_ctx ids.
  std::vector<float> logits(std::span<const int32_t> ids) const;

  // How likely `continuation` is after `context` (both at least one token):
  // the log-probability of each continuation token given everything before
  // it, with the top_logprobs (at most kMaxTopLogprobs) most likely tokens at
  // each position. When both exceed n_ctx + 1 tokens the context is cut from
  // the left, as lm-evaluation-harness does; the continuation must fit in n_ctx.
  ScoreResult score(std::span<const int32_t> context, std::span<const int32_t> continuation,
                    size_t top_logprobs = 0) const;

  // Generates a continuation of `prompt` (cropped to its last n_ctx tokens).
  GenerationResult generate(std::span<const int32_t> prompt, const GenerateOptions& options,
                            const TokenCallback& on_token = {}) const;

  // Generates continuations of several prompts together (batched matmuls);
  // each result is what generate() gives for that prompt alone.
  std::vector<GenerationResult> generate_batch(const std::vector<std::vector<int32_t>>& prompts,
                                               const GenerateOptions& options,
                                               const TokenCallback& on_token = {}) const;

  // Mean negative log-likelihood and perplexity of `tokens` over sliding windows.
  PerplexityResult perplexity(std::span<const int32_t> tokens, const PerplexityOptions& options,
                              const PerplexityProgress& progress = {}) const;
  // The same, and how far this model's next-token distributions are from
  // `base`'s on the same windows (e.g. a quantized model against its f32 original).
  PerplexityResult perplexity(std::span<const int32_t> tokens, const PerplexityOptions& options,
                              const LanguageModel& base, DivergenceResult& divergence,
                              const PerplexityProgress& progress = {}) const;

 private:
  LanguageModel(std::shared_ptr<const Model> model, std::shared_ptr<const Tokenizer> tokenizer, LoadTimes times)
      : model_(std::move(model)), tokenizer_(std::move(tokenizer)), load_times_(times) {}
  std::shared_ptr<const Model> model_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  LoadTimes load_times_;
};

}  // namespace mmgpt
