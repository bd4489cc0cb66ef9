#pragma once
// Picks the next token from a row of logits.
//
// Greedy: argmax (the lowest id on ties, like torch.argmax). Otherwise, in
// this order: repetition penalty on the tokens seen so far (CTRL / Hugging
// Face rule: a positive logit is divided by the penalty, a negative one
// multiplied), temperature, top-k, top-p (the smallest set of most likely
// tokens whose probability reaches p), min-p (drop tokens less likely than
// min_p times the most likely one), then a draw from a seeded generator, so
// the same seed repeats a run exactly on any machine and thread count.
// The repetition penalty applies to greedy decoding too.
#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace mmgpt {

struct SamplingOptions {
  bool greedy = false;
  float temperature = 0.8f;
  uint32_t top_k = 200;             // 0 = no top-k cut
  float top_p = 1.0f;               // (0, 1]; 1 = no cut
  float min_p = 0.0f;               // [0, 1); 0 = no cut
  float repetition_penalty = 1.0f;  // >= 1 in practice; 1 = none
  uint64_t seed = 0;
};

class Sampler {
 public:
  // Throws mmgpt::Error for options outside their ranges.
  explicit Sampler(const SamplingOptions& options);
  // `seen`: the tokens the repetition penalty applies to (prompt and generated).
  int32_t next(std::span<const float> logits, std::span<const int32_t> seen = {});

 private:
  SamplingOptions options_;
  std::mt19937_64 rng_;
  std::vector<float> penalized_;
  std::vector<std::pair<float, int32_t>> candidates_;
  std::vector<double> weights_;
};

int32_t argmax(std::span<const float> logits);

}  // namespace mmgpt
