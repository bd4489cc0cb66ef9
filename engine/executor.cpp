#include "engine/executor.hpp"

#include <cstring>
#include <string>

#include <tbb/parallel_for.h>

#include "engine/attention.hpp"
#include "formats/error.hpp"
#include "kernels/kernels.hpp"

namespace mmgpt {

Executor::Executor(std::shared_ptr<const Model> model) : model_(std::move(model)), graph_(build_gpt_graph(*model_)) {}

std::span<const float> Executor::run(std::span<const int32_t> ids, KVCache& cache, size_t logit_rows) {
  const ModelConfig& c = model_->config();
  const size_t tokens = ids.size();
  if (tokens == 0) throw Error("nothing to run: no tokens were given");
  if (logit_rows == 0 || logit_rows > tokens)
    throw Error("logit rows " + std::to_string(logit_rows) + " must be between 1 and the " + std::to_string(tokens) +
                " tokens of the step");
  if (cache.length() + tokens > c.n_ctx)
    throw Error("sequence of " + std::to_string(cache.length() + tokens) + " tokens exceeds the context length " +
                std::to_string(c.n_ctx));
  for (size_t i = 0; i < tokens; ++i)
    if (ids[i] < 0 || static_cast<uint64_t>(ids[i]) >= c.vocab_size)
      throw Error("token id " + std::to_string(ids[i]) + " is outside the vocabulary (0.." +
                  std::to_string(c.vocab_size - 1) + ")");

  auto key = std::make_pair(tokens, logit_rows);
  auto it = plans_.find(key);
  if (it == plans_.end()) it = plans_.emplace(key, plan_buffers(graph_, tokens, logit_rows)).first;
  plan_ = &it->second;
  if (arena_.size() < plan_->arena_bytes) {
    arena_storage_.assign((plan_->arena_bytes + sizeof(Line) - 1) / sizeof(Line), Line{});
    arena_ = std::span<std::byte>(reinterpret_cast<std::byte*>(arena_storage_.data()), arena_storage_.size() * sizeof(Line));
  }

  for (const Op& op : graph_.ops) run_op(op, ids, cache, tokens, logit_rows);
  cache.set_length(cache.length() + tokens);
  return {buffer(graph_.logits), logit_rows * c.vocab_size};
}

void Executor::run_op(const Op& op, std::span<const int32_t> ids, KVCache& cache, size_t tokens, size_t logit_rows) {
  const ModelConfig& c = model_->config();
  const size_t d = c.n_embd;
  const size_t base = cache.length();
  float* out = buffer(op.output);
  const float* in = op.input >= 0 ? buffer(op.input) : nullptr;
  const size_t out_rows = graph_.buffers[op.output].rows == Rows::Tokens ? tokens : logit_rows;
  const size_t width = graph_.buffers[op.output].width;

  switch (op.kind) {
    case OpKind::Embed:
      for (size_t t = 0; t < tokens; ++t) {
        const float* tok = op.w + static_cast<size_t>(ids[t]) * d;
        const float* pos = op.b + (base + t) * d;
        float* row = out + t * d;
        for (size_t i = 0; i < d; ++i) row[i] = tok[i] + pos[i];
      }
      break;
    case OpKind::LayerNorm:
      kernels::layernorm(in, op.w, op.b, out, out_rows, width, c.norm_eps);
      break;
    case OpKind::MatMul:
      kernels::matmul(in, op.w, op.b, out, out_rows, op.in_features, op.out_features);
      break;
    case OpKind::Attention:
      causal_attention(in, out, tokens, base, static_cast<size_t>(op.layer), c.n_head, cache);
      break;
    case OpKind::AddInPlace:
      kernels::add(out, in, out_rows * width);
      break;
    case OpKind::Gelu:
      if (c.gelu == GeluKind::Erf)
        kernels::gelu_erf(out, out_rows * width);
      else
        kernels::gelu_tanh(out, out_rows * width);
      break;
    case OpKind::SelectRows:
      std::memcpy(out, in + (tokens - logit_rows) * width, logit_rows * width * sizeof(float));
      break;
  }
}

}  // namespace mmgpt
