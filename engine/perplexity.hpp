#pragma once
// Scoring text: the cross-entropy of a token sequence under the model over
// sliding windows (see evaluate_perplexity for the exact definition).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>

#include "formats/model_config.hpp"

namespace mmgpt {

class Executor;

struct PerplexityOptions {
  size_t ctx = 0;                         // window length in tokens; 0 = the model's context length
  size_t stride = 0;                      // tokens the window advances by; 0 = the default documented in perplexity.cpp
  WeightType kv_dtype = WeightType::F32;  // the model's KV cache (a base model for divergence always uses f32)
  // Only windows [window_begin, window_end) of the plan (clipped to it), for a
  // run sharded over processes (mmgpt.dask): the shards' nll_sum and tokens
  // add up to the whole run's.
  size_t window_begin = 0;
  size_t window_end = SIZE_MAX;
};

// Against a base model (e.g. the f32 original of a quantized model), scored on
// the same windows: how far the next-token distributions moved.
struct DivergenceResult {
  double base_mean_nll = 0.0;  // the base model's mean NLL on the same targets
  double base_perplexity = 0.0;
  double mean_kl = 0.0;  // mean over targets of KL(P_base || P_model), nats
  double max_kl = 0.0;
  double same_top1 = 0.0;  // fraction of targets where both models' most likely token is the same
};

struct PerplexityResult {
  double mean_nll = 0.0;    // nats per evaluated token
  double perplexity = 0.0;  // exp(mean_nll)
  size_t tokens = 0;        // tokens whose prediction was scored
  size_t windows = 0;           // windows run
  size_t windows_planned = 0;   // windows of the whole plan (all of them, whatever range was run)
  double nll_sum = 0.0;         // sum of the scored tokens' NLL, in window order
  size_t ctx = 0, stride = 0;      // the window and stride used (defaults resolved)
  double seconds = 0.0;            // wall time of the evaluation
  double tokens_per_second = 0.0;  // tokens run through the model per second
};

// Called after each window with (tokens scored so far, total tokens to score); return false to stop early.
using PerplexityProgress = std::function<bool(size_t done, size_t total)>;

PerplexityResult evaluate_perplexity(Executor& executor, std::span<const int32_t> tokens,
                                     const PerplexityOptions& options, const PerplexityProgress& progress = {});

// The same, also running `base` (same vocabulary; a context of at least the
// window) on every window and comparing the distributions: `divergence`.
PerplexityResult evaluate_perplexity(Executor& executor, Executor& base, std::span<const int32_t> tokens,
                                     const PerplexityOptions& options, DivergenceResult& divergence,
                                     const PerplexityProgress& progress = {});

}  // namespace mmgpt
