#include "engine/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "formats/error.hpp"

namespace mmgpt {

int32_t argmax(std::span<const float> logits) {
  size_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[best]) best = i;
  return static_cast<int32_t>(best);
}

Sampler::Sampler(const SamplingOptions& options) : options_(options), rng_(options.seed) {
  const SamplingOptions& o = options_;
  if (!o.greedy && !(o.temperature > 0.0f && std::isfinite(o.temperature)))
    throw Error("temperature must be a finite number greater than 0 (use --greedy for argmax decoding), got " +
                std::to_string(o.temperature));
  if (!(o.top_p > 0.0f && o.top_p <= 1.0f)) throw Error("top-p must be in (0, 1], got " + std::to_string(o.top_p));
  if (!(o.min_p >= 0.0f && o.min_p < 1.0f)) throw Error("min-p must be in [0, 1), got " + std::to_string(o.min_p));
  if (!(o.repetition_penalty > 0.0f && std::isfinite(o.repetition_penalty)))
    throw Error("repetition penalty must be a finite number greater than 0, got " +
                std::to_string(o.repetition_penalty));
}

int32_t Sampler::next(std::span<const float> logits, std::span<const int32_t> seen) {
  if (options_.repetition_penalty != 1.0f && !seen.empty()) {
    penalized_.assign(logits.begin(), logits.end());
    for (int32_t id : seen) {
      if (id < 0 || static_cast<size_t>(id) >= penalized_.size()) continue;
      // Each distinct token once: penalise from the original logit, not cumulatively.
      const float original = logits[static_cast<size_t>(id)];
      penalized_[static_cast<size_t>(id)] =
          original > 0 ? original / options_.repetition_penalty : original * options_.repetition_penalty;
    }
    logits = penalized_;
  }
  if (options_.greedy || logits.size() == 1) return argmax(logits);

  candidates_.resize(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) candidates_[i] = {logits[i], static_cast<int32_t>(i)};
  // Highest logit first; ties broken by id so the order never depends on the sort.
  auto higher = [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  size_t keep = candidates_.size();
  if (options_.top_k > 0 && options_.top_k < keep) {
    keep = options_.top_k;
    std::partial_sort(candidates_.begin(), candidates_.begin() + static_cast<std::ptrdiff_t>(keep), candidates_.end(),
                      higher);
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
  if (options_.top_p < 1.0f) {
    double cumulative = 0.0;
    for (size_t i = 0; i < keep; ++i) {
      cumulative += weights_[i];
      if (cumulative >= options_.top_p * total) {
        keep = i + 1;
        break;
      }
    }
  }
  if (options_.min_p > 0.0f) {
    // weights_[0] is the most likely token's (unnormalised) weight.
    const double floor = options_.min_p * weights_[0];
    size_t n = 1;
    while (n < keep && weights_[n] >= floor) ++n;
    keep = n;
  }
  total = 0.0;
  for (size_t i = 0; i < keep; ++i) total += weights_[i];

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
