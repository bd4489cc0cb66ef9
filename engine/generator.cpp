#include "engine/generator.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>

#include "engine/sequence.hpp"

namespace mmgpt {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

std::vector<GenerationResult> run_generation(Executor& executor, const Tokenizer& tokenizer,
                                             const std::vector<std::vector<int32_t>>& prompts,
                                             const GenerateOptions& options, const TokenCallback& on_token) {
  const ModelConfig& config = executor.model().config();
  const size_t n_ctx = config.n_ctx;
  const size_t vocab = config.vocab_size;

  std::vector<std::optional<GenerationSequence>> seqs(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (prompts[i].empty()) throw Error("prompt " + std::to_string(i + 1) + " is empty: generation needs a token");
    const auto& p = prompts[i];
    seqs[i].emplace(config, options, std::span<const int32_t>(p).last(std::min(p.size(), n_ctx)),
                    KVCache(config, options.kv_dtype));
  }

  // Each step: the rows of every unfinished sequence; first the prompts (whole,
  // or in chunks of prefill_chunk), then one token each.
  const size_t chunk = options.prefill_chunk ? options.prefill_chunk : SIZE_MAX;
  std::vector<SequenceStep> steps;
  std::vector<size_t> owner;  // sequence index of each step
  bool prefill = true;        // until every sequence has sampled its first token
  double prefill_seconds = 0.0, decode_seconds = 0.0;
  size_t decode_steps = 0;
  for (;;) {
    if (options.interrupt && options.interrupt()) {
      for (auto& s : seqs)
        if (!s->done()) s->finish(StopReason::Callback);
      break;
    }
    steps.clear();
    owner.clear();
    for (size_t i = 0; i < seqs.size(); ++i)
      if (!seqs[i]->done()) {
        steps.push_back(seqs[i]->next_step(chunk));
        owner.push_back(i);
      }
    if (steps.empty()) break;

    const Clock::time_point t0 = Clock::now();
    std::span<const float> logits = executor.run(steps);
    (prefill ? prefill_seconds : decode_seconds) += seconds_since(t0);
    if (!prefill) ++decode_steps;

    size_t row = 0;  // the first logit row of step k
    for (size_t k = 0; k < owner.size(); ++k) {
      GenerationSequence& s = *seqs[owner[k]];
      const std::span<const float> rows = logits.subspan(row * vocab, steps[k].logit_rows * vocab);
      row += steps[k].logit_rows;
      const std::optional<GenerationSequence::Sampled> made = s.advance(rows, tokenizer);
      if (!made || made->token < 0) continue;
      if (on_token && !on_token(TokenEvent{owner[k], made->token, made->text})) s.finish(StopReason::Callback);
    }
    prefill =
        std::any_of(seqs.begin(), seqs.end(), [](const auto& s) { return !s->done() && s->result().tokens.empty(); });
  }

  std::vector<GenerationResult> results;
  for (size_t i = 0; i < seqs.size(); ++i) {
    GenerationSequence& s = *seqs[i];
    const std::string rest = s.flush();
    if (!rest.empty() && on_token && s.result().reason != StopReason::Callback) on_token(TokenEvent{i, -1, rest});
    GenerationResult& r = s.result();
    r.timings.prefill_seconds = prefill_seconds;
    r.timings.decode_seconds = decode_seconds;
    r.timings.decode_steps = decode_steps;
    results.push_back(std::move(r));
  }
  return results;
}

}  // namespace mmgpt
