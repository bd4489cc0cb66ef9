#include "engine/executor.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include <tbb/blocked_range.h>
#include <tbb/partitioner.h>

#include "core/panel_layout.hpp"
#include "engine/attention.hpp"
#include "engine/rope.hpp"
#include "formats/error.hpp"
#include "kernels/kernels.hpp"
#include "kernels/parallel.hpp"

namespace mmgpt {

Executor::Executor(std::shared_ptr<const Model> model)
    : model_(std::move(model)), graph_(build_gpt_graph(*model_)), attention_(attention_spec(model_->config())) {
  if (model_->config().pos_embedding == PosEmbedding::Rotary) inv_freq_ = rope_inv_freq(model_->config());
}

std::span<const float> Executor::run(std::span<const int32_t> ids, KVCache& cache, size_t logit_rows) {
  const SequenceStep step{ids, &cache, logit_rows};
  return run(std::span<const SequenceStep>(&step, 1));
}

std::span<const float> Executor::run(std::span<const SequenceStep> steps) {
  const auto set_up = std::chrono::steady_clock::now();
  const ModelConfig& c = model_->config();
  if (steps.empty()) throw Error("nothing to run: no sequences were given");
  size_t tokens = 0, logit_rows = 0;
  for (const SequenceStep& s : steps) {
    const size_t n = s.ids.size();
    if (n == 0) throw Error("nothing to run: a sequence has no new tokens");
    if (s.logit_rows == 0 || s.logit_rows > n)
      throw Error("logit rows " + std::to_string(s.logit_rows) + " must be between 1 and the " + std::to_string(n) +
                  " tokens of the step");
    if (s.cache->length() + n > c.n_ctx)
      throw Error("sequence of " + std::to_string(s.cache->length() + n) + " tokens exceeds the context length " +
                  std::to_string(c.n_ctx));
    for (int32_t id : s.ids)
      if (id < 0 || static_cast<uint64_t>(id) >= c.vocab_size)
        throw Error("token id " + std::to_string(id) + " is outside the vocabulary (0.." +
                    std::to_string(c.vocab_size - 1) + ")");
    for (const SequenceStep& other : steps)
      if (&other != &s && other.cache == s.cache) throw Error("two sequences of one step share a KV cache");
    tokens += n;
    logit_rows += s.logit_rows;
  }

  auto key = std::make_pair(tokens, logit_rows);
  auto it = plans_.find(key);
  if (it == plans_.end()) it = plans_.emplace(key, plan_buffers(graph_, tokens, logit_rows)).first;
  plan_ = &it->second;
  if (arena_.size() < plan_->arena_bytes) {
    arena_storage_.assign((plan_->arena_bytes + sizeof(Line) - 1) / sizeof(Line), Line{});
    arena_ =
        std::span<std::byte>(reinterpret_cast<std::byte*>(arena_storage_.data()), arena_storage_.size() * sizeof(Line));
  }

  for (const SequenceStep& s : steps)
    for (size_t t = 0; t < s.ids.size(); ++t) s.cache->set_token(s.cache->length() + t, s.ids[t]);

  if (!inv_freq_.empty()) {  // the angles of every row's position, for every layer
    const size_t half = inv_freq_.size();
    cos_.resize(tokens * half);
    sin_.resize(tokens * half);
    size_t row = 0;
    for (const SequenceStep& s : steps)
      for (size_t t = 0; t < s.ids.size(); ++t, ++row)
        rope_angles(inv_freq_, s.cache->length() + t, c.rope_inverse, cos_.data() + row * half,
                    sin_.data() + row * half);
  }

  if (op_times_) {
    op_times_->push_back({kSetUp, set_up, std::chrono::steady_clock::now()});
    for (size_t i = 0; i < graph_.ops.size(); ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      run_op(graph_.ops[i], steps, tokens, logit_rows);
      op_times_->push_back({i, t0, std::chrono::steady_clock::now()});
    }
  } else {
    for (const Op& op : graph_.ops) run_op(op, steps, tokens, logit_rows);
  }
  for (const SequenceStep& s : steps) s.cache->set_length(s.cache->length() + s.ids.size());
  return {buffer(graph_.logits), logit_rows * c.vocab_size};
}

namespace {

float sigmoid(float v) { return 1.0f / (1.0f + std::exp(-v)); }

// The embed op `e` for token id at position pos: its row strided through its
// panel (widened from its weight type), plus the position's row if learned.
void embed_token(const Op& e, const ModelConfig& c, int32_t id, size_t pos, float* dst) {
  unpack_panel_row(e.w_data, e.w_type, c.vocab_size, c.n_embd, static_cast<size_t>(id), dst);
  if (e.b != nullptr)
    for (size_t i = 0; i < c.n_embd; ++i) dst[i] += e.b[pos * c.n_embd + i];
}

}  // namespace

void Executor::embed_row(int32_t id, size_t pos, float* dst) const {
  // The graph's first ops (graph.cpp): the embedding, then ln_e if the config has it.
  const ModelConfig& c = model_->config();
  embed_token(graph_.ops[0], c, id, pos, dst);
  if (!c.embed_norm) return;
  const Op& n = graph_.ops[1];
  if (n.kind == OpKind::RmsNorm)
    kernels::rmsnorm(dst, n.w, dst, 1, c.n_embd, c.norm_eps);
  else
    kernels::layernorm(dst, n.w, n.b, dst, 1, c.n_embd, c.norm_eps);
}

void Executor::run_op(const Op& op, std::span<const SequenceStep> steps, size_t tokens, size_t logit_rows) {
  const ModelConfig& c = model_->config();
  const size_t d = c.n_embd;
  float* out = buffer(op.output);
  const float* in = op.input >= 0 ? buffer(op.input) : nullptr;
  const size_t out_rows = graph_.buffers[op.output].rows == Rows::Tokens ? tokens : logit_rows;
  const size_t width = graph_.buffers[op.output].width;

  switch (op.kind) {
    case OpKind::Embed: {
      size_t row = 0;
      for (const SequenceStep& s : steps) {
        const size_t base = s.cache->length();
        for (size_t t = 0; t < s.ids.size(); ++t, ++row) embed_token(op, c, s.ids[t], base + t, out + row * d);
      }
      break;
    }
    case OpKind::LayerNorm: kernels::layernorm(in, op.w, op.b, out, out_rows, width, c.norm_eps); break;
    case OpKind::RmsNorm: kernels::rmsnorm(in, op.w, out, out_rows, width, c.norm_eps); break;
    case OpKind::Glu: kernels::glu(in, out, out_rows, width, op.gate); break;
    case OpKind::Softcap: kernels::softcap(out, out_rows * width, c.logit_softcap); break;
    case OpKind::MatMul:
      kernels::matmul_packed(in, op.w_data, op.w_type, op.b, out, out_rows, op.in_features, op.out_features,
                             op.epilogue);
      break;
    case OpKind::Attention: {
      // Each sequence attends to its own cache; sequences run in parallel.
      std::vector<size_t> first_row(steps.size());
      for (size_t i = 0, row = 0; i < steps.size(); row += steps[i].ids.size(), ++i) first_row[i] = row;
      AttentionSpec a = attention_;
      a.q_norm = op.w;
      a.k_norm = op.b;
      float* qkv = buffer(op.input);  // the prologue rewrites the queries and keys in place
      const size_t half = inv_freq_.size();
      mmgpt::parallel_for(
          tbb::blocked_range<size_t>(0, steps.size(), 1),
          [&](const tbb::blocked_range<size_t>& r) {
            for (size_t i = r.begin(); i < r.end(); ++i) {
              const SequenceStep& s = steps[i];
              AttentionSpec ai = a;
              ai.window = op.window;
              if (half != 0)
                ai.rope_cos = cos_.data() + first_row[i] * half, ai.rope_sin = sin_.data() + first_row[i] * half;
              causal_attention(qkv + first_row[i] * a.row_width(), out + first_row[i] * a.q_width(), s.ids.size(),
                               s.cache->length(), static_cast<size_t>(op.layer), ai, *s.cache);
            }
          },
          tbb::auto_partitioner());
      break;
    }
    case OpKind::Copy: std::memcpy(out, in, out_rows * width * sizeof(float)); break;
    case OpKind::Mix:
      for (size_t i = 0; i < out_rows * width; ++i) {
        const float a = op.alpha * out[i], b = op.beta * in[i];  // two products, then the sum (as PyTorch)
        out[i] = a + b;
      }
      break;
    case OpKind::Smear: {
      // Backwards, so that each row's previous one is still as the embedding left it.
      std::vector<float> prev(d);
      size_t row0 = 0;
      for (const SequenceStep& s : steps) {
        const size_t base = s.cache->length(), n = s.ids.size();
        for (size_t t = n; t-- > 0;) {
          if (t == 0 && base == 0) break;  // the sequence's first token has no previous one
          float* xt = out + (row0 + t) * d;
          const float* xp = prev.data();
          if (t > 0)
            xp = xt - d;
          else
            embed_row(s.cache->token(base - 1), base - 1, prev.data());
          const float gate = op.b[0] * sigmoid(kernels::dot(op.w, xt, op.channels));
          for (size_t i = 0; i < d; ++i) {
            const float g = gate * xp[i];
            xt[i] = xt[i] + g;
          }
        }
        row0 += n;
      }
      break;
    }
    case OpKind::ValueEmbed: {
      // qkv rows: v (after q and k) += range * sigmoid(gate_j . h[:c]) * ve[id] for each KV head j.
      const size_t hd = c.head_size(), heads = c.kv_heads(), kvw = c.kv_width(), v_at = c.q_width() + kvw;
      std::vector<float> ve(kvw);
      size_t row = 0;
      for (const SequenceStep& s : steps)
        for (size_t t = 0; t < s.ids.size(); ++t, ++row) {
          unpack_panel_row(op.w_data, op.w_type, c.vocab_size, kvw, static_cast<size_t>(s.ids[t]), ve.data());
          const float* h = in + row * graph_.buffers[op.input].width;
          float* v = out + row * width + v_at;
          for (size_t j = 0; j < heads; ++j) {
            const float gate = c.ve_gate_range * sigmoid(kernels::dot(op.b + j * op.channels, h, op.channels));
            for (size_t i = j * hd; i < (j + 1) * hd; ++i) {
              const float g = gate * ve[i];
              v[i] = v[i] + g;
            }
          }
        }
      break;
    }
    case OpKind::SelectRows: {
      // Each sequence's last logit_rows rows, in sequence order.
      size_t row = 0, dst = 0;
      for (const SequenceStep& s : steps) {
        row += s.ids.size();
        std::memcpy(out + dst * width, in + (row - s.logit_rows) * width, s.logit_rows * width * sizeof(float));
        dst += s.logit_rows;
      }
      break;
    }
  }
}

}  // namespace mmgpt
