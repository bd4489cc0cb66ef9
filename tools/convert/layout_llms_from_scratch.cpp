// "Build a Large Language Model (From Scratch)" GPTModel state_dict
// (rasbt/LLMs-from-scratch, chapter 4): separate W_query/W_key/W_value
// Linears (bias optional: qkv_bias), out_proj, ff.layers.0/2, LayerNorms with
// scale/shift, an untied out_head without bias, the tanh GELU, eps 1e-5.
// Nothing in the file says how many heads there are: --n-head must.
#include "formats/error.hpp"
#include "tools/convert/layout_gpt2_common.hpp"
#include "tools/convert/tensor_ops.hpp"

namespace mmgpt::convert {

MappedModel map_llms_from_scratch(const LayoutInput& in) {
  // Chapter 5's Llama3Model and Qwen3Model: a SwiGLU feed-forward (fc1..fc3), no positions table.
  if (in.weights->has("trf_blocks.0.ff.fc1.weight") && !in.weights->has("pos_emb.weight")) return map_llms_modern(in);
  TensorTaker taker(*in.weights, in.file, "llms-from-scratch");
  taker.require({"tok_emb.weight", "pos_emb.weight", "trf_blocks.0.ff.layers.0.weight"});
  MappedModel out;
  ModelConfig& c = out.config;
  std::tie(c.vocab_size, c.n_embd) = dims2(taker.peek("tok_emb.weight"), "tok_emb.weight", in.file);
  uint32_t pos_d = 0;
  std::tie(c.n_ctx, pos_d) = dims2(taker.peek("pos_emb.weight"), "pos_emb.weight", in.file);
  if (pos_d != c.n_embd)
    throw Error(in.file + ": tensor 'pos_emb.weight' has width " + std::to_string(pos_d) +
                " but 'tok_emb.weight' has " + std::to_string(c.n_embd));
  c.n_ff = dims2(taker.peek("trf_blocks.0.ff.layers.0.weight"), "trf_blocks.0.ff.layers.0.weight", in.file).first;
  c.n_layer = count_layers(*in.weights, "trf_blocks.", in.file);

  if (!in.n_head)
    throw Error(in.file +
                ": --n-head is required for llms-from-scratch checkpoints: head count cannot be inferred "
                "from shapes");
  if (c.n_embd % in.n_head != 0)
    throw Error(in.file + ": --n-head " + std::to_string(in.n_head) + " does not divide the model width " +
                std::to_string(c.n_embd));
  c.n_head = in.n_head;
  c.qkv_bias = in.weights->has("trf_blocks.0.att.W_query.bias");
  c.linear_bias = true;  // out_proj and the feed-forward Linears always have one
  c.norm_bias = true;    // LayerNorm.shift
  c.norm_eps = 1e-5f;
  c.gelu = GeluKind::Tanh;

  const uint64_t d = c.n_embd, ff = c.n_ff;
  std::vector<std::string> names = {"tok_emb.weight", "pos_emb.weight", "final_norm.scale", "final_norm.shift",
                                    "out_head.weight"};
  for (uint32_t l = 0; l < c.n_layer; ++l) {
    const std::string s = "trf_blocks." + std::to_string(l) + ".";
    for (const char* w : {"att.W_query.weight", "att.W_key.weight", "att.W_value.weight", "att.out_proj.weight",
                          "att.out_proj.bias", "ff.layers.0.weight", "ff.layers.0.bias", "ff.layers.2.weight",
                          "ff.layers.2.bias", "norm1.scale", "norm1.shift", "norm2.scale", "norm2.shift"})
      names.push_back(s + w);
    if (c.qkv_bias)
      for (const char* b : {"att.W_query.bias", "att.W_key.bias", "att.W_value.bias"}) names.push_back(s + b);
  }
  taker.require(names);

  auto put = [&](const std::string& canonical, TensorPtr t) { out.tensors.emplace_back(canonical, std::move(t)); };
  put("wte", taker.take("tok_emb.weight", {c.vocab_size, d}));
  put("wpe", taker.take("pos_emb.weight", {c.n_ctx, d}));
  for (uint32_t l = 0; l < c.n_layer; ++l) {
    const std::string s = "trf_blocks." + std::to_string(l) + ".";
    const std::string t = "h." + std::to_string(l) + ".";
    put(t + "ln_1.weight", taker.take(s + "norm1.scale", {d}));
    put(t + "ln_1.bias", taker.take(s + "norm1.shift", {d}));
    // Our fused qkv is [3d, d]: the Q rows, then K, then V.
    TensorPtr q = taker.take(s + "att.W_query.weight", {d, d});
    TensorPtr k = taker.take(s + "att.W_key.weight", {d, d});
    TensorPtr v = taker.take(s + "att.W_value.weight", {d, d});
    put(t + "attn.qkv.weight", concat_rows({q, k, v}));
    if (c.qkv_bias) {
      TensorPtr qb = taker.take(s + "att.W_query.bias", {d});
      TensorPtr kb = taker.take(s + "att.W_key.bias", {d});
      TensorPtr vb = taker.take(s + "att.W_value.bias", {d});
      put(t + "attn.qkv.bias", concat_rows({qb, kb, vb}));
    }
    put(t + "attn.proj.weight", taker.take(s + "att.out_proj.weight", {d, d}));
    put(t + "attn.proj.bias", taker.take(s + "att.out_proj.bias", {d}));
    put(t + "ln_2.weight", taker.take(s + "norm2.scale", {d}));
    put(t + "ln_2.bias", taker.take(s + "norm2.shift", {d}));
    put(t + "mlp.fc.weight", taker.take(s + "ff.layers.0.weight", {ff, d}));
    put(t + "mlp.fc.bias", taker.take(s + "ff.layers.0.bias", {ff}));
    put(t + "mlp.proj.weight", taker.take(s + "ff.layers.2.weight", {d, ff}));
    put(t + "mlp.proj.bias", taker.take(s + "ff.layers.2.bias", {d}));
    taker.ignore(s + "att.mask");  // the causal-mask buffer
  }
  put("ln_f.weight", taker.take("final_norm.scale", {d}));
  put("ln_f.bias", taker.take("final_norm.shift", {d}));
  TensorPtr head = taker.take("out_head.weight", {c.vocab_size, d});
  c.tied_lm_head = same_values(*head, *out.tensors[0].second);
  if (c.tied_lm_head)
    out.notes.push_back("out_head.weight equals tok_emb.weight: stored once, as a tied LM head");
  else
    put("lm_head.weight", head);
  taker.finish();
  return out;
}

}  // namespace mmgpt::convert
