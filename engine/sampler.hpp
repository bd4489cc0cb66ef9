#pragma once
// Picks the next token from a row of logits: greedy (argmax, lowest id on
// ties, like torch.argmax) or sampling with temperature and top-k from a
// seeded generator, so a run with the same seed repeats exactly.
#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace mmgpt {

struct SamplingOptions {
  bool greedy = false;
  float temperature = 0.8f;
  uint32_t top_k = 200;  // 0 = no top-k cut
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplingOptions& options);
  int32_t next(std::span<const float> logits);

 private:
  SamplingOptions options_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> candidates_;
  std::vector<double> weights_;
};

int32_t argmax(std::span<const float> logits);

}  // namespace mmgpt
