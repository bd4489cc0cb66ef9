// Hugging Face Llama-style causal LMs: LlamaForCausalLM (Llama 2 and 3,
// TinyLlama, SmolLM, SmolLM2), MistralForCausalLM, Qwen2ForCausalLM and
// Qwen3ForCausalLM. One tensor layout (model.embed_tokens, model.layers.N.
// self_attn.{q,k,v,o}_proj, mlp.{gate,up,down}_proj, the two RMS norms,
// model.norm, lm_head); config.json beside the weights says which family and
// its hyper-parameters, read as each family's modeling code reads them.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "formats/error.hpp"
#include "formats/file_util.hpp"
#include "tools/convert/json_fields.hpp"
#include "tools/convert/layout.hpp"
#include "tools/convert/layout_gpt2_common.hpp"
#include "tools/convert/tensor_ops.hpp"

namespace mmgpt::convert {

namespace {

using nlohmann::json;

// What a family's modeling code fixes, beyond config.json.
struct Family {
  const char* model_type;
  const char* architecture;
  bool qkv_bias_always;  // Qwen2: q/k/v always have a bias, o_proj never
  bool reads_attention_bias;
  bool reads_mlp_bias;
  bool qk_norm;       // Qwen3
  bool sliding;       // a sliding_window key the model may use
  bool qwen_sliding;  // ... only with use_sliding_window, on layers >= max_window_layers
};

constexpr Family kFamilies[] = {
    {"llama", "LlamaForCausalLM", false, true, true, false, false, false},
    {"mistral", "MistralForCausalLM", false, false, false, false, true, false},
    {"qwen2", "Qwen2ForCausalLM", true, false, false, false, true, true},
    {"qwen3", "Qwen3ForCausalLM", false, true, false, true, true, true},
};

const Family& family_of(const json& j, const std::string& path) {
  if (!j.contains("model_type") || !j["model_type"].is_string())
    throw Error(path + ": field 'model_type' is missing or not a string");
  const std::string type = j["model_type"].get<std::string>();
  for (const Family& f : kFamilies)
    if (type == f.model_type) {
      if (j.contains("architectures") && j["architectures"].is_array())
        for (const json& a : j["architectures"])
          if (!a.is_string() || a.get<std::string>() != f.architecture)
            throw Error(path + ": architectures is " + j["architectures"].dump() + ", layout hf-llama converts " +
                        f.architecture + " for model_type \"" + type + "\"");
      return f;
    }
  throw Error(path + ": model_type \"" + type +
              "\" is not supported by layout hf-llama (llama, mistral, qwen2, qwen3; gpt2 is layout hf-gpt2)");
}

// rope_scaling: null, {"rope_type" | "type": "default"}, or llama3's.
void apply_rope_scaling(const json& j, const std::string& path, ModelConfig& c) {
  if (!j.contains("rope_scaling") || j["rope_scaling"].is_null()) return;
  const json& s = j["rope_scaling"];
  if (!s.is_object()) throw Error(path + ": rope_scaling is " + s.dump() + ", expected an object or null");
  const json& type = s.contains("rope_type") ? s["rope_type"] : s.contains("type") ? s["type"] : json();
  const std::string name = type.is_string() ? type.get<std::string>() : type.dump();
  if (name == "default") return;
  if (name != "llama3")
    throw Error(path + ": rope_scaling type \"" + name + "\" is not supported (supported: llama3, default)");
  c.rope_scaling = RopeScaling::Llama3;
  c.rope_factor = static_cast<float>(json_number(s, "factor", path + ": rope_scaling"));
  c.rope_low_freq_factor = static_cast<float>(json_number(s, "low_freq_factor", path + ": rope_scaling"));
  c.rope_high_freq_factor = static_cast<float>(json_number(s, "high_freq_factor", path + ": rope_scaling"));
  c.rope_original_ctx = json_u32(s, "original_max_position_embeddings", path + ": rope_scaling");
}

// Mistral's and Qwen's sliding window, per layer as the modeling code
// assigns it: transformers' masking_utils lets query i see keys j with
// j > i - sliding_window, so sliding_window positions, itself included.
// Mistral: every layer (or config.layer_types' "sliding_attention" ones);
// Qwen2 / Qwen3: only with use_sliding_window, then layer_types or the layers
// from max_window_layers on. A window that covers the context is none.
void set_sliding_windows(const json& j, const Family& f, const std::string& path, ModelConfig& c) {
  if (!f.sliding || !j.contains("sliding_window") || j["sliding_window"].is_null()) return;
  if (f.qwen_sliding && !json_bool(j, "use_sliding_window", false, path)) return;
  const uint32_t window = json_u32(j, "sliding_window", path);
  if (c.n_layer > 4096) return;  // validate_config names it
  std::vector<uint32_t> windows(c.n_layer, 0);
  if (j.contains("layer_types") && !j["layer_types"].is_null()) {
    const json& types = j["layer_types"];
    if (!types.is_array() || types.size() != c.n_layer)
      throw Error(path + ": layer_types is not a list of " + std::to_string(c.n_layer) + " layer types");
    for (uint32_t i = 0; i < c.n_layer; ++i) {
      const std::string t = types[i].is_string() ? types[i].get<std::string>() : types[i].dump();
      if (t != "sliding_attention" && t != "full_attention")
        throw Error(path + ": layer_types[" + std::to_string(i) + "] is \"" + t +
                    "\" (supported: sliding_attention, full_attention)");
      if (t == "sliding_attention") windows[i] = window;
    }
  } else if (f.qwen_sliding) {
    uint32_t first = 28;  // Qwen2Config's default
    if (j.contains("max_window_layers") && !j["max_window_layers"].is_null()) {
      const json& m = j["max_window_layers"];
      if (!m.is_number_unsigned() || m.get<uint64_t>() > UINT32_MAX)
        throw Error(path + ": max_window_layers is " + m.dump() + ", expected a layer count");
      first = m.get<uint32_t>();
    }
    for (uint32_t i = first; i < c.n_layer; ++i) windows[i] = window;
  } else {
    windows.assign(c.n_layer, window);
  }
  bool any = false;
  for (uint32_t& w : windows) {
    if (w >= c.n_ctx) w = 0;
    any = any || w != 0;
  }
  if (any) c.attn_window = std::move(windows);
}

}  // namespace

MappedModel map_hf_llama(const LayoutInput& in) {
  std::string text, path;
  if (!find_model_config(in, text, path))
    throw Error(in.file + ": layout hf-llama needs the config.json that Hugging Face saves beside the weights");
  const json j = parse_json_object(text, path);
  const Family& f = family_of(j, path);

  MappedModel out;
  ModelConfig& c = out.config;
  try {
    c.n_layer = json_u32(j, "num_hidden_layers", path);
    c.n_embd = json_u32(j, "hidden_size", path);
    c.n_head = json_u32(j, "num_attention_heads", path);
    c.n_ff = json_u32(j, "intermediate_size", path);
    c.n_ctx = json_u32(j, "max_position_embeddings", path);
    c.vocab_size = json_u32(j, "vocab_size", path);
    c.n_kv_head = j.contains("num_key_value_heads") && !j["num_key_value_heads"].is_null()
                      ? json_u32(j, "num_key_value_heads", path)
                      : c.n_head;
    const bool explicit_head_dim = j.contains("head_dim") && !j["head_dim"].is_null();
    if (!explicit_head_dim && c.n_embd % c.n_head != 0)
      throw Error(path + ": hidden_size " + std::to_string(c.n_embd) + " is not a multiple of num_attention_heads " +
                  std::to_string(c.n_head) + " and there is no head_dim");
    c.head_dim = explicit_head_dim ? json_u32(j, "head_dim", path) : c.n_embd / c.n_head;
    if (c.n_kv_head == 0 || c.n_head % c.n_kv_head != 0)
      throw Error(path + ": num_attention_heads " + std::to_string(c.n_head) +
                  " is not a multiple of num_key_value_heads " + std::to_string(c.n_kv_head));

    c.norm = NormKind::RmsNorm;
    c.norm_bias = false;
    c.norm_eps = static_cast<float>(j.contains("rms_norm_eps") ? json_number(j, "rms_norm_eps", path) : 1e-6);
    c.pos_embedding = PosEmbedding::Rotary;
    c.rope_theta = j.contains("rope_theta") ? json_number(j, "rope_theta", path) : 10000.0;
    const double partial = j.contains("partial_rotary_factor") && !j["partial_rotary_factor"].is_null()
                               ? json_number(j, "partial_rotary_factor", path)
                               : 1.0;
    if (!(partial > 0 && partial <= 1))
      throw Error(path + ": partial_rotary_factor is " + std::to_string(partial) + " (must be in (0, 1])");
    c.rope_dims = static_cast<uint32_t>(static_cast<double>(c.head_dim) * partial);  // int(head_dim * factor)
    c.rope_dims -= c.rope_dims % 2;
    apply_rope_scaling(j, path, c);

    const std::string act = j.contains("hidden_act") && j["hidden_act"].is_string() ? j["hidden_act"].get<std::string>()
                                                                                    : std::string("silu");
    if (act == "silu" || act == "swish")
      c.gelu = GeluKind::Silu;
    else if (act == "gelu")
      c.gelu = GeluKind::Erf;
    else if (act == "gelu_pytorch_tanh" || act == "gelu_new")
      c.gelu = GeluKind::Tanh;
    else
      throw Error(path + ": hidden_act \"" + act + "\" is not supported (silu, gelu, gelu_pytorch_tanh)");
    c.mlp_gated = true;

    const bool attention_bias = f.reads_attention_bias && json_bool(j, "attention_bias", false, path);
    c.qkv_bias = f.qkv_bias_always || attention_bias;
    c.linear_bias = attention_bias;
    c.mlp_bias = f.reads_mlp_bias && json_bool(j, "mlp_bias", false, path);
    c.qk_norm = f.qk_norm ? QkNorm::Weighted : QkNorm::None;
    c.tied_lm_head = json_bool(j, "tie_word_embeddings", false, path);
    set_sliding_windows(j, f, path, c);
    validate_config(c, path);  // bounds every size before anything is built from it
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": " + e.what());
  }

