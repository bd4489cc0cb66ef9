#include "engine/mmgpt.hpp"

#include <chrono>
#include <cstdio>

#include "engine/executor.hpp"
#include "engine/generator.hpp"

namespace mmgpt {

LanguageModel LanguageModel::load(const std::string& path) {
  std::shared_ptr<const Model> model = Model::load(path);
  for (const std::string& notice : model->notices()) std::fprintf(stderr, "mmgpt: %s\n", notice.c_str());
  const auto start = std::chrono::steady_clock::now();
  const StoredBpeTables* stored = model->file().bpe_tables();
  // With stored tables the tokenizer section's strings are never copied out.
  const StoredTokenizer& section = model->file().stored_tokenizer();
  auto tokenizer = section.kind == TokenizerKind::Bpe ? std::make_shared<const Tokenizer>(section, *stored, model, path)
                   : stored ? std::make_shared<const Tokenizer>(section.eos_id, *stored, model)
                            : std::make_shared<const Tokenizer>(model->tokenizer_data());
  const LoadTimes times{model->file().map_seconds(), model->file().validate_seconds(),
                        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()};
  return LanguageModel(std::move(model), std::move(tokenizer), times);
}

std::vector<int32_t> LanguageModel::encode(std::string_view text, bool allow_special, bool add_special) const {
  return tokenizer_->encode(text, allow_special, add_special);
}

std::vector<float> LanguageModel::logits(std::span<const int32_t> ids) const {
  if (ids.size() > config().n_ctx)
    throw Error(std::to_string(ids.size()) + " tokens exceed the context length " + std::to_string(config().n_ctx) +
                " of " + model_->file().path());
  Executor executor(model_);
  KVCache cache(config());
  std::span<const float> l = executor.run(ids, cache, ids.size());
  return {l.begin(), l.end()};
}

ScoreResult LanguageModel::score(std::span<const int32_t> context, std::span<const int32_t> continuation,
                                 size_t top_logprobs) const {
  const size_t n_ctx = config().n_ctx;
  if (context.empty()) throw Error("the context to score after is empty: give at least one token (a BOS, say)");
  if (continuation.empty()) throw Error("the continuation to score is empty");
  if (continuation.size() > n_ctx)
    throw Error("the continuation's " + std::to_string(continuation.size()) +
                " tokens exceed the context length " + std::to_string(n_ctx));
  check_top_logprobs(top_logprobs);
  std::vector<int32_t> all(context.begin(), context.end());
  all.insert(all.end(), continuation.begin(), continuation.end());
  for (int32_t id : all)
    if (id < 0 || static_cast<uint64_t>(id) >= config().vocab_size)
      throw Error("token id " + std::to_string(id) + " is outside the vocabulary (0.." +
                  std::to_string(config().vocab_size - 1) + ")");
  // The model reads every token but the last; row p predicts token p + 1.
  const size_t start = all.size() > n_ctx + 1 ? all.size() - n_ctx - 1 : 0;
  const size_t end = all.size() - 1, first_scored = all.size() - continuation.size() - 1;
  Executor executor(model_);
  KVCache cache(config());
  ScoreResult out;
  const size_t vocab = config().vocab_size;
  for (size_t a = start; a < end;) {
    // Context rows run without logits; continuation rows in chunks with theirs.
    const size_t b = a < first_scored ? first_scored : std::min(end, a + kScoredRowsPerStep);
    const size_t rows = a < first_scored ? 1 : b - a;
    std::span<const float> logits =
        executor.run(std::span<const int32_t>(all).subspan(a, b - a), cache, rows);
    if (a >= first_scored)
      for (size_t j = 0; j < rows; ++j) {
        PositionLogprobs p = position_logprobs(logits.subspan(j * vocab, vocab), all[a + j + 1], top_logprobs);
        out.logprob += p.logprob;
        out.greedy = out.greedy && p.greedy;
        out.tokens.push_back(std::move(p));
      }
    a = b;
  }
  return out;
}

GenerationResult LanguageModel::generate(std::span<const int32_t> prompt, const GenerateOptions& options,
                                         const TokenCallback& on_token) const {
  return std::move(generate_batch({std::vector<int32_t>(prompt.begin(), prompt.end())}, options, on_token)[0]);
}

std::vector<GenerationResult> LanguageModel::generate_batch(const std::vector<std::vector<int32_t>>& prompts,
                                                            const GenerateOptions& options,
                                                            const TokenCallback& on_token) const {
  Executor executor(model_);
  return run_generation(executor, *tokenizer_, prompts, options, on_token);
}

PerplexityResult LanguageModel::perplexity(std::span<const int32_t> tokens, const PerplexityOptions& options,
                                           const PerplexityProgress& progress) const {
  Executor executor(model_);  // per call: its own activation arena, so concurrent calls are safe
  return evaluate_perplexity(executor, tokens, options, progress);
}

PerplexityResult LanguageModel::perplexity(std::span<const int32_t> tokens, const PerplexityOptions& options,
                                           const LanguageModel& base, DivergenceResult& divergence,
                                           const PerplexityProgress& progress) const {
  Executor executor(model_), base_executor(base.model_);
  return evaluate_perplexity(executor, base_executor, tokens, options, divergence, progress);
}

}  // namespace mmgpt
