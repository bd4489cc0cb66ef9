#pragma once
// Autoregressive generation for one or many sequences on top of the
// executor: one batched prefill of all prompts, then decode steps in which
// every unfinished sequence contributes one row to each matmul. Each
// sequence is a GenerationSequence (engine/sequence.hpp), which also says how
// the window slides past the context length.
#include <vector>

#include "engine/executor.hpp"
#include "engine/generation.hpp"
#include "text/tokenizer.hpp"

namespace mmgpt {

// Prompts longer than n_ctx are cropped to their last n_ctx tokens. Each
// sequence gets its own sampler seeded with options.sampling.seed, so a
// sequence's result does not depend on the others in the batch.
std::vector<GenerationResult> run_generation(Executor& executor, const Tokenizer& tokenizer,
                                             const std::vector<std::vector<int32_t>>& prompts,
                                             const GenerateOptions& options, const TokenCallback& on_token);

}  // namespace mmgpt
