#pragma once
// Source layouts: how a family of checkpoints names and shapes its tensors,
// and how to turn one into the canonical .mmgpt tensors of a ModelConfig.
// One file per layout (layout_hf_gpt2.cpp, layout_nanogpt.cpp,
// layout_llms_from_scratch.cpp, layout_llms_modern.cpp, layout_hf_llama.cpp,
// layout_hf_gpt_neox.cpp, layout_nanochat.cpp); detection in layout_detect.cpp.
#include <string>
#include <utility>
#include <vector>

#include "formats/model_config.hpp"
#include "formats/pickle_value.hpp"
#include "tools/convert/state_dict.hpp"

namespace mmgpt::convert {

enum class LayoutKind { HfGpt2, NanoGpt, LlmsFromScratch, HfLlama, HfGptNeox, Nanochat };

// "hf-gpt2", "nanogpt", "llms-from-scratch", "hf-llama", "hf-gpt-neox", "nanochat"
const char* layout_name(LayoutKind kind);
// "auto" is not a layout: the caller handles it. Throws on unknown names.
LayoutKind parse_layout_name(const std::string& name);

// Guesses the layout from tensor names and the c_attn orientation. Throws
// naming the file when nothing matches.
LayoutKind detect_layout(const StateDict& weights, const std::string& file);

struct LayoutInput {
  std::string file;  // the checkpoint, for messages
  const StateDict* weights = nullptr;
  const pickle::Value* root = nullptr;  // torch files: the top-level object (nanoGPT's model_args), else null
  std::string directory;                // the checkpoint's directory (HF config.json); "" for one in memory
  uint32_t n_head = 0;                  // --n-head, 0 when not given
  std::string config_text;              // the model config as JSON text, given in memory; "" when not
};

struct MappedModel {
  ModelConfig config;
  // Canonical name -> tensor, with the shapes required_tensors(config) implies.
  std::vector<std::pair<std::string, TensorPtr>> tensors;
  std::vector<std::string> notes;
};

MappedModel map_layout(LayoutKind kind, const LayoutInput& in);

// A Hugging Face head `head` [vocab, d] beside the embedding `embed_name`
// (whose tensor is `wte`): absent when tied (safetensors), or the embedding's
// values again (torch.save of a tied model). config.json's
// tie_word_embeddings (`tied`, named by `config`) decides; a head that
// contradicts it is named. An untied head joins out.tensors as lm_head.weight.
void take_hf_head(TensorTaker& taker, const std::string& head, const std::string& embed_name, const TensorPtr& wte,
                  bool tied, const std::string& config, MappedModel& out);

// The model config a layout reads: in.config_text when given, else the
// config.json in in.directory. Sets `where` to what errors name ("FILE:
// config" or the config.json path); false when there is neither.
bool find_model_config(const LayoutInput& in, std::string& text, std::string& where);
MappedModel map_hf_gpt2(const LayoutInput& in);
MappedModel map_nanogpt(const LayoutInput& in);
MappedModel map_llms_from_scratch(const LayoutInput& in);
// The book's Llama3Model / Qwen3Model (map_llms_from_scratch hands them over).
MappedModel map_llms_modern(const LayoutInput& in);
MappedModel map_hf_llama(const LayoutInput& in);
MappedModel map_hf_gpt_neox(const LayoutInput& in);
// nanochat's model_<step>.pt with meta_<step>.json beside it (or in.config_text).
MappedModel map_nanochat(const LayoutInput& in);
// nanochat's per-layer attention windows (GPT._compute_window_sizes) as
// ModelConfig::attn_window values: positions seen, 0 for the whole context.
std::vector<uint32_t> nanochat_windows(const std::string& pattern, uint32_t sequence_len, uint32_t n_layer,
                                       const std::string& where);

}  // namespace mmgpt::convert
