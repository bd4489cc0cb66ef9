#include "engine/rope.hpp"

#include <cmath>

namespace mmgpt {

std::vector<float> rope_inv_freq(const ModelConfig& c) {
  const size_t half = c.rope_dims / 2;
  const float dim = static_cast<float>(c.rope_dims), base = static_cast<float>(c.rope_theta);
  std::vector<float> inv(half);
  for (size_t i = 0; i < half; ++i) {
    const float e = static_cast<float>(2 * i) / dim;  // float32 division, as the tensor's
    const float p = static_cast<float>(std::pow(static_cast<double>(base), static_cast<double>(e)));
    inv[i] = 1.0f / p;
  }
  if (c.rope_scaling == RopeScaling::Llama3) {
    // transformers' _compute_llama3_parameters, in float32 tensor arithmetic:
    //   wavelen = 2 pi / inv_freq; long wavelengths (> old_ctx / low_freq_factor)
    //   are divided by factor, short ones (< old_ctx / high_freq_factor) kept,
    //   the band between smoothly interpolated.
    const float factor = c.rope_factor, lo = c.rope_low_freq_factor, hi = c.rope_high_freq_factor;
    const float old_ctx = static_cast<float>(c.rope_original_ctx);
    // Python floats, rounded to float32 where they meet the tensors.
    const float low_freq_wavelen = static_cast<float>(static_cast<double>(c.rope_original_ctx) / lo);
    const float high_freq_wavelen = static_cast<float>(static_cast<double>(c.rope_original_ctx) / hi);
    const float band = static_cast<float>(static_cast<double>(hi) - static_cast<double>(lo));
    constexpr float kTwoPi = static_cast<float>(2 * 3.141592653589793);
    for (float& f : inv) {
      const float wavelen = kTwoPi / f;
      const float scaled = wavelen > low_freq_wavelen ? f / factor : f;
      const float smooth = (old_ctx / wavelen - lo) / band;
      const float smoothed = (1.0f - smooth) * scaled / factor + smooth * scaled;
      const bool medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
      f = medium ? smoothed : scaled;
    }
  }
  return inv;
}

void rope_angles(const std::vector<float>& inv_freq, size_t pos, bool inverse, float* cos, float* sin) {
  const float p = static_cast<float>(pos);
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    const float angle = p * inv_freq[i];
    cos[i] = static_cast<float>(std::cos(static_cast<double>(angle)));
    const float s = static_cast<float>(std::sin(static_cast<double>(angle)));
    sin[i] = inverse ? -s : s;
  }
}

}  // namespace mmgpt
