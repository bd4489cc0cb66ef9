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

void check_flag_id(const std::string& source, const char* field, uint32_t id, uint32_t count, const char* known) {
  if (id >= count)
    throw Error(source + ": config field " + field + " has unknown id " + std::to_string(id) + " (known: " + known +
                ")");
}

bool finite_positive(double v) { return std::isfinite(v) && v > 0; }

}  // namespace

const char* activation_name(GeluKind kind) {
  switch (kind) {
    case GeluKind::Erf: return "erf";
    case GeluKind::Tanh: return "tanh";
    case GeluKind::Silu: return "silu";
    case GeluKind::ReluSquared: return "relu2";
  }
  return "unknown";
}

float ModelConfig::scores_scale() const {
  return attn_scale > 0 ? attn_scale : 1.0f / std::sqrt(static_cast<float>(head_size()));
}

bool ModelConfig::is_gpt2_block() const {
  const ModelConfig d;
  return norm == d.norm && norm_weight == d.norm_weight && n_kv_head == d.n_kv_head && head_dim == d.head_dim &&
         !mlp_bias.has_value() && mlp_gated == d.mlp_gated && parallel_residual == d.parallel_residual &&
         pos_embedding == PosEmbedding::Learned && rope_dims == d.rope_dims && rope_interleaved == d.rope_interleaved &&
         rope_inverse == d.rope_inverse && rope_theta == d.rope_theta && rope_scaling == d.rope_scaling &&
         rope_factor == d.rope_factor && rope_low_freq_factor == d.rope_low_freq_factor &&
         rope_high_freq_factor == d.rope_high_freq_factor && rope_original_ctx == d.rope_original_ctx &&
         qk_norm == d.qk_norm && qk_norm_after_rope == d.qk_norm_after_rope && qk_norm_scale == d.qk_norm_scale &&
         attn_scale == d.attn_scale && logit_softcap == d.logit_softcap && !has_block_v2();
}

bool ModelConfig::has_block_v2() const {
  auto nonzero = [](const auto& v) {
    for (auto x : v)
      if (x != 0) return true;
    return false;
  };
  return embed_norm || smear_channels != 0 || resid_mix || backout_after != 0 || ve_gate_channels != 0 ||
         ve_gate_range != 0.0f || nonzero(attn_window) || nonzero(value_embed);
}

