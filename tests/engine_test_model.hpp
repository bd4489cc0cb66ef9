#pragma once
// Builds small random .mmgpt models for engine tests, without PyTorch.
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "core/half.hpp"
#include "core/panel_layout.hpp"
#include "core/quant_layout.hpp"
#include "engine/executor.hpp"
#include "engine/kv_cache.hpp"
#include "formats/mmgpt_file.hpp"

namespace mmgpt::test {

inline std::string temp_path(const std::string& name) {
  std::filesystem::create_directories(MMGPT_TEST_TMP);
  return std::string(MMGPT_TEST_TMP) + "/" + name;
}

// Writes a random model with `config` (and a char tokenizer over `alphabet`
// when non-empty) to `path`. Weights ~ N(0, scale); norm weights around 1.
// `layout` Panel16 stores the matrices as the converter does (same values).
// With Panel16, `matrix_dtype` bf16/f16 stores the matrices rounded to that
// type (nearest even, as the converter does); `widened_f32` then stores those
// rounded values as f32 instead (the exact f32 twin of the 16-bit file).
inline void write_random_model(const std::string& path, const ModelConfig& config, uint64_t seed,
                               const std::string& alphabet = "", float scale = 0.2f, int64_t eos_id = -1,
                               Layout layout = Layout::RowMajor, WeightType matrix_dtype = WeightType::F32,
                               bool widened_f32 = false) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<std::vector<float>> storage;
  std::vector<std::vector<uint16_t>> storage16;
  std::vector<std::vector<uint8_t>> storage8;
  storage.reserve(required_tensors(config).size());
  storage8.reserve(required_tensors(config).size());
  storage16.reserve(required_tensors(config).size());
  std::vector<TensorToWrite> tensors;
  for (const TensorSpec& spec : required_tensors(config)) {
    uint64_t n = 1;
    for (uint64_t s : spec.shape) n *= s;
    std::vector<float> data(n);
    const bool norm_weight = spec.name.find("ln_") != std::string::npos && spec.name.ends_with(".weight");
    for (float& v : data) v = (norm_weight ? 1.0f : 0.0f) + normal(rng);
    const bool pack = layout == Layout::Panel16 && spec.matrix;
    if (pack && (matrix_dtype == WeightType::Q8_0 || matrix_dtype == WeightType::Q4_0)) {
      // Block-quantized straight from the row-major matrix (as the converter does).
      const auto wt = static_cast<mmgpt::WeightType>(matrix_dtype);
      storage8.emplace_back(mmgpt::packed_weight_bytes(wt, spec.shape[0], spec.shape[1]));
      mmgpt::quantize_panels(data.data(), spec.shape[0], spec.shape[1], wt, storage8.back().data());
      tensors.push_back(
          {spec.name, matrix_dtype, Layout::Panel16, spec.shape, storage8.back().data(), storage8.back().size(), {}});
      continue;
    }
    if (pack && matrix_dtype != WeightType::F32) {
      if (widened_f32) {  // the 16-bit values, widened, packed as f32 below
        for (float& v : data)
          v = matrix_dtype == WeightType::BF16 ? bf16_to_f32(f32_to_bf16(v)) : f16_to_f32(f32_to_f16(v));
      } else {  // 16-bit panel pairs (as the converter writes them)
        storage16.emplace_back(mmgpt::panel_floats(spec.shape[0], spec.shape[1]));
        mmgpt::pack_half_panels(data.data(), spec.shape[0], spec.shape[1], static_cast<mmgpt::WeightType>(matrix_dtype),
                                storage16.back().data());
        tensors.push_back({spec.name, matrix_dtype, Layout::Panel16, spec.shape, storage16.back().data(),
                           storage16.back().size() * sizeof(uint16_t), {}});
        continue;
      }
    }
    if (pack) {
      std::vector<float> packed(mmgpt::panel_floats(spec.shape[0], spec.shape[1]));
      mmgpt::pack_panels(data.data(), spec.shape[0], spec.shape[1], packed.data());
      data.swap(packed);
    }
    storage.push_back(std::move(data));
    tensors.push_back({spec.name, WeightType::F32, pack ? Layout::Panel16 : Layout::RowMajor, spec.shape,
                       storage.back().data(), storage.back().size() * sizeof(float), {}});
  }
  TokenizerData tok;
  if (!alphabet.empty()) {
    tok.kind = TokenizerKind::Char;
    for (char c : alphabet) tok.tokens.push_back(std::string(1, c));
    tok.eos_id = eos_id;
  }
  write_model_file(path, config, tok, tensors);
}

inline ModelConfig small_config(uint32_t n_layer = 2, uint32_t n_head = 3, uint32_t n_embd = 30, uint32_t n_ctx = 16,
                                uint32_t vocab = 37) {
  ModelConfig c;
  c.n_layer = n_layer;
  c.n_head = n_head;
  c.n_embd = n_embd;
  c.n_ff = 4 * n_embd;
  c.n_ctx = n_ctx;
  c.vocab_size = vocab;
  return c;
}

// All logits of `ids` run from an empty f32 KV cache.
inline std::vector<float> all_logits(Executor& ex, const std::vector<int32_t>& ids) {
  KVCache cache(ex.model().config());
  auto l = ex.run(ids, cache, ids.size());
  return {l.begin(), l.end()};
}

// n token ids drawn uniformly from [0, vocab), reproducibly from `seed`.
inline std::vector<int32_t> random_ids(size_t n, uint32_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> ids(n);
  for (auto& i : ids) i = static_cast<int32_t>(rng() % vocab);
  return ids;
}

}  // namespace mmgpt::test
