// Hugging Face GPT-2 (GPT2LMHeadModel): Conv1D matrices stored [in, out],
// keys with or without the "transformer." prefix (the original GPT-2
// pytorch_model.bin has none), hyper-parameters in config.json beside the
// checkpoint.
#include <nlohmann/json.hpp>

#include "formats/error.hpp"
#include "formats/file_util.hpp"
#include "tools/convert/json_fields.hpp"
#include "tools/convert/layout_gpt2_common.hpp"

namespace mmgpt::convert {

namespace {

using nlohmann::json;

// Fills n_head, eps, GELU from config.json and checks every size it states
// against the tensors.
void apply_config_json(const std::string& path, const Gpt2Shapes& shapes, uint32_t n_head_option, ModelConfig& c) {
  const json j = read_json_object(path);

  if (j.contains("model_type") && j["model_type"] != "gpt2")
    throw Error(path + ": model_type is " + j["model_type"].dump() + ", layout hf-gpt2 converts only \"gpt2\"");
  // Variants that change the arithmetic the engine implements.
  if (j.value("scale_attn_weights", true) != true) throw Error(path + ": scale_attn_weights false is not supported");
  if (j.value("scale_attn_by_inverse_layer_idx", false) != false)
    throw Error(path + ": scale_attn_by_inverse_layer_idx true is not supported");

  auto check = [&](const char* key, uint32_t stated, uint32_t actual, const char* what) {
    if (stated != actual)
      throw Error(path + ": " + key + " is " + std::to_string(stated) + " but the checkpoint's tensors have " + what +
                  " " + std::to_string(actual));
  };
  for (const char* key : {"n_layer", "n_head", "n_embd", "vocab_size"})
    if (!j.contains(key)) throw Error(path + ": field '" + std::string(key) + "' is missing");
  check("n_layer", json_u32(j, "n_layer", path), shapes.n_layer, "layers:");
  check("n_embd", json_u32(j, "n_embd", path), shapes.n_embd, "width");
  check("vocab_size", json_u32(j, "vocab_size", path), shapes.vocab, "vocabulary rows");
  const char* ctx_key = j.contains("n_positions") ? "n_positions" : j.contains("n_ctx") ? "n_ctx" : nullptr;
  if (!ctx_key) throw Error(path + ": field 'n_positions' (or 'n_ctx') is missing");
  check(ctx_key, json_u32(j, ctx_key, path), shapes.n_ctx, "position rows");
  if (j.contains("n_inner") && !j["n_inner"].is_null())
    check("n_inner", json_u32(j, "n_inner", path), shapes.n_ff, "MLP width");
  else if (uint64_t(shapes.n_ff) != 4 * uint64_t(shapes.n_embd))
    check("n_inner (null: 4 * n_embd)", 4 * shapes.n_embd, shapes.n_ff, "MLP width");

  c.n_head = json_u32(j, "n_head", path);
  if (n_head_option && n_head_option != c.n_head)
    throw Error(path + ": n_head is " + std::to_string(c.n_head) + " but --n-head says " +
                std::to_string(n_head_option));

  if (j.contains("layer_norm_epsilon")) {
    const json& e = j["layer_norm_epsilon"];
    if (!e.is_number() || !(e.get<double>() > 0) || e.get<double>() > 1)
      throw Error(path + ": layer_norm_epsilon is " + e.dump() + ", expected a small positive number");
    c.norm_eps = float(e.get<double>());
  }
  const std::string act = j.contains("activation_function") && j["activation_function"].is_string()
                              ? j["activation_function"].get<std::string>()
                              : std::string("gelu_new");
  if (j.contains("activation_function") && !j["activation_function"].is_string())
    throw Error(path + ": activation_function is " + j["activation_function"].dump() + ", expected a string");
  if (act == "gelu_new" || act == "gelu_pytorch_tanh" || act == "gelu_fast")
    c.gelu = GeluKind::Tanh;
  else if (act == "gelu")
    c.gelu = GeluKind::Erf;
  else
    throw Error(path + ": activation_function \"" + act +
                "\" is not supported (gelu_new, gelu_pytorch_tanh, gelu_fast or gelu)");
}

}  // namespace

MappedModel map_hf_gpt2(const LayoutInput& in) {
  TensorTaker taker(*in.weights, in.file, "hf-gpt2");
  Gpt2Naming naming;
  naming.conv1d = true;
  naming.prefix = in.weights->has("transformer.wte.weight") ? "transformer." : "";
  if (naming.prefix.empty() && !in.weights->has("wte.weight"))
    throw Error(in.file + ": not a hf-gpt2 checkpoint: tensor 'transformer.wte.weight' (or 'wte.weight') is missing");
  const Gpt2Shapes shapes = read_gpt2_shapes(taker, *in.weights, naming);

  MappedModel out;
  ModelConfig& c = out.config;
  shapes.apply_to(c);
  c.qkv_bias = c.linear_bias = c.norm_bias = true;  // GPT-2 has every bias
  c.norm_eps = 1e-5f;
  c.gelu = GeluKind::Tanh;

  // Tensors first: a checkpoint of another layout is best explained by the
  // tensor that does not fit, not by a missing config field.
  map_gpt2_tensors(taker, naming, out);

  const std::string config_path = in.directory.empty() ? "" : join_path(in.directory, "config.json");
  if (!config_path.empty() && is_file(config_path)) {
    try {
      apply_config_json(config_path, shapes, in.n_head, c);
    } catch (const nlohmann::json::exception& e) {  // a field of the wrong JSON type
      throw Error(config_path + ": " + e.what());
    }
  } else {
    if (!in.n_head)
      throw Error(in.file + ": no config.json beside the checkpoint, so the head count is unknown: give --n-head");
    c.n_head = in.n_head;
    out.notes.push_back(
        "no config.json beside the checkpoint: n_head from --n-head, layer norm eps 1e-5 and the "
        "tanh GELU (GPT-2's defaults) assumed");
  }
  return out;
}

}  // namespace mmgpt::convert