namespace {

void validate_block(const ModelConfig& c, const std::string& source) {
  check_flag_id(source, "norm", static_cast<uint32_t>(c.norm), 2, "0 = layer norm, 1 = RMS norm");
  if (c.norm == NormKind::RmsNorm && c.norm_bias)
    throw Error(source + ": config has an RMS norm with a bias (norm_bias), which no model defines");
  if (c.norm == NormKind::LayerNorm && !c.norm_weight)
    throw Error(source + ": config has a layer norm without a weight (norm_weight), which this engine does not run");
  if (c.n_kv_head > kMaxDim || c.head_dim > kMaxDim)
    throw Error(source + ": config field n_kv_head or head_dim exceeds " + std::to_string(kMaxDim));
  if (c.q_width() > kMaxDim * 16ull || c.kv_width() > kMaxDim * 16ull)
    throw Error(source + ": config's attention is " + std::to_string(c.q_width()) +
                " query features (n_head * head_dim; at most " + std::to_string(kMaxDim * 16ull) + ")");
  if (c.n_head % c.kv_heads() != 0)
    throw Error(source + ": config field n_head " + std::to_string(c.n_head) + " is not a multiple of n_kv_head " +
                std::to_string(c.kv_heads()));
  if (c.pos_embedding == PosEmbedding::Rotary) {
    if (c.rope_dims == 0 || c.rope_dims % 2 != 0 || c.rope_dims > c.head_size())
      throw Error(source + ": config field rope_dims is " + std::to_string(c.rope_dims) +
                  " (must be even, 2 to head_dim " + std::to_string(c.head_size()) + ")");
    if (!finite_positive(c.rope_theta))
      throw Error(source + ": config field rope_theta is " + std::to_string(c.rope_theta) + " (must be finite, > 0)");
  } else if (c.rope_dims != 0) {
    throw Error(source + ": config field rope_dims is " + std::to_string(c.rope_dims) +
                " but positions are not rotary");
  }
  check_flag_id(source, "rope_scaling", static_cast<uint32_t>(c.rope_scaling), 2, "0 = none, 1 = llama3");
  if (c.rope_scaling == RopeScaling::Llama3 &&
      (!std::isfinite(c.rope_factor) || !(c.rope_factor >= 1) || !finite_positive(c.rope_low_freq_factor) ||
       !finite_positive(c.rope_high_freq_factor) || !(c.rope_high_freq_factor > c.rope_low_freq_factor) ||
       c.rope_original_ctx == 0))
    throw Error(source + ": config's llama3 rope scaling is inconsistent (factor " + std::to_string(c.rope_factor) +
                ", low_freq_factor " + std::to_string(c.rope_low_freq_factor) + ", high_freq_factor " +
                std::to_string(c.rope_high_freq_factor) + ", original context " + std::to_string(c.rope_original_ctx) +
                ")");
  check_flag_id(source, "qk_norm", static_cast<uint32_t>(c.qk_norm), 3, "0 = none, 1 = weighted, 2 = plain");
  if (!finite_positive(c.qk_norm_scale))
    throw Error(source + ": config field qk_norm_scale is " + std::to_string(c.qk_norm_scale) +
                " (must be finite, > 0)");
  if (!std::isfinite(c.attn_scale) || c.attn_scale < 0)
    throw Error(source + ": config field attn_scale is " + std::to_string(c.attn_scale) + " (must be finite, >= 0)");
  if (!std::isfinite(c.logit_softcap) || c.logit_softcap < 0)
    throw Error(source + ": config field logit_softcap is " + std::to_string(c.logit_softcap) +
                " (must be finite, >= 0)");
  if (c.smear_channels > c.n_embd || c.ve_gate_channels > c.n_embd)
    throw Error(source + ": config field smear_channels " + std::to_string(c.smear_channels) + " or ve_gate_channels " +
                std::to_string(c.ve_gate_channels) + " exceeds n_embd " + std::to_string(c.n_embd));
  if (c.backout_after > c.n_layer)
    throw Error(source + ": config field backout_after is " + std::to_string(c.backout_after) + " (at most n_layer " +
                std::to_string(c.n_layer) + ")");
  if (!c.attn_window.empty() && c.attn_window.size() != c.n_layer)
    throw Error(source + ": config has " + std::to_string(c.attn_window.size()) + " attention windows for " +
                std::to_string(c.n_layer) + " layers");
  if (!c.value_embed.empty() && c.value_embed.size() != c.n_layer)
    throw Error(source + ": config has " + std::to_string(c.value_embed.size()) + " value-embedding flags for " +
                std::to_string(c.n_layer) + " layers");
  bool any_ve = false;
  for (uint8_t f : c.value_embed) {
    if (f > 1) throw Error(source + ": config has a value-embedding flag " + std::to_string(f) + " (must be 0 or 1)");
    any_ve = any_ve || f != 0;
  }
  if (any_ve != (c.ve_gate_channels != 0))
    throw Error(source + ": config's value embeddings need both a layer that has one and ve_gate_channels > 0");
  if (any_ve ? !finite_positive(c.ve_gate_range) : c.ve_gate_range != 0.0f)
    throw Error(source + ": config field ve_gate_range is " + std::to_string(c.ve_gate_range) +
                (any_ve ? " (must be finite, > 0)" : " without value embeddings (must be 0)"));
}

}  // namespace

