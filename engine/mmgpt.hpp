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

#include "engine/model.hpp"
#include "engine/perplexity.hpp"
#include "engine/sampler.hpp"
#include "engine/tokenizer.hpp"
#include "formats/error.hpp"

namespace mmgpt {

struct GenerateOptions {
  size_t max_new_tokens = 256;
  SamplingOptions sampling;              // greedy or temperature / top-k / top-p / min-p / repetition penalty; seed
  bool ignore_eos = false;               // keep going past the end-of-text token
  std::vector<std::string> stop;         // stop at any of these strings (matched across tokens; not emitted)
  DType kv_dtype = DType::F32;           // KV cache elements: f32, or bf16 / f16 (half the memory and cache traffic)
};

enum class StopReason { Length, EndOfText, StopString, Callback };

// One generated token, as the callback sees it.
struct TokenEvent {
  size_t sequence = 0;    // index of the prompt in a batch (0 for a single prompt)
  int32_t token = 0;      // -1 for the last event of a sequence that only releases held-back text
  std::string_view text;  // bytes that became printable with this token: never half a UTF-8
                          // character, never part of a stop string; may be empty
};
// Return false to stop that sequence.
using TokenCallback = std::function<bool(const TokenEvent&)>;

struct GenerationTimings {
  double prefill_seconds = 0.0;  // running the prompt (up to the first token's logits)
  double decode_seconds = 0.0;   // the remaining steps
  size_t prompt_tokens = 0;
  size_t decode_steps = 0;       // forward steps after the prefill
};

struct GenerationResult {
  std::vector<int32_t> tokens;   // generated ids (an end-of-text token that stopped generation is not included)
  std::string text;              // their bytes, cut before a stop string
  StopReason reason = StopReason::Length;
  GenerationTimings timings;
};

class LanguageModel {
 public:
  static LanguageModel load(const std::string& path);

  const ModelConfig& config() const { return model_->config(); }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const Model& model() const { return *model_; }
  std::shared_ptr<const Model> shared_model() const { return model_; }

  // Text -> ids. With allow_special, "<|endoftext|>" is the end-of-text token.
  std::vector<int32_t> encode(std::string_view text, bool allow_special = true) const;
  std::string decode(std::span<const int32_t> ids) const { return tokenizer_->decode(ids); }

  // The logits after every token, row-major [ids.size(), vocab]. At most n_ctx ids.
  std::vector<float> logits(std::span<const int32_t> ids) const;

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
  LanguageModel(std::shared_ptr<const Model> model, std::shared_ptr<const Tokenizer> tokenizer)
      : model_(std::move(model)), tokenizer_(std::move(tokenizer)) {}
  std::shared_ptr<const Model> model_;
  std::shared_ptr<const Tokenizer> tokenizer_;
};

}  // namespace mmgpt
