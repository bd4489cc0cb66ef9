// Hugging Face GPTNeoXForCausalLM (Pythia, GPT-NeoX): layer norms with bias,
// a fused query_key_value whose rows are laid out per head ([head][q|k|v]
// [head_size], regrouped here into the canonical Q, K, V rows), rotary
// positions on the first rotary_pct of each head, a plain GELU MLP, parallel
// or sequential residual, an untied embed_out. Hyper-parameters from
// config.json, read as transformers' configuration_gpt_neox reads them.
#include <string>

#include <nlohmann/json.hpp>

#include "formats/error.hpp"
#include "formats/file_util.hpp"
#include "tools/convert/json_fields.hpp"
#include "tools/convert/layout.hpp"
#include "tools/convert/tensor_ops.hpp"

namespace mmgpt::convert {

namespace {

using nlohmann::json;

// The fused [heads * 3 * hs, ...] rows (or bias) regrouped as [q heads; k heads; v heads].
TensorPtr regroup_qkv(const TensorPtr& t, uint32_t heads, uint64_t hs) {
  std::vector<TensorPtr> parts;
  for (uint64_t j = 0; j < 3; ++j)
    for (uint64_t h = 0; h < heads; ++h) parts.push_back(slice_rows(t, (h * 3 + j) * hs, hs));
  return concat_rows(std::move(parts));
}

}  // namespace

MappedModel map_hf_gpt_neox(const LayoutInput& in) {
  std::string text, path;
  if (!find_model_config(in, text, path))
    throw Error(in.file + ": layout hf-gpt-neox needs the config.json that Hugging Face saves beside the weights");
  const json j = parse_json_object(text, path);
  if (!j.contains("model_type") || j["model_type"] != "gpt_neox")
    throw Error(path + ": model_type is " + (j.contains("model_type") ? j["model_type"].dump() : "missing") +
                ", layout hf-gpt-neox converts \"gpt_neox\"");

  MappedModel out;
  ModelConfig& c = out.config;
  try {
    c.n_layer = json_u32(j, "num_hidden_layers", path);
    c.n_embd = json_u32(j, "hidden_size", path);
    c.n_head = json_u32(j, "num_attention_heads", path);
    c.n_ff = j.contains("intermediate_size") ? json_u32(j, "intermediate_size", path) : 4 * c.n_embd;
    c.n_ctx = json_u32(j, "max_position_embeddings", path);
    c.vocab_size = json_u32(j, "vocab_size", path);
    if (c.n_embd % c.n_head != 0)
      throw Error(path + ": hidden_size " + std::to_string(c.n_embd) + " is not a multiple of num_attention_heads " +
                  std::to_string(c.n_head));
    c.norm = NormKind::LayerNorm;
    c.norm_bias = true;
    c.norm_eps = static_cast<float>(j.contains("layer_norm_eps") ? json_number(j, "layer_norm_eps", path) : 1e-5);
    c.pos_embedding = PosEmbedding::Rotary;
    const char* pct_key = j.contains("rotary_pct") ? "rotary_pct" : "partial_rotary_factor";
    const double pct = j.contains(pct_key) ? json_number(j, pct_key, path) : 0.25;
    const uint32_t hs = c.n_embd / c.n_head;
    if (!(pct > 0 && pct <= 1))
      throw Error(path + ": " + pct_key + " is " + std::to_string(pct) + " (must be in (0, 1])");
    c.rope_dims = static_cast<uint32_t>(static_cast<double>(hs) * pct);  // int(head_size * rotary_pct)
    if (c.rope_dims % 2 != 0 || c.rope_dims == 0)
      throw Error(path + ": " + pct_key + " " + std::to_string(pct) + " rotates " + std::to_string(c.rope_dims) +
                  " of " + std::to_string(hs) + " dims per head (must be even and at least 2)");
    const char* base_key = j.contains("rotary_emb_base") ? "rotary_emb_base" : "rope_theta";
    c.rope_theta = j.contains(base_key) ? json_number(j, base_key, path) : 10000.0;
    if (j.contains("rope_scaling") && !j["rope_scaling"].is_null())
      throw Error(path + ": rope_scaling " + j["rope_scaling"].dump() + " is not supported for gpt_neox");
    const std::string act = j.contains("hidden_act") && j["hidden_act"].is_string() ? j["hidden_act"].get<std::string>()
                                                                                    : std::string("gelu");
    if (act == "gelu")
      c.gelu = GeluKind::Erf;
    else if (act == "gelu_new" || act == "gelu_pytorch_tanh" || act == "gelu_fast")
      c.gelu = GeluKind::Tanh;
    else
      throw Error(path + ": hidden_act \"" + act +
                  "\" is not supported (gelu, gelu_new, gelu_pytorch_tanh, gelu_fast)");
    c.parallel_residual = json_bool(j, "use_parallel_residual", true, path);
    const bool bias = json_bool(j, "attention_bias", true, path);
    c.qkv_bias = c.linear_bias = bias;
    c.mlp_bias = true;
    c.tied_lm_head = json_bool(j, "tie_word_embeddings", false, path);
    validate_config(c, path);  // bounds every size before anything is built from it
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": " + e.what());
  }

