// "Build a Large Language Model (From Scratch)": the Llama3Model and
// Qwen3Model state dicts (rasbt/LLMs-from-scratch, pkg/llms_from_scratch/
// llama3.py and qwen3.py), saved with torch.save(model.state_dict()), and the
// config dict the user keeps beside them as config.json in the book's key
// names. RMS norms (`.weight` or Qwen3's `.scale`), separate W_query / W_key /
// W_value without bias, grouped key/value heads (n_kv_groups), rotary
// positions with split halves (Llama 3: rope_freq's llama3 scaling),
// Qwen3's per-head q_norm / k_norm before the rotation, the SwiGLU
// feed-forward fc3(silu(fc1(x)) * fc2(x)), an out_head that may be tied.
#include <set>
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

const std::set<std::string> kKnownKeys = {"vocab_size", "context_length", "emb_dim",     "n_heads",
                                          "n_layers",   "hidden_dim",     "n_kv_groups", "rope_base",
                                          "dtype",      "rope_freq",      "head_dim",    "qk_norm"};

// The book's norm parameter: nn.RMSNorm's `.weight` (Llama3Model) or its own
// RMSNorm's `.scale` (Qwen3Model); a `.shift` (bias) no model of it uses.
std::string norm_suffix(const StateDict& w, const std::string& file) {
  if (w.has("final_norm.scale")) return ".scale";
  if (w.has("final_norm.weight")) return ".weight";
  throw Error(file + ": tensor 'final_norm.weight' (or 'final_norm.scale') is missing");
}

}  // namespace

