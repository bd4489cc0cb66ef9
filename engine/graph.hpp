#pragma once
// The GPT forward pass as data: a list of ops over named weights and
// activation buffers, built once from the model's config. It can be printed
// (`mmgpt inspect --graph`), and its buffers are planned into one arena
// (a buffer's bytes are reused once it is dead) by plan_buffers().
//
// Buffer sizes are given in rows x width, where the row count is either the
// number of tokens in the step (T) or the number of positions whose logits are
// wanted (R: 1 for generation, T for `mmgpt logits`). The executor plans the
// arena for the (T, R) of each step and caches the plan.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/panel_layout.hpp"
#include "formats/model_config.hpp"
#include "kernels/epilogue.hpp"

namespace mmgpt {

class Model;

enum class OpKind {
  Embed,       // out[t] = wte[id_t] + wpe[pos_t]
  LayerNorm,   // out = layernorm(in; w, b)
  MatMul,      // out = act(in * W^T (+ b)), or out += ...; W panel-packed
  Attention,   // causal self-attention of the qkv rows against the KV cache of `layer`
  SelectRows,  // out = the rows whose logits are wanted: each sequence's last ones
  RmsNorm,     // out = rmsnorm(in; w), w may be absent
  Glu,         // out = act(in[:, :ff]) * in[:, ff:] (the gated MLP)
  Softcap,     // in place: x = cap * tanh(x / cap) (the logits)
  Copy,        // out = in (keeps the residual stream for a later Mix)
  Mix,         // out = alpha * out + beta * in (nanochat's residual mixing and backout)
  Smear,       // in place: x[t] += lambda * sigmoid(gate . x[t][:c]) * x[t-1] (w: gate, b: lambda)
  ValueEmbed,  // out (the qkv rows) v += range * sigmoid(gate . in[:c]) * ve[id] per KV head
};

// "embed", "layernorm", "matmul", "attention", "select_rows", "rmsnorm", "glu", "softcap", "copy", "mix",
// "smear", "value_embed".
const char* op_kind_name(OpKind kind);

enum class Rows { Tokens, LogitRows };

struct BufferSpec {
  std::string name;
  Rows rows = Rows::Tokens;
  size_t width = 0;  // floats per row
};

struct Op {
  OpKind kind = OpKind::Embed;
  std::string label;  // e.g. "h.3.mlp.fc"
  int input = -1;     // buffer ids
  int output = -1;
  std::string weight, bias;  // tensor names in the model file ("" = none)
  const float* w = nullptr;  // an f32 vector weight (a norm's), resolved when the graph is built; null for a matrix
  const float* b = nullptr;
  const void* w_data = nullptr;              // the weight's elements, whatever its type
  WeightType w_type = WeightType::F32;       // Embed, MatMul: the panel-packed matrix's type
  kernels::Epilogue epilogue;                // MatMul: fused GELU and/or residual add
  size_t in_features = 0, out_features = 0;  // MatMul
  int layer = -1;                            // Attention (w, b: the q_norm and k_norm weights, if any)
  kernels::Gate gate = kernels::Gate::Silu;  // Glu
  float alpha = 1, beta = 0;                 // Mix
  size_t channels = 0;                       // Smear, ValueEmbed: the gate's input features
  size_t window = 0;                         // Attention: positions a query sees (0: all)
};

struct Graph {
  std::vector<BufferSpec> buffers;
  std::vector<Op> ops;
  int ids_input = -1;  // the Embed op reads token ids and positions, not a buffer
  int logits = -1;     // buffer holding the [R, vocab] logits

  std::string to_string() const;
};

// Builds the forward pass for `model` (weights resolved by name; throws
// mmgpt::Error if one is missing, which the file validation already rules out).
Graph build_gpt_graph(const Model& model);

// Where each buffer lives in the arena for a step of `tokens` rows and
// `logit_rows` logit rows. Buffers whose lifetimes (first write .. last read,
// in op order) do not overlap may share bytes. Offsets are 64-byte aligned.
struct BufferPlan {
  std::vector<size_t> offsets;  // bytes, per buffer
  std::vector<size_t> sizes;    // bytes, per buffer
  size_t arena_bytes = 0;
};
BufferPlan plan_buffers(const Graph& graph, size_t tokens, size_t logit_rows);

}  // namespace mmgpt
