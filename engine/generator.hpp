#pragma once
// Autoregressive generation for one or many sequences on top of the
// executor: one batched prefill of all prompts, then decode steps in which
// every unfinished sequence contributes one row to each matmul.
//
// Past the context length the window slides as nanoGPT's generate() does: the
// model sees the last n_ctx tokens at positions 0..n_ctx-1. With learned
// absolute positions the cached keys/values are then stale, so each step past
// the context re-runs that sequence's window (a prefill of n_ctx tokens).
#include <vector>

#include "engine/executor.hpp"
#include "engine/generation.hpp"
#include "engine/tokenizer.hpp"

namespace mmgpt {

// Prompts longer than n_ctx are cropped to their last n_ctx tokens. Each
// sequence gets its own sampler seeded with options.sampling.seed, so a
// sequence's result does not depend on the others in the batch.
std::vector<GenerationResult> run_generation(Executor& executor, const Tokenizer& tokenizer,
                                             const std::vector<std::vector<int32_t>>& prompts,
                                             const GenerateOptions& options, const TokenCallback& on_token);

}  // namespace mmgpt