MappedModel map_llms_modern(const LayoutInput& in) {
  std::string text, path;
  if (!find_model_config(in, text, path))
    throw Error(in.file +
                ": a Llama3Model / Qwen3Model state dict needs its config dict beside it as config.json, in the "
                "book's key names (vocab_size, context_length, emb_dim, n_heads, n_layers, hidden_dim, "
                "n_kv_groups, rope_base; rope_freq for Llama 3; head_dim and qk_norm for Qwen3)");
  const json j = parse_json_object(text, path);
  for (const auto& item : j.items())
    if (!kKnownKeys.count(item.key()))
      throw Error(path + ": key '" + item.key() +
                  "' is not one of the book's Llama3Model / Qwen3Model config keys (vocab_size, context_length, "
                  "emb_dim, n_heads, n_layers, hidden_dim, n_kv_groups, rope_base, dtype, rope_freq, head_dim, "
                  "qk_norm)");
  // Qwen3Model's configs carry head_dim and qk_norm (ref: is_qwen3_config).
  const bool qwen = j.contains("qk_norm") || j.contains("head_dim");
  const char* family = qwen ? "Qwen3Model" : "Llama3Model";

  MappedModel out;
  ModelConfig& c = out.config;
  try {
    c.vocab_size = json_u32(j, "vocab_size", path);
    c.n_ctx = json_u32(j, "context_length", path);
    c.n_embd = json_u32(j, "emb_dim", path);
    c.n_head = json_u32(j, "n_heads", path);
    c.n_layer = json_u32(j, "n_layers", path);
    c.n_ff = json_u32(j, "hidden_dim", path);
    c.n_kv_head = json_u32(j, "n_kv_groups", path);
    if (in.n_head && in.n_head != c.n_head)
      throw Error(path + ": n_heads is " + std::to_string(c.n_head) + " but --n-head says " +
                  std::to_string(in.n_head));
    if (c.n_head % c.n_kv_head != 0)
      throw Error(path + ": n_heads " + std::to_string(c.n_head) + " is not a multiple of n_kv_groups " +
                  std::to_string(c.n_kv_head));
    const bool explicit_head_dim = qwen && j.contains("head_dim") && !j["head_dim"].is_null();
    if (!explicit_head_dim && c.n_embd % c.n_head != 0)
      throw Error(path + ": emb_dim " + std::to_string(c.n_embd) + " is not a multiple of n_heads " +
                  std::to_string(c.n_head));
    c.head_dim = explicit_head_dim ? json_u32(j, "head_dim", path) : c.n_embd / c.n_head;
    c.norm = NormKind::RmsNorm;
    c.norm_bias = false;
    c.norm_eps = qwen ? 1e-6f : 1e-5f;
    c.pos_embedding = PosEmbedding::Rotary;
    c.rope_dims = c.head_dim;
    c.rope_theta = json_number(j, "rope_base", path);
    if (!qwen && j.contains("rope_freq") && !j["rope_freq"].is_null()) {
      const json& f = j["rope_freq"];
      if (!f.is_object()) throw Error(path + ": rope_freq is " + f.dump() + ", expected an object or null");
      const std::string where = path + ": rope_freq";
      c.rope_scaling = RopeScaling::Llama3;
      c.rope_factor = static_cast<float>(json_number(f, "factor", where));
      c.rope_low_freq_factor = static_cast<float>(json_number(f, "low_freq_factor", where));
      c.rope_high_freq_factor = static_cast<float>(json_number(f, "high_freq_factor", where));
      c.rope_original_ctx = json_u32(f, "original_context_length", where);
    } else if (qwen && j.contains("rope_freq") && !j["rope_freq"].is_null()) {
      throw Error(path + ": rope_freq is set, but Qwen3Model has no frequency scaling");
    }
    c.gelu = GeluKind::Silu;
    c.mlp_gated = true;
    c.qkv_bias = c.linear_bias = false;
    c.mlp_bias = false;
    c.qk_norm = qwen && json_bool(j, "qk_norm", false, path) ? QkNorm::Weighted : QkNorm::None;
    validate_config(c, path);  // bounds every size before anything is built from it
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": " + e.what());
  }

  TensorTaker taker(*in.weights, in.file, "llms-from-scratch");
  const std::string np = norm_suffix(*in.weights, in.file);
  const uint64_t d = c.n_embd, v = c.vocab_size, ff = c.n_ff, hd = c.head_size(), q = c.q_width(), kv = c.kv_width();
  std::vector<std::string> needed = {"tok_emb.weight", "final_norm" + np};
  for (uint32_t i = 0; i < c.n_layer; ++i) {
    const std::string p = "trf_blocks." + std::to_string(i) + ".";
    for (const char* name : {"att.W_query.weight", "att.W_key.weight", "att.W_value.weight", "att.out_proj.weight",
                             "ff.fc1.weight", "ff.fc2.weight", "ff.fc3.weight"})
      needed.push_back(p + name);
    needed.push_back(p + "norm1" + np);
    needed.push_back(p + "norm2" + np);
  }
  taker.require(needed);
  const uint32_t layers = count_layers(*in.weights, "trf_blocks.", in.file);
  if (layers != c.n_layer)
    throw Error(in.file + ": has " + std::to_string(layers) + " blocks but " + path + " says n_layers " +
                std::to_string(c.n_layer));

  TensorPtr wte = taker.take("tok_emb.weight", {v, d});
  out.tensors.emplace_back("wte", wte);
  taker.ignore("mask");  // a persistent buffer of one older version
  for (uint32_t i = 0; i < c.n_layer; ++i) {
    const std::string p = "trf_blocks." + std::to_string(i) + ".", h = "h." + std::to_string(i) + ".";
    out.tensors.emplace_back(h + "ln_1.weight", taker.take(p + "norm1" + np, {d}));
    out.tensors.emplace_back(h + "attn.qkv.weight", concat_rows({taker.take(p + "att.W_query.weight", {q, d}),
                                                                 taker.take(p + "att.W_key.weight", {kv, d}),
                                                                 taker.take(p + "att.W_value.weight", {kv, d})}));
    if (c.qk_norm == QkNorm::Weighted) {
      out.tensors.emplace_back(h + "attn.q_norm.weight", taker.take(p + "att.q_norm" + np, {hd}));
      out.tensors.emplace_back(h + "attn.k_norm.weight", taker.take(p + "att.k_norm" + np, {hd}));
    }
    out.tensors.emplace_back(h + "attn.proj.weight", taker.take(p + "att.out_proj.weight", {d, q}));
    out.tensors.emplace_back(h + "ln_2.weight", taker.take(p + "norm2" + np, {d}));
    out.tensors.emplace_back(h + "mlp.fc.weight", concat_rows({taker.take(p + "ff.fc1.weight", {ff, d}),
                                                               taker.take(p + "ff.fc2.weight", {ff, d})}));
    out.tensors.emplace_back(h + "mlp.proj.weight", taker.take(p + "ff.fc3.weight", {d, ff}));
    // Buffers older versions of the chapters saved with every block.
    for (const char* buffer : {"att.mask", "att.cos", "att.sin"}) taker.ignore(p + buffer);
  }
  out.tensors.emplace_back("ln_f.weight", taker.take("final_norm" + np, {d}));
  // The head: the embedding itself (tied, stored twice or not at all) or its own.
  c.tied_lm_head = true;
  if (taker.has("out_head.weight")) {
    TensorPtr head = taker.take("out_head.weight", {v, d});
    if (!same_values(*head, *wte)) {
      c.tied_lm_head = false;
      out.tensors.emplace_back("lm_head.weight", head);
    }
  }
  taker.finish();
  out.notes.push_back(std::string(family) + " (LLMs from scratch): " + std::to_string(c.n_layer) + " blocks, " +
                      std::to_string(c.n_head) + " heads (" + std::to_string(c.kv_heads()) + " key/value groups) of " +
                      std::to_string(c.head_size()) + (c.tied_lm_head ? ", out_head tied to tok_emb" : ""));
  return out;
}

}  // namespace mmgpt::convert
