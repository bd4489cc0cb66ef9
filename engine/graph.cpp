#include "engine/graph.hpp"

#include <algorithm>
#include <numeric>
#include <sstream>

#include "engine/model.hpp"
#include "formats/error.hpp"

namespace mmgpt {

namespace {

class GraphBuilder {
 public:
  explicit GraphBuilder(const Model& model) : model_(model) {}

  int buffer(std::string name, Rows rows, size_t width) {
    graph_.buffers.push_back({std::move(name), rows, width});
    return static_cast<int>(graph_.buffers.size()) - 1;
  }

  Op& op(OpKind kind, std::string label, int input, int output) {
    Op o;
    o.kind = kind;
    o.label = std::move(label);
    o.input = input;
    o.output = output;
    graph_.ops.push_back(std::move(o));
    return graph_.ops.back();
  }

  // A matrix (panel-packed, of any weight type) or an f32 vector, and a bias
  // ("" for none of either).
  void weights(Op& o, const std::string& w, const std::string& b) {
    if (!w.empty()) {
      o.weight = w;
      const TensorView& t = model_.tensor(w);
      o.w_data = t.data;
      o.w_type = t.dtype;
      o.w = t.layout == Layout::Panel16 ? nullptr : t.f32();
    }
    if (!b.empty()) {
      o.bias = b;
      o.b = model_.weight(b);
    }
  }

  // The config's norm (layer norm or RMS norm, with its weight and bias if it has them).
  int norm(const std::string& name, int input, const ModelConfig& c) {
    int out = buffer(name, graph_.buffers[input].rows, graph_.buffers[input].width);
    Op& o = op(c.norm == NormKind::RmsNorm ? OpKind::RmsNorm : OpKind::LayerNorm, name, input, out);
    weights(o, c.norm_weight ? name + ".weight" : "", c.norm_bias ? name + ".bias" : "");
    return out;
  }

  // The config's norm of the residual stream itself (after the embedding).
  void norm_in_place(const std::string& name, int x, const ModelConfig& c) {
    Op& o = op(c.norm == NormKind::RmsNorm ? OpKind::RmsNorm : OpKind::LayerNorm, name, x, x);
    weights(o, c.norm_weight ? name + ".weight" : "", c.norm_bias ? name + ".bias" : "");
  }

  int matmul(const std::string& name, int input, size_t in, size_t out_features, bool has_bias,
             const std::string& weight_name = "") {
    int out = buffer(name, graph_.buffers[input].rows, out_features);
    Op& o = op(OpKind::MatMul, name, input, out);
    weights(o, weight_name.empty() ? name + ".weight" : weight_name, has_bias ? name + ".bias" : "");
    o.in_features = in;
    o.out_features = out_features;
    return out;
  }

  // out = gelu(in W^T + b), the GELU fused into the matmul's epilogue.
  int matmul_gelu(const std::string& name, int input, size_t in, size_t out_features, bool has_bias, GeluKind gelu) {
    if (gelu == GeluKind::Silu)
      throw Error("an MLP without a gate and with the silu activation is not supported");
    int out = matmul(name, input, in, out_features, has_bias);
    graph_.ops.back().epilogue.act = gelu == GeluKind::Erf    ? kernels::Activation::GeluErf
                                     : gelu == GeluKind::Tanh ? kernels::Activation::GeluTanh
                                                              : kernels::Activation::ReluSquared;
    return out;
  }

  // The gated MLP's first half: [gate | up] = in W^T + b, then act(gate) * up.
  int gated(const std::string& name, int input, size_t in, size_t ff, bool has_bias, GeluKind act) {
    const int both = matmul(name, input, in, 2 * ff, has_bias);
    const int out = buffer(name + ".glu", graph_.buffers[input].rows, ff);
    Op& o = op(OpKind::Glu, name + ".glu", both, out);
    switch (act) {
      case GeluKind::Silu: o.gate = kernels::Gate::Silu; break;
      case GeluKind::Erf: o.gate = kernels::Gate::GeluErf; break;
      case GeluKind::Tanh: o.gate = kernels::Gate::GeluTanh; break;
      default:
        throw Error(std::string("a gated MLP with the ") + activation_name(act) + " activation is not supported");
    }
    return out;
  }

  // residual += in W^T + b: the matmul adds into the residual stream (the
  // buffer `name` is then never used).
  void matmul_residual(const std::string& name, int input, size_t in, size_t out_features, bool has_bias,
                       int residual) {
    matmul(name, input, in, out_features, has_bias);
    Op& m = graph_.ops.back();
    m.output = residual;
    m.epilogue.accumulate = true;
  }

  Graph finish() { return std::move(graph_); }
  Graph& graph() { return graph_; }

