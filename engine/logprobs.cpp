#include "engine/logprobs.hpp"

#include <algorithm>
#include <cmath>

#include "formats/error.hpp"

namespace mmgpt {

void check_top_logprobs(size_t n) {
  if (n > kMaxTopLogprobs)
    throw Error("at most " + std::to_string(kMaxTopLogprobs) + " top log-probabilities per token, got " +
                std::to_string(n));
}

PositionLogprobs position_logprobs(std::span<const float> logits, int32_t token, size_t top) {
  if (token < 0 || static_cast<size_t>(token) >= logits.size())
    throw Error("token id " + std::to_string(token) + " is outside the logits row");
  size_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[best]) best = i;
  const double max = logits[best];
  double sum = 0.0;
  for (float x : logits) sum += std::exp(static_cast<double>(x) - max);
  const double log_norm = max + std::log(sum);
  auto logprob = [&](size_t id) { return static_cast<float>(static_cast<double>(logits[id]) - log_norm); };

  PositionLogprobs p;
  p.token = token;
  p.logprob = logprob(static_cast<size_t>(token));
  p.greedy = static_cast<size_t>(token) == best;
  top = std::min(top, logits.size());
  if (top == 0) return p;
  // The top entries by (logit descending, id ascending): one pass keeping a sorted list of `top`.
  std::vector<int32_t> ids;
  ids.reserve(top + 1);
  auto before = [&](int32_t a, int32_t b) {
    const float la = logits[static_cast<size_t>(a)], lb = logits[static_cast<size_t>(b)];
    return la > lb || (la == lb && a < b);
  };
  for (size_t i = 0; i < logits.size(); ++i) {
    const int32_t id = static_cast<int32_t>(i);
    if (ids.size() == top && !before(id, ids.back())) continue;
    ids.insert(std::upper_bound(ids.begin(), ids.end(), id, before), id);
    if (ids.size() > top) ids.pop_back();
  }
  p.top.reserve(ids.size());
  for (int32_t id : ids) p.top.push_back({id, logprob(static_cast<size_t>(id))});
  return p;
}

}  // namespace mmgpt
