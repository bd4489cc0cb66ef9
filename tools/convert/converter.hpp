#pragma once
// `mmgpt convert`: a PyTorch checkpoint (torch.save zip or legacy file, or
// safetensors) in one of the known layouts, plus its tokenizer files, to one
// .mmgpt file. No Python involved. The CLI parses arguments into
// ConvertOptions, calls convert_checkpoint and prints the summary.
#include <cstdint>
#include <string>
#include <vector>

#include "formats/model_config.hpp"
#include "formats/pickle_value.hpp"

namespace mmgpt {

struct ConvertOptions {
  std::string input;            // a checkpoint file, or a directory holding one (HF style)
  std::string output;           // the .mmgpt file to write (replaced atomically)
  std::string layout = "auto";  // auto | hf-gpt2 | nanogpt | llms-from-scratch
  int n_head = 0;               // --n-head; 0 = not given
  std::string tokenizer;        // --tokenizer PATH; empty = look beside the checkpoint
  // --weight-layout: how weight matrices are stored: panel16, what the
  // kernels stream, the only one written (row-major, which older versions
  // wrote on request, is refused with a message; such files still load).
  std::string weight_layout = "panel16";
  // --dtype: element type of the weight matrices (qkv, attn proj, mlp fc/proj,
  // and wte when it is not the LM head): f32 (default), bf16 or f16, rounded
  // to nearest even. Norms, biases and wpe stay f32. 16-bit needs panel16.
  std::string dtype = "f32";
  // --dtype-head: element type of the LM head (lm_head.weight, or wte when
  // tied); empty = the same as dtype.
  std::string dtype_head;
  // The model's config as JSON text, in place of the config.json beside a
  // checkpoint (the Python package's, for a state dict in memory): a Hugging
  // Face config.json's keys, or the LLMs-from-scratch config dict's. Empty:
  // config.json is read from the checkpoint's directory where a layout needs it.
  std::string config_json;
};

struct ConvertSummary {
  std::string layout;            // the layout used ("hf-gpt2", ...)
  std::string checkpoint;        // the file read
  std::string container;         // "torch zip", "legacy torch.save", "safetensors"
  std::string tokenizer_source;  // file(s) the tokenizer came from; empty when none
  ModelConfig config;
  TokenizerKind tokenizer_kind = TokenizerKind::None;
  size_t tokenizer_size = 0;       // tokens in the vocabulary (0 without a tokenizer)
  std::vector<std::string> notes;  // assumptions and choices the user should know about, one sentence each
  size_t tensors = 0;              // tensors written
  uint64_t bytes = 0;              // tensor data bytes written
};

// Throws mmgpt::Error (one line naming the file and field) on any problem;
// the output file is then left as it was (absent, or the previous file).
ConvertSummary convert_checkpoint(const ConvertOptions& options);

// The same for a checkpoint already in memory (the Python package's): `root`
// is what torch.load would give (a state dict, or a dict holding one under
// 'model' / 'state_dict' / 'model_state_dict', nanoGPT's model_args beside
// it), named `name` in messages. options.input is not read; tokenizer files
// come only from options.tokenizer (or the bundled GPT-2 vocabulary).
ConvertSummary convert_in_memory(const pickle::Value& root, const std::string& name, const ConvertOptions& options);

// The directory of the bundled data files (gpt2/encoder.json, vocab.bpe):
// PREFIX/share/mmgpt for an installed mmgpt, else the source tree's data/
// (MMGPT_DATA_DIR); "" when neither holds them.
std::string bundled_data_dir();
// For a program that carries its own copy (the Python package): bundled_data_dir()
// returns dir when it holds the files. Call before converting.
void set_bundled_data_dir(std::string dir);

}  // namespace mmgpt
