#include "tools/convert/layout_gpt2_common.hpp"

#include "formats/error.hpp"
#include "tools/convert/tensor_ops.hpp"

namespace mmgpt::convert {

std::pair<uint32_t, uint32_t> dims2(const HostTensor& t, const std::string& name, const std::string& file) {
  if (t.shape.size() != 2 || t.shape[0] == 0 || t.shape[1] == 0 || t.shape[0] > UINT32_MAX || t.shape[1] > UINT32_MAX)
    throw Error(file + ": tensor '" + name + "' has shape " + shape_str(t.shape) + ", expected a non-empty matrix");
  return {uint32_t(t.shape[0]), uint32_t(t.shape[1])};
}

Gpt2Shapes read_gpt2_shapes(const TensorTaker& taker, const StateDict& weights, const Gpt2Naming& naming) {
  const std::string& p = naming.prefix;
  taker.require({p + "wte.weight", p + "wpe.weight", p + "h.0.mlp.c_fc.weight"});
  Gpt2Shapes s;
  std::tie(s.vocab, s.n_embd) = dims2(taker.peek(p + "wte.weight"), p + "wte.weight", taker.file());
  uint32_t wpe_d = 0;
  std::tie(s.n_ctx, wpe_d) = dims2(taker.peek(p + "wpe.weight"), p + "wpe.weight", taker.file());
  if (wpe_d != s.n_embd)
    throw Error(taker.file() + ": tensor '" + p + "wpe.weight' has width " + std::to_string(wpe_d) + " but '" + p +
                "wte.weight' has " + std::to_string(s.n_embd));
  const auto [fc0, fc1] = dims2(taker.peek(p + "h.0.mlp.c_fc.weight"), p + "h.0.mlp.c_fc.weight", taker.file());
  s.n_ff = naming.conv1d ? fc1 : fc0;  // Conv1D [d, ff] vs Linear [ff, d]; the other dim is checked on take
  s.n_layer = count_layers(weights, p + "h.", taker.file());
  return s;
}

namespace {

struct Source {
  std::string name;             // in the checkpoint
  std::string canonical;        // in the .mmgpt file
  std::vector<uint64_t> shape;  // as stored in the checkpoint
  bool transpose = false;
};

}  // namespace

void map_gpt2_tensors(TensorTaker& taker, const Gpt2Naming& naming, MappedModel& out) {
  ModelConfig& c = out.config;
  const std::string& p = naming.prefix;
  const uint64_t d = c.n_embd, ff = c.n_ff, v = c.vocab_size;
  std::vector<Source> sources;
  auto vec = [&](const std::string& src, const std::string& dst, uint64_t n) {
    sources.push_back({src, dst, {n}, false});
  };
  // A matrix whose canonical shape is [rows, cols] ([out, in]).
  auto mat = [&](const std::string& src, const std::string& dst, uint64_t rows, uint64_t cols) {
    if (naming.conv1d)
      sources.push_back({src, dst, {cols, rows}, true});
    else
      sources.push_back({src, dst, {rows, cols}, false});
  };

  sources.push_back({p + "wte.weight", "wte", {v, d}, false});
  sources.push_back({p + "wpe.weight", "wpe", {c.n_ctx, d}, false});
  for (uint32_t l = 0; l < c.n_layer; ++l) {
    const std::string s = p + "h." + std::to_string(l) + ".";
    const std::string t = "h." + std::to_string(l) + ".";
    vec(s + "ln_1.weight", t + "ln_1.weight", d);
    if (c.norm_bias) vec(s + "ln_1.bias", t + "ln_1.bias", d);
    mat(s + "attn.c_attn.weight", t + "attn.qkv.weight", 3 * d, d);
    if (c.qkv_bias) vec(s + "attn.c_attn.bias", t + "attn.qkv.bias", 3 * d);
    mat(s + "attn.c_proj.weight", t + "attn.proj.weight", d, d);
    if (c.linear_bias) vec(s + "attn.c_proj.bias", t + "attn.proj.bias", d);
    vec(s + "ln_2.weight", t + "ln_2.weight", d);
    if (c.norm_bias) vec(s + "ln_2.bias", t + "ln_2.bias", d);
    mat(s + "mlp.c_fc.weight", t + "mlp.fc.weight", ff, d);
    if (c.linear_bias) vec(s + "mlp.c_fc.bias", t + "mlp.fc.bias", ff);
    mat(s + "mlp.c_proj.weight", t + "mlp.proj.weight", d, ff);
    if (c.linear_bias) vec(s + "mlp.c_proj.bias", t + "mlp.proj.bias", d);
    // Causal-mask buffers (HF, and nanoGPT without flash attention): no weights.
    taker.ignore(s + "attn.bias");
    taker.ignore(s + "attn.masked_bias");
  }
  vec(p + "ln_f.weight", "ln_f.weight", d);
  if (c.norm_bias) vec(p + "ln_f.bias", "ln_f.bias", d);

  std::vector<std::string> names;
  for (const auto& s : sources) names.push_back(s.name);
  taker.require(names);
  for (const auto& s : sources) {
    TensorPtr t = taker.take(s.name, s.shape);
    out.tensors.emplace_back(s.canonical, s.transpose ? transpose2d(t) : t);
  }

  // The LM head: HF safetensors and the original GPT-2 file omit it (tied);
  // torch.save of a tied model stores the shared storage under both names.
  c.tied_lm_head = true;
  if (taker.has("lm_head.weight")) {
    TensorPtr head = taker.take("lm_head.weight", {v, d});
    if (!same_values(*head, *out.tensors[0].second)) {
      c.tied_lm_head = false;
      out.tensors.emplace_back("lm_head.weight", head);
      out.notes.push_back("lm_head.weight differs from wte: stored as a separate LM head");
    }
  }
  taker.finish();
}

}  // namespace mmgpt::convert
