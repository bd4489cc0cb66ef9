// Config consistency and the canonical tensor set a config implies.
// The upper bounds exist so that every size the engine derives from a config
// (vocab * d * 4 bytes, ctx * d, 3 * d * d, ...) fits in uint64_t with room
// to spare: a hostile file cannot make downstream arithmetic overflow.
#include "formats/model_config.hpp"

#include <cmath>
#include <string>

#include "formats/error.hpp"

namespace mmgpt {
namespace {

constexpr uint32_t kMaxLayers = 4096;
constexpr uint32_t kMaxDim = 1u << 20;  // n_embd, n_ff, n_head
constexpr uint32_t kMaxVocab = 1u << 24;
constexpr uint32_t kMaxContext = 1u << 24;

void check_range(const std::string& source, const char* field, uint32_t value, uint32_t max) {
  if (value == 0) throw Error(source + ": config field " + field + " is 0 (must be at least 1)");
  if (value > max)
    throw Error(source + ": config field " + field + " is " + std::to_string(value) + " (must be at most " +
                std::to_string(max) + ")");
}

}  // namespace

void validate_config(const ModelConfig& c, const std::string& source) {
  check_range(source, "n_layer", c.n_layer, kMaxLayers);
  check_range(source, "n_head", c.n_head, kMaxDim);
  check_range(source, "n_embd", c.n_embd, kMaxDim);
  check_range(source, "n_ff", c.n_ff, kMaxDim);
  check_range(source, "n_ctx", c.n_ctx, kMaxContext);
  check_range(source, "vocab_size", c.vocab_size, kMaxVocab);
  if (c.n_embd % c.n_head != 0)
    throw Error(source + ": config field n_embd " + std::to_string(c.n_embd) + " is not divisible by n_head " +
                std::to_string(c.n_head));
  // !(x > 0) also catches NaN.
  if (!std::isfinite(c.norm_eps) || !(c.norm_eps > 0.0f) || !(c.norm_eps < 1.0f))
    throw Error(source + ": config field norm_eps is " + std::to_string(c.norm_eps) + " (must be finite, > 0 and < 1)");
  auto gelu = static_cast<uint32_t>(c.gelu);
  if (gelu != static_cast<uint32_t>(GeluKind::Erf) && gelu != static_cast<uint32_t>(GeluKind::Tanh))
    throw Error(source + ": config field gelu has unknown id " + std::to_string(gelu) + " (known: 0 = erf, 1 = tanh)");
  auto pos = static_cast<uint32_t>(c.pos_embedding);
  if (pos != static_cast<uint32_t>(PosEmbedding::Learned))
    throw Error(source + ": config field pos_embedding has unknown id " + std::to_string(pos) +
                " (known: 0 = learned)");
}

std::vector<TensorSpec> required_tensors(const ModelConfig& c) {
  const uint64_t d = c.n_embd, ff = c.n_ff, vocab = c.vocab_size, ctx = c.n_ctx;
  std::vector<TensorSpec> out;
  auto add = [&](std::string name, std::vector<uint64_t> shape, bool matrix = false) {
    out.push_back({std::move(name), std::move(shape), matrix});
  };
  auto add_norm = [&](const std::string& prefix) {
    add(prefix + ".weight", {d});
    if (c.norm_bias) add(prefix + ".bias", {d});
  };
  auto add_linear = [&](const std::string& prefix, uint64_t out_dim, uint64_t in_dim, bool bias) {
    add(prefix + ".weight", {out_dim, in_dim}, true);
    if (bias) add(prefix + ".bias", {out_dim});
  };

  add("wte", {vocab, d}, true);  // also the LM head when tied
  add("wpe", {ctx, d});
  for (uint32_t i = 0; i < c.n_layer; ++i) {
    const std::string h = "h." + std::to_string(i);
    add_norm(h + ".ln_1");
    add_linear(h + ".attn.qkv", 3 * d, d, c.qkv_bias);
    add_linear(h + ".attn.proj", d, d, c.linear_bias);
    add_norm(h + ".ln_2");
    add_linear(h + ".mlp.fc", ff, d, c.linear_bias);
    add_linear(h + ".mlp.proj", d, ff, c.linear_bias);
  }
  add_norm("ln_f");
  if (!c.tied_lm_head) add("lm_head.weight", {vocab, d}, true);
  return out;
}

}  // namespace mmgpt
