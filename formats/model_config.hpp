#pragma once
// What a GPT model is, independent of where its weights came from: the
// architecture hyper-parameters, the tokenizer, and the canonical tensor
// names and shapes the engine expects. Shared by the converter (which fills
// it), the .mmgpt writer/reader (which store and validate it) and the engine
// (which builds the forward pass from it).
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/weight_type.hpp"

namespace mmgpt {

// The MLP's activation (named for GPT-2's, a GELU): the exact erf GELU,
// GPT-2's tanh approximation, SiLU (SwiGLU's gate), or ReLU squared (nanochat).
enum class GeluKind : uint32_t { Erf = 0, Tanh = 1, Silu = 2, ReluSquared = 3 };
// Absolute learned positions (wpe), or rotary positions applied to the
// queries and keys (the rope_* fields; needs the block section).
enum class PosEmbedding : uint32_t { Learned = 0, Rotary = 1 };
enum class NormKind : uint32_t { LayerNorm = 0, RmsNorm = 1 };
// Rotary frequencies: theta^(-2i/rope_dims), or rescaled as Llama 3.1 does.
enum class RopeScaling : uint32_t { None = 0, Llama3 = 1 };
// Per-head RMS norm of the queries and keys: none, with a learned weight
// [head_dim] (Qwen3), or without one (nanochat).
enum class QkNorm : uint32_t { None = 0, Weighted = 1, Plain = 2 };

// "erf", "tanh", "silu", "relu2"
const char* activation_name(GeluKind kind);

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

  // The block's parts beyond GPT-2's. Defaults are GPT-2's; a config that
  // keeps them all (is_gpt2_block) is stored without the block section, so
  // GPT-2 files are byte-identical to those of earlier versions.
  NormKind norm = NormKind::LayerNorm;
  bool norm_weight = true;         // norms scale by a learned weight
  uint32_t n_kv_head = 0;          // key/value heads (GQA, MQA); 0: n_head
  uint32_t head_dim = 0;           // 0: n_embd / n_head
  std::optional<bool> mlp_bias;    // the MLP linears' bias; unset: linear_bias
  bool mlp_gated = false;          // mlp.fc holds [gate; up] rows: act(gate) * up
  bool parallel_residual = false;  // x + attn(ln_1(x)) + mlp(ln_2(x)) (GPT-NeoX)
  uint32_t rope_dims = 0;          // rotary: the first rope_dims dims of each head (even)
  bool rope_interleaved = false;   // pairs (2i, 2i+1); else (i, i + rope_dims/2)
  bool rope_inverse = false;       // rotate by -angle (nanochat's convention)
  double rope_theta = 10000.0;     // base of the frequencies
  RopeScaling rope_scaling = RopeScaling::None;
  float rope_factor = 1.0f, rope_low_freq_factor = 1.0f, rope_high_freq_factor = 1.0f;  // Llama3 scaling
  uint32_t rope_original_ctx = 0;                                                       // Llama3 scaling
  QkNorm qk_norm = QkNorm::None;
  bool qk_norm_after_rope = false;  // nanochat; Qwen3 norms before the rotation
  float qk_norm_scale = 1.0f;       // the normed queries and keys are multiplied by this
  float attn_scale = 0.0f;          // scores scale; 0: 1/sqrt(head_dim)
  float logit_softcap = 0.0f;       // logits = c * tanh(logits / c); 0: none

  // nanochat's additions (block section version 2). x0 is the residual
  // stream as the embedding (and smear) leave it.
  bool embed_norm = false;             // the norm ln_e right after the embedding (weight / bias as the others')
  uint32_t smear_channels = 0;         // t > 0: x[t] += smear.lambda * sigmoid(smear.gate . x[t][:c]) * x[t-1]
  bool resid_mix = false;              // before layer i: x = resid_lambdas[i] * x + x0_lambdas[i] * x0
  uint32_t backout_after = 0;          // before ln_f: x -= backout_lambda * (x after this many layers); 0: none
  uint32_t ve_gate_channels = 0;       // value embeddings: v += range * sigmoid(ve_gate . h[:c]) * ve[id], per head
  float ve_gate_range = 0.0f;
  std::vector<uint32_t> attn_window;   // per layer: positions a query sees, itself included (0: all); empty: all
  std::vector<uint8_t> value_embed;    // per layer: 1 if it adds a value embedding; empty: none

