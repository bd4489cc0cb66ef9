#include "engine/sampler.hpp"

#include <algorithm>
#include <cmath>

#include "formats/error.hpp"

namespace mmgpt {

int32_t argmax(std::span<const float> logits) {
  size_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[best]) best = i;
  return static_cast<int32_t>(best);
}

Sampler::Sampler(const SamplingOptions& options) : options_(options), rng_(options.seed) {
  if (!options_.greedy && !(options_.temperature > 0.0f && std::isfinite(options_.temperature)))
    throw Error("temperature must be a finite number greater than 0 (use --greedy for argmax decoding)");
}

int32_t Sampler::next(std::span<const float> logits) {
  if (options_.greedy || logits.size() == 1) return argmax(logits);

  candidates_.resize(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) candidates_[i] = {logits[i], static_cast<int32_t>(i)};
  // Highest logit first; ties broken by id so the order never depends on the sort.
  auto higher = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
  size_t keep = candidates_.size();
  if (options_.top_k > 0 && options_.top_k < keep) {
    keep = options_.top_k;
    std::partial_sort(candidates_.begin(), candidates_.begin() + static_cast<std::ptrdiff_t>(keep), candidates_.end(), higher);
  } else {
    std::sort(candidates_.begin(), candidates_.end(), higher);
  }

  // Softmax of logit / temperature over the kept candidates, in double.
  const double top = candidates_[0].first;
  weights_.resize(keep);
  double total = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    weights_[i] = std::exp((candidates_[i].first - top) / options_.temperature);
    total += weights_[i];
  }
  // A uniform double in [0, 1) from the top 53 bits: the same on every platform.
  const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53 * total;
  double acc = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    acc += weights_[i];
    if (u < acc) return candidates_[i].second;
  }
  return candidates_[keep - 1].second;
}

}  // namespace mmgpt