  TensorTaker taker(*in.weights, in.file, "hf-gpt-neox");
  const uint64_t d = c.n_embd, v = c.vocab_size, ff = c.n_ff, hs = c.head_size();
  std::vector<std::string> needed = {"gpt_neox.embed_in.weight", "gpt_neox.final_layer_norm.weight"};
  for (uint32_t i = 0; i < c.n_layer; ++i)
    needed.push_back("gpt_neox.layers." + std::to_string(i) + ".attention.query_key_value.weight");
  taker.require(needed);
  const uint32_t layers = count_layers(*in.weights, "gpt_neox.layers.", in.file);
  if (layers != c.n_layer)
    throw Error(in.file + ": has " + std::to_string(layers) + " layers but " + path + " says num_hidden_layers " +
                std::to_string(c.n_layer));

  TensorPtr wte = taker.take("gpt_neox.embed_in.weight", {v, d});
  out.tensors.emplace_back("wte", wte);
  auto norm = [&](const std::string& from, const std::string& to) {
    out.tensors.emplace_back(to + ".weight", taker.take(from + ".weight", {d}));
    out.tensors.emplace_back(to + ".bias", taker.take(from + ".bias", {d}));
  };
  for (uint32_t i = 0; i < c.n_layer; ++i) {
    const std::string p = "gpt_neox.layers." + std::to_string(i) + ".", h = "h." + std::to_string(i) + ".";
    norm(p + "input_layernorm", h + "ln_1");
    out.tensors.emplace_back(h + "attn.qkv.weight",
                             regroup_qkv(taker.take(p + "attention.query_key_value.weight", {3 * d, d}), c.n_head, hs));
    if (c.qkv_bias)
      out.tensors.emplace_back(h + "attn.qkv.bias",
                               regroup_qkv(taker.take(p + "attention.query_key_value.bias", {3 * d}), c.n_head, hs));
    out.tensors.emplace_back(h + "attn.proj.weight", taker.take(p + "attention.dense.weight", {d, d}));
    if (c.linear_bias) out.tensors.emplace_back(h + "attn.proj.bias", taker.take(p + "attention.dense.bias", {d}));
    norm(p + "post_attention_layernorm", h + "ln_2");
    out.tensors.emplace_back(h + "mlp.fc.weight", taker.take(p + "mlp.dense_h_to_4h.weight", {ff, d}));
    out.tensors.emplace_back(h + "mlp.fc.bias", taker.take(p + "mlp.dense_h_to_4h.bias", {ff}));
    out.tensors.emplace_back(h + "mlp.proj.weight", taker.take(p + "mlp.dense_4h_to_h.weight", {d, ff}));
    out.tensors.emplace_back(h + "mlp.proj.bias", taker.take(p + "mlp.dense_4h_to_h.bias", {d}));
    // Buffers older transformers saved (Pythia's checkpoints): the causal
    // mask, its fill value and the rotary frequencies.
    for (const char* buffer : {"attention.bias", "attention.masked_bias", "attention.rotary_emb.inv_freq"})
      taker.ignore(p + buffer);
  }
  norm("gpt_neox.final_layer_norm", "ln_f");
  take_hf_head(taker, "embed_out.weight", "gpt_neox.embed_in.weight", wte, c.tied_lm_head, path, out);
  taker.finish();
  out.notes.push_back("GPTNeoXForCausalLM: " + std::to_string(c.n_layer) + " layers, " + std::to_string(c.n_head) +
                      " heads of " + std::to_string(hs) + ", rotary on " + std::to_string(c.rope_dims) + " dims, " +
                      (c.parallel_residual ? "parallel" : "sequential") + " residual");
  return out;
}

}  // namespace mmgpt::convert