  uint32_t kv_heads() const { return n_kv_head ? n_kv_head : n_head; }
  uint32_t head_size() const { return head_dim ? head_dim : n_embd / n_head; }
  uint64_t q_width() const { return uint64_t(n_head) * head_size(); }       // query features (the attention output's)
  uint64_t kv_width() const { return uint64_t(kv_heads()) * head_size(); }  // key (or value) features
  bool has_mlp_bias() const { return mlp_bias.value_or(linear_bias); }
  float scores_scale() const;  // attn_scale, or 1/sqrt(head_size())
  bool is_gpt2_block() const;  // every field above at its default (and no rotary positions)
  bool has_block_v2() const;   // a field of nanochat's additions is set (block section version 2)
  uint32_t window_of(uint32_t layer) const { return attn_window.empty() ? 0 : attn_window[layer]; }
  bool has_value_embed(uint32_t layer) const { return !value_embed.empty() && value_embed[layer] != 0; }
};

// Bpe: a Hugging Face tokenizer.json with a BPE model (text/hf_tokenizer.hpp),
// its tokens and merges here and the rest of its pipeline as JSON.
enum class TokenizerKind : uint32_t { None = 0, Char = 1, Gpt2Bpe = 2, Bpe = 3 };

struct TokenizerData {
  TokenizerKind kind = TokenizerKind::None;
  // id -> token. Char: the UTF-8 bytes of that character (nanoGPT's itos).
  // Gpt2Bpe: the token as written in vocab.json/encoder.json (byte-to-unicode form, UTF-8).
  std::vector<std::string> tokens;
  // Bpe: the model vocabulary's spelling of the token, or the added token's content.
  // Gpt2Bpe and Bpe: merge rules in rank order (vocab.bpe / merges.txt lines without the header).
  std::vector<std::pair<std::string, std::string>> merges;
  // Bpe: each merge rule's rank when rules share ranks (tiktoken files: every
  // split of a token merges at the token's rank); empty: a rule's rank is its index.
  std::vector<int32_t> merge_ranks;
  int64_t eos_id = -1;  // end-of-text token id, or -1 when the vocabulary has none
  // Bpe only: tokenizer.json without the model's vocab and merges (normalizer,
  // pre-tokenizer, added tokens, post-processor, decoder, model options), as JSON text.
  std::string pipeline;
  // Bpe only, what the tokenizer's tables hold beside the merges (filled by
  // the reader of tokenizer.json, text/tokenizer_json.hpp): id -> the token's
  // key in the model's space (raw bytes for byte-level BPE, the spelling
  // otherwise; empty: an added token outside the model's vocabulary), id ->
  // the bytes it shows as on its own, and each byte's token (-1: none).
  std::vector<std::string> keys;
  std::vector<std::string> bytes;
  std::array<int32_t, 256> byte_ids{};
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
// under its canonical .mmgpt name (q = n_head * head_dim, kv = n_kv_head *
// head_dim; GPT-2: q = kv = d):
//   wte [vocab, d], wpe [ctx, d] (learned positions),
//   h.N.ln_1.weight [d] (if norm_weight) (+ .bias),
//   h.N.attn.qkv.weight [q + 2 kv, d] (+ .bias if qkv_bias): the rows of Q, then K, then V,
//   h.N.attn.q_norm.weight, h.N.attn.k_norm.weight [head_dim] (QkNorm::Weighted),
//   h.N.attn.proj.weight [d, q] (+ .bias), h.N.ln_2.weight [d] (+ .bias),
//   h.N.mlp.fc.weight [ff, d] (gated: [2 ff, d], the gate's rows then the up's) (+ .bias),
//   h.N.mlp.proj.weight [d, ff] (+ .bias [d]),
//   ln_f.weight [d] (+ .bias), lm_head.weight [vocab, d] unless tied;
// and nanochat's: ln_e.weight [d] (+ .bias) (embed_norm, norm_weight),
//   smear.gate.weight [smear_channels], smear.lambda [1], resid_lambdas [n_layer],
//   x0_lambdas [n_layer], backout_lambda [1], h.N.attn.ve.weight [vocab, kv] (a
//   matrix, like wte) and h.N.attn.ve_gate.weight [n_kv_head, ve_gate_channels].
// Matrices are [out, in]: y = x W^T + b, the PyTorch nn.Linear convention.
std::vector<TensorSpec> required_tensors(const ModelConfig& config);

// Checks the config's own consistency (non-zero sizes, n_embd divisible by n_head,
// sane eps, known enum values). Throws mmgpt::Error naming `source` and the field.
void validate_config(const ModelConfig& config, const std::string& source);

}  // namespace mmgpt
