// Choosing a layout: by name (--layout) or from the tensors themselves.
#include "formats/error.hpp"
#include "formats/file_util.hpp"
#include "tools/convert/layout.hpp"
#include "tools/convert/tensor_ops.hpp"

namespace mmgpt::convert {

const char* layout_name(LayoutKind kind) {
  switch (kind) {
    case LayoutKind::HfGpt2: return "hf-gpt2";
    case LayoutKind::NanoGpt: return "nanogpt";
    case LayoutKind::LlmsFromScratch: return "llms-from-scratch";
    case LayoutKind::HfLlama: return "hf-llama";
    case LayoutKind::HfGptNeox: return "hf-gpt-neox";
    case LayoutKind::Nanochat: return "nanochat";
  }
  return "?";
}

LayoutKind parse_layout_name(const std::string& name) {
  for (LayoutKind k : {LayoutKind::HfGpt2, LayoutKind::NanoGpt, LayoutKind::LlmsFromScratch, LayoutKind::HfLlama,
                       LayoutKind::HfGptNeox, LayoutKind::Nanochat})
    if (name == layout_name(k)) return k;
  throw Error("--layout '" + name +
              "' is not one of auto, hf-gpt2, nanogpt, llms-from-scratch, hf-llama, hf-gpt-neox, nanochat");
}

LayoutKind detect_layout(const StateDict& weights, const std::string& file) {
  if (weights.has("tok_emb.weight") && weights.has("trf_blocks.0.att.W_query.weight"))
    return LayoutKind::LlmsFromScratch;
  if (weights.has("model.embed_tokens.weight") && weights.has("model.layers.0.self_attn.q_proj.weight"))
    return LayoutKind::HfLlama;
  if (weights.has("gpt_neox.embed_in.weight")) return LayoutKind::HfGptNeox;
  if (weights.has("transformer.wte.weight") && weights.has("transformer.h.0.attn.c_q.weight"))
    return LayoutKind::Nanochat;
  // HF and nanoGPT share names; the fused attention matrix tells them apart:
  // Conv1D stores it [d, 3d], nn.Linear [3d, d] (d = the width of wte).
  for (const std::string prefix : {"transformer.", ""}) {
    const HostTensor* wte = weights.find(prefix + "wte.weight");
    const HostTensor* qkv = weights.find(prefix + "h.0.attn.c_attn.weight");
    if (!wte || !qkv || wte->shape.size() != 2 || qkv->shape.size() != 2) continue;
    const uint64_t d = wte->shape[1];
    if (qkv->shape[0] == d && qkv->shape[1] == 3 * d) return LayoutKind::HfGpt2;
    if (qkv->shape[0] == 3 * d && qkv->shape[1] == d && !prefix.empty()) return LayoutKind::NanoGpt;
    throw Error(file + ": tensor '" + prefix + "h.0.attn.c_attn.weight' has shape " + shape_str(qkv->shape) +
                ", neither [d, 3d] (hf-gpt2) nor [3d, d] (nanogpt) for the width d = " + std::to_string(d) + " of '" +
                prefix + "wte.weight'");
  }
  std::vector<std::string> first;
  for (size_t i = 0; i < weights.entries.size() && i < 5; ++i) first.push_back(weights.entries[i].first);
  throw Error(
      file +
      ": unrecognised checkpoint layout (no hf-gpt2, nanogpt, llms-from-scratch, hf-llama, hf-gpt-neox or nanochat "
      "tensor names; "
      "it has " +
      std::to_string(weights.entries.size()) + " tensors, starting with " + name_list(first, 5) + ")");
}

void take_hf_head(TensorTaker& taker, const std::string& head, const std::string& embed_name, const TensorPtr& wte,
                  bool tied, const std::string& config, MappedModel& out) {
  const std::vector<uint64_t>& shape = wte->shape;
  if (!taker.has(head)) {
    if (!tied)
      throw Error(taker.file() + ": tensor '" + head + "' is missing (" + config + " says tie_word_embeddings false)");
    return;
  }
  TensorPtr t = taker.take(head, shape);
  if (!tied) {
    out.tensors.emplace_back("lm_head.weight", t);
  } else if (!same_values(*t, *wte)) {
    throw Error(taker.file() + ": " + head + " differs from " + embed_name + " but " + config +
                " says tie_word_embeddings true");
  }
}

bool find_model_config(const LayoutInput& in, std::string& text, std::string& where) {
  if (!in.config_text.empty()) {
    where = in.file + ": config";
    text = in.config_text;
    return true;
  }
  if (in.directory.empty()) return false;
  where = join_path(in.directory, "config.json");
  if (!is_file(where)) return false;
  text = read_small_file(where, 16 << 20);
  return true;
}

MappedModel map_layout(LayoutKind kind, const LayoutInput& in) {
  switch (kind) {
    case LayoutKind::HfGpt2: return map_hf_gpt2(in);
    case LayoutKind::NanoGpt: return map_nanogpt(in);
    case LayoutKind::LlmsFromScratch: return map_llms_from_scratch(in);
    case LayoutKind::HfLlama: return map_hf_llama(in);
    case LayoutKind::HfGptNeox: return map_hf_gpt_neox(in);
    case LayoutKind::Nanochat: return map_nanochat(in);
  }
  throw Error("internal: unknown layout");
}

}  // namespace mmgpt::convert
