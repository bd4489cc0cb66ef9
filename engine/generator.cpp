#include "engine/generator.hpp"

#include "formats/error.hpp"

namespace mmgpt {

std::vector<int32_t> generate(Executor& executor, std::span<const int32_t> prompt, const GenerateOptions& options,
                              const TokenCallback& on_token) {
  const size_t n_ctx = executor.model().config().n_ctx;
  if (prompt.empty()) throw Error("the prompt is empty: generation needs at least one token");
  if (prompt.size() > n_ctx)
    throw Error("the prompt has " + std::to_string(prompt.size()) + " tokens, more than the context length " +
                std::to_string(n_ctx));

  KVCache cache(executor.model().config());
  Sampler sampler(options.sampling);
  std::vector<int32_t> history(prompt.begin(), prompt.end());
  std::vector<int32_t> generated;
  if (options.max_new_tokens == 0) return generated;

  std::span<const float> logits = executor.run(history, cache);
  for (size_t step = 0; step < options.max_new_tokens; ++step) {
    const int32_t token = sampler.next(logits);
    if (!options.ignore_eos && options.eos_id >= 0 && token == options.eos_id) break;
    history.push_back(token);
    generated.push_back(token);
    if (on_token && !on_token(token)) break;
    if (step + 1 == options.max_new_tokens) break;

    if (cache.length() < n_ctx) {
      logits = executor.run(std::span<const int32_t>(&history.back(), 1), cache);
    } else {
      cache.clear();
      logits = executor.run(std::span<const int32_t>(history).last(n_ctx), cache);
    }
  }
  return generated;
}

}  // namespace mmgpt