void validate_config(const ModelConfig& c, const std::string& source) {
  check_range(source, "n_layer", c.n_layer, kMaxLayers);
  check_range(source, "n_head", c.n_head, kMaxDim);
  check_range(source, "n_embd", c.n_embd, kMaxDim);
  check_range(source, "n_ff", c.n_ff, kMaxDim);
  check_range(source, "n_ctx", c.n_ctx, kMaxContext);
  check_range(source, "vocab_size", c.vocab_size, kMaxVocab);
  if (c.head_dim == 0 && c.n_embd % c.n_head != 0)
    throw Error(source + ": config field n_embd " + std::to_string(c.n_embd) + " is not divisible by n_head " +
                std::to_string(c.n_head));
  // !(x > 0) also catches NaN.
  if (!std::isfinite(c.norm_eps) || !(c.norm_eps > 0.0f) || !(c.norm_eps < 1.0f))
    throw Error(source + ": config field norm_eps is " + std::to_string(c.norm_eps) + " (must be finite, > 0 and < 1)");
  check_flag_id(source, "gelu", static_cast<uint32_t>(c.gelu), 4, "0 = erf, 1 = tanh, 2 = silu, 3 = relu2");
  check_flag_id(source, "pos_embedding", static_cast<uint32_t>(c.pos_embedding), 2, "0 = learned, 1 = rotary");
  validate_block(c, source);
}

std::vector<TensorSpec> required_tensors(const ModelConfig& c) {
  const uint64_t d = c.n_embd, ff = c.n_ff, vocab = c.vocab_size, ctx = c.n_ctx;
  const uint64_t q = c.q_width(), kv = c.kv_width(), hd = c.head_size();
  std::vector<TensorSpec> out;
  auto add = [&](std::string name, std::vector<uint64_t> shape, bool matrix = false) {
    out.push_back({std::move(name), std::move(shape), matrix});
  };
  auto add_norm = [&](const std::string& prefix) {
    if (c.norm_weight) add(prefix + ".weight", {d});
    if (c.norm_bias) add(prefix + ".bias", {d});
  };
  auto add_linear = [&](const std::string& prefix, uint64_t out_dim, uint64_t in_dim, bool bias) {
    add(prefix + ".weight", {out_dim, in_dim}, true);
    if (bias) add(prefix + ".bias", {out_dim});
  };

  add("wte", {vocab, d}, true);  // also the LM head when tied
  if (c.pos_embedding == PosEmbedding::Learned) add("wpe", {ctx, d});
  if (c.embed_norm) add_norm("ln_e");
  if (c.smear_channels != 0) {
    add("smear.gate.weight", {c.smear_channels});
    add("smear.lambda", {1});
  }
  if (c.resid_mix) {
    add("resid_lambdas", {c.n_layer});
    add("x0_lambdas", {c.n_layer});
  }
  if (c.backout_after != 0) add("backout_lambda", {1});
  for (uint32_t i = 0; i < c.n_layer; ++i) {
    const std::string h = "h." + std::to_string(i);
    add_norm(h + ".ln_1");
    add_linear(h + ".attn.qkv", q + 2 * kv, d, c.qkv_bias);
    if (c.qk_norm == QkNorm::Weighted) {
      add(h + ".attn.q_norm.weight", {hd});
      add(h + ".attn.k_norm.weight", {hd});
    }
    if (c.has_value_embed(i)) {
      add(h + ".attn.ve.weight", {vocab, kv}, true);
      add(h + ".attn.ve_gate.weight", {c.kv_heads(), c.ve_gate_channels});
    }
    add_linear(h + ".attn.proj", d, q, c.linear_bias);
    add_norm(h + ".ln_2");
    add_linear(h + ".mlp.fc", c.mlp_gated ? 2 * ff : ff, d, c.has_mlp_bias());
    add_linear(h + ".mlp.proj", d, ff, c.has_mlp_bias());
  }
  add_norm("ln_f");
  if (!c.tied_lm_head) add("lm_head.weight", {vocab, d}, true);
  return out;
}

}  // namespace mmgpt
