#pragma once
// Autoregressive generation on top of the executor: prefill the prompt, then
// decode one token at a time with the KV cache.
//
// Past the context length the window slides as nanoGPT's generate() does: the
// model sees the last n_ctx tokens at positions 0..n_ctx-1. With learned
// absolute positions the cached keys/values are then stale, so each step past
// the context re-runs the window (a prefill of n_ctx tokens per new token).
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "engine/executor.hpp"
#include "engine/sampler.hpp"

namespace mmgpt {

struct GenerateOptions {
  size_t max_new_tokens = 256;
  SamplingOptions sampling;
  bool ignore_eos = false;
  int64_t eos_id = -1;  // -1: the model has no end-of-text token
};

// Called with each new token; return false to stop early.
using TokenCallback = std::function<bool(int32_t)>;

// `prompt` must be non-empty and at most n_ctx tokens (crop it first).
// Returns the generated tokens (the end-of-text token, when it stops generation, is not included).
std::vector<int32_t> generate(Executor& executor, std::span<const int32_t> prompt, const GenerateOptions& options,
                              const TokenCallback& on_token = {});

}  // namespace mmgpt
