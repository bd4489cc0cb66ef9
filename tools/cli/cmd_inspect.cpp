// mmgpt inspect: what a .mmgpt file holds (config, tokenizer, every tensor).
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/graph.hpp"
#include "engine/mmgpt.hpp"
#include "formats/error.hpp"
#include "formats/mmgpt_file_rules.hpp"
#include "kernels/kernels.hpp"
#include "tools/cli/commands.hpp"
#include "tools/cli/validate.hpp"

namespace mmgpt::cli {

namespace {

const char* tokenizer_name(TokenizerKind k) {
  switch (k) {
    case TokenizerKind::None: return "none";
    case TokenizerKind::Char: return "char";
    case TokenizerKind::Gpt2Bpe: return "gpt2-bpe";
    case TokenizerKind::Bpe: return "bpe";
  }
  return "?";
}
std::string dtype_name(WeightType d) { return std::string(weight_type_name(d)); }

// "f32 (12 tensors, 1234 bytes), bf16 (...)": the bytes per dtype, in id order.
std::string dtype_summary(const ModelFile& f) {
  std::string s;
  for (uint32_t id = 0; const WeightTypeInfo* t = weight_type_by_id(id); ++id) {
    size_t n = 0;
    uint64_t bytes = 0;
    for (const TensorView& v : f.tensors())
      if (v.dtype == t->type) ++n, bytes += v.nbytes;
    if (n == 0) continue;
    s += std::string(s.empty() ? "" : ", ") + std::string(t->name) + " (" + std::to_string(n) + " tensors, " +
         std::to_string(bytes) + " bytes)";
  }
  return s;
}
// The in-memory layout: "row-major", or "panel16" for a matrix packed in any of its dtype's panels.
const char* layout_name(Layout l) { return mmgpt::layout_name(static_cast<uint32_t>(l)); }

std::string shape_string(const std::vector<uint64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

nlohmann::json to_json(const ModelFile& f) {
  const ModelConfig& c = f.config();
  nlohmann::json j;
  j["file"] = f.path();
  j["kernel_isa"] = std::string(kernels::isa_name());
  j["quant_kernel_isa"] = std::string(kernels::quant_isa_name());
  j["bf16_kernel_isa"] = std::string(kernels::bf16_isa_name());
  j["decode_prefetch"] = std::string(kernels::decode_prefetch_setting());
  j["format_version"] = f.version();
  j["file_bytes"] = f.file_size();
  j["config"] = {{"n_layer", c.n_layer},
                 {"n_head", c.n_head},
                 {"n_embd", c.n_embd},
                 {"n_ff", c.n_ff},
                 {"n_ctx", c.n_ctx},
                 {"vocab_size", c.vocab_size},
                 {"norm_eps", c.norm_eps},
                 {"qkv_bias", c.qkv_bias},
                 {"linear_bias", c.linear_bias},
                 {"norm_bias", c.norm_bias},
                 {"tied_lm_head", c.tied_lm_head},
                 {"gelu", activation_name(c.gelu)},
                 {"pos_embedding", c.pos_embedding == PosEmbedding::Rotary ? "rotary" : "learned"},
                 {"norm", c.norm == NormKind::RmsNorm ? "rmsnorm" : "layernorm"},
                 {"norm_weight", c.norm_weight},
                 {"n_kv_head", c.kv_heads()},
                 {"head_dim", c.head_size()},
                 {"mlp_bias", c.has_mlp_bias()},
                 {"mlp_gated", c.mlp_gated},
                 {"parallel_residual", c.parallel_residual},
                 {"qk_norm", c.qk_norm == QkNorm::Weighted ? "weighted"
                             : c.qk_norm == QkNorm::Plain  ? "plain"
                                                           : "none"},
                 {"attn_scale", c.scores_scale()},
                 {"logit_softcap", c.logit_softcap}};
  if (c.pos_embedding == PosEmbedding::Rotary)
    j["config"]["rope"] = {{"dims", c.rope_dims},
                           {"theta", c.rope_theta},
                           {"interleaved", c.rope_interleaved},
                           {"inverse", c.rope_inverse},
                           {"scaling", c.rope_scaling == RopeScaling::Llama3 ? "llama3" : "none"},
                           {"factor", c.rope_factor},
                           {"low_freq_factor", c.rope_low_freq_factor},
                           {"high_freq_factor", c.rope_high_freq_factor},
                           {"original_context", c.rope_original_ctx}};
  if (c.has_block_v2()) {
    nlohmann::json windows = nlohmann::json::array(), ve = nlohmann::json::array();
    for (uint32_t i = 0; i < c.n_layer; ++i) windows.push_back(c.window_of(i)), ve.push_back(c.has_value_embed(i));
    j["config"]["embed_norm"] = c.embed_norm;
    j["config"]["smear_channels"] = c.smear_channels;
    j["config"]["resid_mix"] = c.resid_mix;
    j["config"]["backout_after"] = c.backout_after;
    j["config"]["ve_gate_channels"] = c.ve_gate_channels;
    j["config"]["ve_gate_range"] = c.ve_gate_range;
    j["config"]["attn_window"] = windows;
    j["config"]["value_embed"] = ve;
  }
  const TokenizerData& t = f.tokenizer();
  j["tokenizer"] = {
      {"kind", tokenizer_name(t.kind)}, {"tokens", t.tokens.size()}, {"merges", t.merges.size()}, {"eos_id", t.eos_id}};
  nlohmann::json tensors = nlohmann::json::array();
  uint64_t params = 0;
  for (const TensorView& v : f.tensors()) {
    tensors.push_back({{"name", v.name},
                       {"dtype", dtype_name(v.dtype)},
                       {"layout", layout_name(v.layout)},
                       {"shape", v.shape},
                       {"offset", v.offset},
                       {"bytes", v.nbytes}});
    params += v.numel();
  }
  j["parameters"] = params;
  nlohmann::json dtypes = nlohmann::json::object();
  for (const TensorView& v : f.tensors()) {
    nlohmann::json& e = dtypes[dtype_name(v.dtype)];
    if (e.is_null()) e = {{"tensors", 0}, {"bytes", 0}};
    e["tensors"] = e["tensors"].get<uint64_t>() + 1;
    e["bytes"] = e["bytes"].get<uint64_t>() + v.nbytes;
  }
  j["dtypes"] = dtypes;
  j["tensors"] = tensors;
  return j;
}

void print_text(const ModelFile& f) {
  const ModelConfig& c = f.config();
  const TokenizerData& t = f.tokenizer();
  uint64_t params = 0;
  for (const TensorView& v : f.tensors()) params += v.numel();
  std::printf("file          %s (%llu bytes, format version %u)\n", f.path().c_str(),
              static_cast<unsigned long long>(f.file_size()), f.version());
  std::printf(
      "kernels       %s, quantized %s, bf16 %s, decode prefetch %s (chosen for this CPU; "
      "MMGPT_ISA=scalar|avx2|avx512|neon, MMGPT_BF16DOT=0|1 and MMGPT_DECODE_PREFETCH=nta|t0|none force them)\n",
      std::string(kernels::isa_name()).c_str(), std::string(kernels::quant_isa_name()).c_str(),
      kernels::describe_bf16().c_str(), kernels::describe_decode_prefetch().c_str());
  std::printf("model         GPT: %u layers, %u heads, width %u, MLP width %u, context %u, vocabulary %u\n", c.n_layer,
              c.n_head, c.n_embd, c.n_ff, c.n_ctx, c.vocab_size);
  if (c.is_gpt2_block()) {
    std::printf("              %llu parameters, layer-norm eps %g, GELU %s, LM head %s\n",
                static_cast<unsigned long long>(params), c.norm_eps, c.gelu == GeluKind::Erf ? "erf (exact)" : "tanh",
                c.tied_lm_head ? "tied to wte" : "separate");
    std::printf("              biases: qkv %s, linear %s, norm %s; positions: learned\n", c.qkv_bias ? "yes" : "no",
                c.linear_bias ? "yes" : "no", c.norm_bias ? "yes" : "no");
  } else {
    std::printf("              %llu parameters, %s eps %g%s, LM head %s\n", static_cast<unsigned long long>(params),
                c.norm == NormKind::RmsNorm ? "RMS norm" : "layer norm", c.norm_eps,
                c.norm_weight ? "" : " (no weight)", c.tied_lm_head ? "tied to wte" : "separate");
    std::printf("attention     %u query heads, %u key/value heads, head_dim %u, scale %g%s%s\n", c.n_head, c.kv_heads(),
                c.head_size(), c.scores_scale(),
                c.qk_norm == QkNorm::None       ? ""
                : c.qk_norm == QkNorm::Weighted ? ", QK-norm (weighted)"
                                                : ", QK-norm",
                c.qk_norm != QkNorm::None && c.qk_norm_after_rope ? " after the rotation" : "");
    if (c.pos_embedding == PosEmbedding::Rotary)
      std::printf("positions     rotary on %u of %u dims, theta %g, %s pairs%s%s\n", c.rope_dims, c.head_size(),
                  c.rope_theta, c.rope_interleaved ? "interleaved" : "split-half", c.rope_inverse ? ", inverse" : "",
                  c.rope_scaling == RopeScaling::Llama3 ? ", llama3 scaling" : "");
    else
      std::printf("positions     learned\n");
    std::printf("MLP           %s %s, biases: qkv %s, attention out %s, MLP %s, norm %s%s%s\n",
                c.mlp_gated ? "gated" : "plain", activation_name(c.gelu), c.qkv_bias ? "yes" : "no",
                c.linear_bias ? "yes" : "no", c.has_mlp_bias() ? "yes" : "no", c.norm_bias ? "yes" : "no",
                c.parallel_residual ? "; parallel residual" : "",
                c.logit_softcap > 0 ? ("; logit softcap " + std::to_string(c.logit_softcap)).c_str() : "");
    if (c.has_block_v2()) {
      std::string windows, ve;
      for (uint32_t i = 0; i < c.n_layer; ++i) {
        windows += (i ? "," : "") + (c.window_of(i) ? std::to_string(c.window_of(i)) : std::string("all"));
        if (c.has_value_embed(i)) ve += (ve.empty() ? "" : ",") + std::to_string(i);
      }
      std::printf("residual      %s%s%s%s\n", c.embed_norm ? "norm after the embedding" : "no norm after the embedding",
                  c.smear_channels ? ("; smear of the previous token (gate on " + std::to_string(c.smear_channels) +
                                      " channels)")
                                         .c_str()
                                   : "",
                  c.resid_mix ? "; mixed with the embedding before each layer" : "",
                  c.backout_after ? ("; backout of the stream after " + std::to_string(c.backout_after) + " layers").c_str()
                                  : "");
      std::printf("windows       per layer: %s positions\n", windows.c_str());
      if (!ve.empty())
        std::printf("value embeds  layers %s (gate on %u channels, range %g)\n", ve.c_str(), c.ve_gate_channels,
                    c.ve_gate_range);
    }
  }
  if (t.kind == TokenizerKind::None)
    std::printf("tokenizer     none (the model runs on token ids)\n");
  else
    std::printf("tokenizer     %s, %zu tokens, %zu merges, end-of-text id %lld\n", tokenizer_name(t.kind),
                t.tokens.size(), t.merges.size(), static_cast<long long>(t.eos_id));
  std::printf("tensors       %zu: %s\n", f.tensors().size(), dtype_summary(f).c_str());
  for (const TensorView& v : f.tensors())
    std::printf("  %-28s %-4s %-10s %-16s %12llu bytes @ %llu\n", v.name.c_str(), dtype_name(v.dtype).c_str(),
                layout_name(v.layout), shape_string(v.shape).c_str(), static_cast<unsigned long long>(v.nbytes),
                static_cast<unsigned long long>(v.offset));
}

}  // namespace

void add_inspect(CLI::App& app) {
  struct Args {
    std::string model;
    bool json = false, graph = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("inspect", "show a model file's config, tokenizer and tensors");
  cmd->add_option("model", a->model, "model file (.mmgpt)")->required()->check(non_empty("path"));
  cmd->add_flag("--json", a->json, "print JSON");
  cmd->add_flag("--graph", a->graph, "also print the forward-pass graph");
  cmd->callback([a]() {
    const LanguageModel lm = LanguageModel::load(a->model);
    const Model* model = &lm.model();
    if (a->json) {
      nlohmann::json j = to_json(model->file());
      if (a->graph) j["graph"] = build_gpt_graph(*model).to_string();
      std::cout << j.dump(2) << "\n";
    } else {
      print_text(model->file());
      if (a->graph) std::cout << "graph\n" << build_gpt_graph(*model).to_string();
    }
  });
}

}  // namespace mmgpt::cli
