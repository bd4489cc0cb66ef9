#include "engine/generator.hpp"

#include <chrono>
#include <optional>

#include "engine/text_stream.hpp"

namespace mmgpt {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct Sequence {
  std::vector<int32_t> history;  // prompt (cropped) + generated
  KVCache cache;
  Sampler sampler;
  TextStream text;
  GenerationResult result;
  bool done = false;

  Sequence(const ModelConfig& c, const GenerateOptions& o) : cache(c, o.kv_dtype), sampler(o.sampling), text(o.stop) {}

  void finish(StopReason why) {
    done = true;
    result.reason = why;
  }
};

}  // namespace

std::vector<GenerationResult> run_generation(Executor& executor, const Tokenizer& tokenizer,
                                             const std::vector<std::vector<int32_t>>& prompts,
                                             const GenerateOptions& options, const TokenCallback& on_token) {
  const ModelConfig& config = executor.model().config();
  const size_t n_ctx = config.n_ctx;
  const size_t vocab = config.vocab_size;
  const int64_t eos = tokenizer.eos_id();

  std::vector<std::optional<Sequence>> seqs(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (prompts[i].empty()) throw Error("prompt " + std::to_string(i + 1) + " is empty: generation needs a token");
    seqs[i].emplace(config, options);
    const auto& p = prompts[i];
    seqs[i]->history.assign(p.end() - static_cast<std::ptrdiff_t>(std::min(p.size(), n_ctx)), p.end());
    seqs[i]->result.timings.prompt_tokens = seqs[i]->history.size();
  }
  std::vector<GenerationResult> results;
  if (options.max_new_tokens == 0 || prompts.empty()) {
    for (auto& s : seqs) results.push_back(std::move(s->result));
    return results;
  }

  // Each step: the rows of every unfinished sequence; first the prompts, then one token each.
  std::vector<SequenceStep> steps;
  std::vector<size_t> owner;  // sequence index of each step
  for (size_t i = 0; i < seqs.size(); ++i) {
    steps.push_back({seqs[i]->history, &seqs[i]->cache, 1});
    owner.push_back(i);
  }
  bool prefill = true;
  double prefill_seconds = 0.0, decode_seconds = 0.0;
  size_t decode_steps = 0;

  while (!steps.empty()) {
    const Clock::time_point t0 = Clock::now();
    std::span<const float> logits = executor.run(steps);
    (prefill ? prefill_seconds : decode_seconds) += seconds_since(t0);
    if (!prefill) ++decode_steps;
    prefill = false;

    for (size_t k = 0; k < owner.size(); ++k) {
      Sequence& s = *seqs[owner[k]];
      const int32_t token = s.sampler.next(logits.subspan(k * vocab, vocab), s.history);
      if (!options.ignore_eos && eos >= 0 && token == eos) {
        s.finish(StopReason::EndOfText);
        continue;
      }
      s.history.push_back(token);
      s.result.tokens.push_back(token);
      const std::string shown = s.text.push(tokenizer.token_bytes(token));
      const bool keep_going = !on_token || on_token(TokenEvent{owner[k], token, shown});
      if (s.text.stopped())
        s.finish(StopReason::StopString);
      else if (!keep_going)
        s.finish(StopReason::Callback);
      else if (s.result.tokens.size() == options.max_new_tokens)
        s.finish(StopReason::Length);
    }

    std::vector<SequenceStep> next;
    std::vector<size_t> next_owner;
    for (size_t i : owner) {
      Sequence& s = *seqs[i];
      if (s.done) continue;
      if (s.cache.length() < n_ctx) {
        next.push_back({std::span<const int32_t>(&s.history.back(), 1), &s.cache, 1});
      } else {
        s.cache.clear();  // slide: re-run the last n_ctx tokens at positions 0..n_ctx-1
        next.push_back({std::span<const int32_t>(s.history).last(n_ctx), &s.cache, 1});
      }
      next_owner.push_back(i);
    }
    steps = std::move(next);
    owner = std::move(next_owner);
  }

  for (size_t i = 0; i < seqs.size(); ++i) {
    Sequence& s = *seqs[i];
    const std::string rest = s.text.flush();
    if (!rest.empty() && on_token && s.result.reason != StopReason::Callback) on_token(TokenEvent{i, -1, rest});
    s.result.text = s.text.text();
    s.result.timings.prefill_seconds = prefill_seconds;
    s.result.timings.decode_seconds = decode_seconds;
    s.result.timings.decode_steps = decode_steps;
    results.push_back(std::move(s.result));
  }
  return results;
}

}  // namespace mmgpt
