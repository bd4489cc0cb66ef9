#pragma once
// What Hugging Face GPT-2 and nanoGPT share: the GPT-2 tensor names
// (wte, wpe, h.N.ln_1, h.N.attn.c_attn, ...). They differ in the orientation
// of the matrices (HF Conv1D stores [in, out], nanoGPT nn.Linear [out, in]),
// in an optional "transformer." prefix, and in where the config comes from.
#include <string>

#include "tools/convert/layout.hpp"

namespace mmgpt::convert {

struct Gpt2Naming {
  std::string prefix;   // "transformer." or "" (the original GPT-2 pytorch_model.bin)
  bool conv1d = false;  // matrices stored [in, out] and transposed on the way
};

// Sizes read off the tensors, before any config file is consulted.
struct Gpt2Shapes {
  uint32_t n_layer = 0, n_embd = 0, n_ctx = 0, vocab = 0, n_ff = 0;

  // Copies the sizes into `c` (the rest of the config is the layout's business).
  void apply_to(ModelConfig& c) const {
    c.n_layer = n_layer;
    c.n_embd = n_embd;
    c.n_ff = n_ff;
    c.n_ctx = n_ctx;
    c.vocab_size = vocab;
  }
};

Gpt2Shapes read_gpt2_shapes(const TensorTaker& taker, const StateDict& weights, const Gpt2Naming& naming);

// Takes every tensor `config` needs (checking shapes), transposes Conv1D
// matrices, decides whether lm_head.weight is tied (absent, or equal to wte)
// or separate, skips the causal-mask buffers, and refuses leftovers.
// Sets config.tied_lm_head.
void map_gpt2_tensors(TensorTaker& taker, const Gpt2Naming& naming, MappedModel& out);

// A 2-D tensor's dims, or an error naming it.
std::pair<uint32_t, uint32_t> dims2(const HostTensor& t, const std::string& name, const std::string& file);

}  // namespace mmgpt::convert
