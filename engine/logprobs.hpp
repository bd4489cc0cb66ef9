#pragma once
// Log-probabilities of tokens under the model: the log-softmax of a row of
// logits as the model gave it (before temperature, penalties or any cut the
// sampler makes), as OpenAI's and vLLM's APIs report them.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace mmgpt {

// The most alternatives a request may ask for at each position (OpenAI's limit).
inline constexpr size_t kMaxTopLogprobs = 20;
// Throws mmgpt::Error for a count above it.
void check_top_logprobs(size_t n);
// The most rows of logits a step scoring a prompt asks for (rows x vocab floats).
inline constexpr size_t kScoredRowsPerStep = 64;

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
};

// One position: the token there, its log-probability given the tokens before
// it, and the `top` most likely tokens at that position (most likely first;
// the lower id first among equal logits, as torch.topk's order is on CPU).
struct PositionLogprobs {
  int32_t token = 0;
  float logprob = 0.0f;
  bool greedy = false;  // `token` is the argmax of the row (the lowest id among equal maxima)
  std::vector<TokenLogprob> top;
};

// log_softmax(logits)[token] and the `top` most likely tokens of the row. The
// sum of exponentials is taken in double after subtracting the row's maximum,
// so a value is within a few float roundings of torch.log_softmax's in float64.
PositionLogprobs position_logprobs(std::span<const float> logits, int32_t token, size_t top);

}  // namespace mmgpt