  TensorTaker taker(*in.weights, in.file, "hf-llama");
  const uint64_t d = c.n_embd, v = c.vocab_size, ff = c.n_ff, hd = c.head_size(), q = c.q_width(), kv = c.kv_width();
  auto bias_of = [&](const std::string& w, bool has, uint64_t n) -> TensorPtr {
    return has ? taker.take(w + ".bias", {n}) : nullptr;
  };
  std::vector<std::string> needed = {"model.embed_tokens.weight", "model.norm.weight"};
  for (uint32_t i = 0; i < c.n_layer; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    for (const char* name : {"input_layernorm", "post_attention_layernorm", "self_attn.q_proj", "self_attn.k_proj",
                             "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"})
      needed.push_back(p + name + ".weight");
  }
  taker.require(needed);
  const uint32_t layers = count_layers(*in.weights, "model.layers.", in.file);
  if (layers != c.n_layer)
    throw Error(in.file + ": has " + std::to_string(layers) + " layers but " + path + " says num_hidden_layers " +
                std::to_string(c.n_layer));

  TensorPtr wte = taker.take("model.embed_tokens.weight", {v, d});
  out.tensors.emplace_back("wte", wte);
  for (uint32_t i = 0; i < c.n_layer; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".", h = "h." + std::to_string(i) + ".";
    out.tensors.emplace_back(h + "ln_1.weight", taker.take(p + "input_layernorm.weight", {d}));
    const std::string qp = p + "self_attn.q_proj", kp = p + "self_attn.k_proj", vp = p + "self_attn.v_proj";
    out.tensors.emplace_back(h + "attn.qkv.weight",
                             concat_rows({taker.take(qp + ".weight", {q, d}), taker.take(kp + ".weight", {kv, d}),
                                          taker.take(vp + ".weight", {kv, d})}));
    if (c.qkv_bias)
      out.tensors.emplace_back(h + "attn.qkv.bias",
                               concat_rows({bias_of(qp, true, q), bias_of(kp, true, kv), bias_of(vp, true, kv)}));
    if (c.qk_norm == QkNorm::Weighted) {
      out.tensors.emplace_back(h + "attn.q_norm.weight", taker.take(p + "self_attn.q_norm.weight", {hd}));
      out.tensors.emplace_back(h + "attn.k_norm.weight", taker.take(p + "self_attn.k_norm.weight", {hd}));
    }
    out.tensors.emplace_back(h + "attn.proj.weight", taker.take(p + "self_attn.o_proj.weight", {d, q}));
    if (c.linear_bias) out.tensors.emplace_back(h + "attn.proj.bias", bias_of(p + "self_attn.o_proj", true, d));
    out.tensors.emplace_back(h + "ln_2.weight", taker.take(p + "post_attention_layernorm.weight", {d}));
    out.tensors.emplace_back(h + "mlp.fc.weight", concat_rows({taker.take(p + "mlp.gate_proj.weight", {ff, d}),
                                                               taker.take(p + "mlp.up_proj.weight", {ff, d})}));
    if (c.has_mlp_bias()) {
      out.tensors.emplace_back(h + "mlp.fc.bias", concat_rows({bias_of(p + "mlp.gate_proj", true, ff),
                                                               bias_of(p + "mlp.up_proj", true, ff)}));
    }
    out.tensors.emplace_back(h + "mlp.proj.weight", taker.take(p + "mlp.down_proj.weight", {d, ff}));
    if (c.has_mlp_bias()) out.tensors.emplace_back(h + "mlp.proj.bias", bias_of(p + "mlp.down_proj", true, d));
    taker.ignore(p + "self_attn.rotary_emb.inv_freq");  // a buffer older transformers saved
  }
  out.tensors.emplace_back("ln_f.weight", taker.take("model.norm.weight", {d}));

  take_hf_head(taker, "lm_head.weight", "model.embed_tokens.weight", wte, c.tied_lm_head, path, out);
  taker.finish();
  out.notes.push_back(std::string(f.architecture) + ": " + std::to_string(c.n_layer) + " layers, " +
                      std::to_string(c.n_head) + " heads (" + std::to_string(c.kv_heads()) + " key/value) of " +
                      std::to_string(c.head_size()) + ", rope theta " + std::to_string(c.rope_theta) +
                      (c.rope_scaling == RopeScaling::Llama3 ? " with llama3 scaling" : ""));
  if (!c.attn_window.empty()) {
    uint32_t windowed = 0;
    for (uint32_t w : c.attn_window) windowed += w != 0;
    out.notes.push_back("sliding window of " + std::to_string(*std::max_element(c.attn_window.begin(),
                                                                                 c.attn_window.end())) +
                        " positions on " + std::to_string(windowed) + " of " + std::to_string(c.n_layer) + " layers");
  }
  return out;
}

}  // namespace mmgpt::convert