 private:
  const Model& model_;
  Graph graph_;
};

}  // namespace

Graph build_gpt_graph(const Model& model) {
  const ModelConfig& c = model.config();
  const size_t d = c.n_embd, ff = c.n_ff, q = c.q_width(), kv = c.kv_width();
  GraphBuilder g(model);

  // The residual stream: written by Embed, updated in place by each block.
  const int x = g.buffer("x", Rows::Tokens, d);
  {
    Op& e = g.op(OpKind::Embed, "embed", -1, x);
    g.weights(e, "wte", "");
    if (c.pos_embedding == PosEmbedding::Learned) {
      e.bias = "wpe";  // position table rides in the bias slot of the embed op
      e.b = model.weight("wpe");
    }
  }
  if (c.embed_norm) g.norm_in_place("ln_e", x, c);
  if (c.smear_channels != 0) {
    Op& s = g.op(OpKind::Smear, "smear", x, x);
    g.weights(s, "smear.gate.weight", "smear.lambda");
    s.channels = c.smear_channels;
  }
  int x0 = -1;
  if (c.resid_mix) {
    x0 = g.buffer("x0", Rows::Tokens, d);
    g.op(OpKind::Copy, "x0", x, x0);
  }
  int backout = -1;
  const float* resid_lambdas = c.resid_mix ? model.weight("resid_lambdas") : nullptr;
  const float* x0_lambdas = c.resid_mix ? model.weight("x0_lambdas") : nullptr;

  for (uint32_t layer = 0; layer < c.n_layer; ++layer) {
    const std::string p = "h." + std::to_string(layer) + ".";
    if (c.resid_mix) {
      Op& m = g.op(OpKind::Mix, p + "mix", x0, x);
      m.weight = "resid_lambdas[" + std::to_string(layer) + "]";
      m.bias = "x0_lambdas[" + std::to_string(layer) + "]";
      m.alpha = resid_lambdas[layer], m.beta = x0_lambdas[layer];
    }
    const int h = g.norm(p + "ln_1", x, c);
    // Parallel residual: both sublayers read the block's input.
    const int h2_parallel = c.parallel_residual ? g.norm(p + "ln_2", x, c) : -1;
    const int qkv = g.matmul(p + "attn.qkv", h, d, q + 2 * kv, c.qkv_bias);
    if (c.has_value_embed(layer)) {
      Op& v = g.op(OpKind::ValueEmbed, p + "attn.ve", h, qkv);
      g.weights(v, p + "attn.ve.weight", p + "attn.ve_gate.weight");
      v.channels = c.ve_gate_channels;
    }
    const int att = g.buffer(p + "attn.out", Rows::Tokens, q);
    Op& a = g.op(OpKind::Attention, p + "attn", qkv, att);
    a.layer = static_cast<int>(layer);
    a.window = c.window_of(layer);
    if (c.qk_norm == QkNorm::Weighted) g.weights(a, p + "attn.q_norm.weight", p + "attn.k_norm.weight");
    g.matmul_residual(p + "attn.proj", att, q, d, c.linear_bias, x);
    const int h2 = c.parallel_residual ? h2_parallel : g.norm(p + "ln_2", x, c);
    const int fc = c.mlp_gated ? g.gated(p + "mlp.fc", h2, d, ff, c.has_mlp_bias(), c.gelu)
                               : g.matmul_gelu(p + "mlp.fc", h2, d, ff, c.has_mlp_bias(), c.gelu);
    g.matmul_residual(p + "mlp.proj", fc, ff, d, c.has_mlp_bias(), x);
    if (c.backout_after == layer + 1) {
      backout = g.buffer("x_backout", Rows::Tokens, d);
      g.op(OpKind::Copy, "backout.keep", x, backout);
    }
  }
  if (backout >= 0) {
    Op& m = g.op(OpKind::Mix, "backout", backout, x);
    m.bias = "backout_lambda";
    m.alpha = 1.0f, m.beta = -model.weight("backout_lambda")[0];
  }

  const int hf = g.norm("ln_f", x, c);
  // Only the rows whose logits are wanted go through the (large) LM head.
  const int sel = g.buffer("ln_f.selected", Rows::LogitRows, d);
  g.op(OpKind::SelectRows, "select", hf, sel);
  const int logits = g.matmul("lm_head", sel, d, c.vocab_size, false, c.tied_lm_head ? "wte" : "lm_head.weight");
  if (c.logit_softcap > 0) g.op(OpKind::Softcap, "softcap", logits, logits);

  Graph graph = g.finish();
  graph.logits = logits;
  return graph;
}

const char* op_kind_name(OpKind kind) {
  static const char* kNames[] = {"embed",   "layernorm", "matmul", "attention", "select_rows", "rmsnorm",
                                 "glu",     "softcap",   "copy",   "mix",       "smear",       "value_embed"};
  return kNames[static_cast<int>(kind)];
}

std::string Graph::to_string() const {
  auto shape = [&](int b) {
    if (b < 0) return std::string("ids");
    const BufferSpec& s = buffers[b];
    return s.name + "[" + (s.rows == Rows::Tokens ? "T" : "R") + "," + std::to_string(s.width) + "]";
  };
  std::ostringstream out;
  for (size_t i = 0; i < ops.size(); ++i) {
    const Op& o = ops[i];
    out << i << ": " << op_kind_name(o.kind) << " " << o.label << "  " << shape(o.input) << " -> " << shape(o.output);
    if (o.kind == OpKind::MatMul && o.epilogue.act != kernels::Activation::None)
      out << " +"
          << (o.epilogue.act == kernels::Activation::GeluErf    ? "gelu_erf"
              : o.epilogue.act == kernels::Activation::GeluTanh ? "gelu_tanh"
                                                                : "relu2");
    if (o.kind == OpKind::MatMul && o.epilogue.accumulate) out << " (added into " << buffers[o.output].name << ")";
    if (o.kind == OpKind::Glu)
      out << " "
          << (o.gate == kernels::Gate::Silu      ? "silu"
              : o.gate == kernels::Gate::GeluErf ? "gelu_erf"
                                                 : "gelu_tanh")
          << "(gate)*up";
    if (o.kind == OpKind::Attention) {
      if (!o.weight.empty()) out << "  q_norm=" << o.weight << " k_norm=" << o.bias;
      if (o.window != 0) out << "  window=" << o.window;
      out << "\n";
      continue;
    }
    if (o.kind == OpKind::Mix) {
      out << "  " << buffers[o.output].name << " = " << o.alpha << " * " << buffers[o.output].name << " + " << o.beta
          << " * " << buffers[o.input].name << "  (" << (o.weight.empty() ? "1" : o.weight) << ", "
          << (o.weight.empty() ? "-" : "") << o.bias << ")\n";
      continue;
    }
    if (!o.weight.empty()) {
      out << "  w=" << o.weight;
      if (o.kind == OpKind::Embed || o.kind == OpKind::MatMul) out << " [panel16 " << weight_type_name(o.w_type) << "]";
    }
    if (!o.bias.empty()) out << " b=" << o.bias;
    out << "\n";
  }
  return out.str();
}

BufferPlan plan_buffers(const Graph& graph, size_t tokens, size_t logit_rows) {
  const size_t n = graph.buffers.size();
  constexpr size_t kAlign = 64;
  BufferPlan plan;
  plan.offsets.assign(n, 0);
  plan.sizes.assign(n, 0);

  // Lifetime of each buffer in op indices: [first use, last use].
  std::vector<size_t> first(n, SIZE_MAX), last(n, 0);
  for (size_t i = 0; i < graph.ops.size(); ++i) {
    for (int b : {graph.ops[i].input, graph.ops[i].output}) {
      if (b < 0) continue;
      first[b] = std::min(first[b], i);
      last[b] = std::max(last[b], i);
    }
  }
  if (graph.logits >= 0) last[graph.logits] = graph.ops.size();  // read by the caller after the run

  for (size_t b = 0; b < n; ++b) {
    size_t rows = graph.buffers[b].rows == Rows::Tokens ? tokens : logit_rows;
    size_t bytes = rows * graph.buffers[b].width * sizeof(float);
    plan.sizes[b] = (bytes + kAlign - 1) / kAlign * kAlign;
  }

  // Greedy first fit, largest first: place each buffer at the lowest offset
  // that does not collide with an already placed buffer alive at the same time.
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return plan.sizes[a] > plan.sizes[b]; });
  std::vector<size_t> placed;
  for (size_t b : order) {
    if (first[b] == SIZE_MAX) continue;  // unused buffer
    std::vector<std::pair<size_t, size_t>> busy;
    for (size_t p : placed)
      if (first[p] <= last[b] && first[b] <= last[p])
        busy.push_back({plan.offsets[p], plan.offsets[p] + plan.sizes[p]});
    std::sort(busy.begin(), busy.end());
    size_t offset = 0;
    for (auto [lo, hi] : busy) {
      if (offset + plan.sizes[b] <= lo) break;
      offset = std::max(offset, hi);
    }
    plan.offsets[b] = offset;
    plan.arena_bytes = std::max(plan.arena_bytes, offset + plan.sizes[b]);
    placed.push_back(b);
  }
  return plan;
}

}  // namespace mmgpt
