#pragma once
// Rotary positions: the frequencies of a config and the angles of a position,
// computed as the PyTorch sources do (Hugging Face's rope utilities, the
// LLMs-from-scratch chapters, nanochat), in float32 where they use float32.
#include <cstddef>
#include <vector>

#include "formats/model_config.hpp"

namespace mmgpt {

// inv_freq[i] = 1 / theta^(2i / rope_dims), i < rope_dims / 2, in float32 as
// `1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))`, then rescaled as
// transformers' _compute_llama3_parameters does for RopeScaling::Llama3.
std::vector<float> rope_inv_freq(const ModelConfig& config);

// The cosines and sines at position `pos`: angle_i = float(pos) * inv_freq[i]
// rounded to float32 (PyTorch's float32 outer product), its cosine and sine
// rounded to float32; the sines negated for a rotation the other way
// (config.rope_inverse).
void rope_angles(const std::vector<float>& inv_freq, size_t pos, bool inverse, float* cos, float* sin);

}  // namespace mmgpt
