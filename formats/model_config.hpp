#pragma once
// What a GPT model is, independent of where its weights came from: the
// architecture hyper-parameters, the tokenizer, and the canonical tensor
// names and shapes the engine expects. Shared by the converter (which fills
// it), the .mmgpt writer/reader (which store and validate it) and the engine
// (which builds the forward pass from it).
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/weight_type.hpp"

namespace mmgpt {

enum class GeluKind : uint32_t { Erf = 0, Tanh = 1 };  // exact erf GELU vs GPT-2's tanh approximation
enum class PosEmbedding : uint32_t { Learned = 0 };    // absolute learned positions (wpe)

struct ModelConfig {
  uint32_t n_layer = 0;
  uint32_t n_head = 0;
  uint32_t n_embd = 0;      // model width d
  uint32_t n_ff = 0;        // MLP hidden width (4*d for every GPT-2 style model we know, but stored)
  uint32_t n_ctx = 0;       // context length (rows of wpe)
  uint32_t vocab_size = 0;  // rows of wte and of the LM head (may exceed the tokenizer's size: nanoGPT pads to 50304)
  float norm_eps = 1e-5f;
  bool qkv_bias = true;      // attention Q/K/V projections have a bias
  bool linear_bias = true;   // attention output projection and both MLP linears have a bias
  bool norm_bias = true;     // layer norms have a shift (bias)
  bool tied_lm_head = true;  // LM head reuses wte; otherwise a separate lm_head.weight [vocab, d]
  GeluKind gelu = GeluKind::Tanh;
  PosEmbedding pos_embedding = PosEmbedding::Learned;
};

enum class TokenizerKind : uint32_t { None = 0, Char = 1, Gpt2Bpe = 2 };

struct TokenizerData {
  TokenizerKind kind = TokenizerKind::None;
  // id -> token. Char: the UTF-8 bytes of that character (nanoGPT's itos).
  // Gpt2Bpe: the token as written in vocab.json/encoder.json (byte-to-unicode form, UTF-8).
  std::vector<std::string> tokens;
  // Gpt2Bpe only: merge rules in rank order (vocab.bpe / merges.txt lines without the header).
  std::vector<std::pair<std::string, std::string>> merges;
  int64_t eos_id = -1;  // end-of-text token id, or -1 when the vocabulary has none
};

// How a tensor's elements are arranged (ids are part of the file format).
// RowMajor: plain C order over the shape; matrices are [out, in] so each output row is contiguous.
// Panel16: a matrix [N, K] in the panels the matmul kernels stream (core/panel_layout.hpp,
//   docs/format.md): ceil(N/16) panels, each K steps of 16 consecutive rows' values.
enum class Layout : uint32_t { RowMajor = 0, Panel16 = 1 };

struct TensorSpec {
  std::string name;
  std::vector<uint64_t> shape;
  bool matrix = false;  // a weight the forward pass multiplies by (may be stored as Panel16)
};

// Every tensor a model with this config must have, with the shape it implies,
// under its canonical .mmgpt name:
//   wte [vocab, d], wpe [ctx, d],
//   h.N.ln_1.weight [d] (+ .bias), h.N.attn.qkv.weight [3d, d] (+ .bias [3d] if qkv_bias),
//   h.N.attn.proj.weight [d, d] (+ .bias), h.N.ln_2.weight [d] (+ .bias),
//   h.N.mlp.fc.weight [ff, d] (+ .bias [ff]), h.N.mlp.proj.weight [d, ff] (+ .bias [d]),
//   ln_f.weight [d] (+ .bias), lm_head.weight [vocab, d] unless tied.
// Matrices are [out, in]: y = x W^T + b, the PyTorch nn.Linear convention.
std::vector<TensorSpec> required_tensors(const ModelConfig& config);

// Checks the config's own consistency (non-zero sizes, n_embd divisible by n_head,
// sane eps, known enum values). Throws mmgpt::Error naming `source` and the field.
void validate_config(const ModelConfig& config, const std::string& source);

}  // namespace mmgpt
