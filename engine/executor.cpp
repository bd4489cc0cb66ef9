#include "engine/executor.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>

#include <tbb/blocked_range.h>
#include <tbb/partitioner.h>

#include "core/panel_layout.hpp"
#include "core/quant_layout.hpp"
#include "engine/attention.hpp"
#include "engine/decode_prefetch_tuner.hpp"
#include "engine/stage_team.hpp"
#include "formats/error.hpp"
#include "kernels/kernels.hpp"
#include "kernels/parallel.hpp"

namespace mmgpt {

Executor::Executor(std::shared_ptr<const Model> model) : model_(std::move(model)), graph_(build_gpt_graph(*model_)) {
  all_packed_ = true;
  for (const Op& op : graph_.ops)
    if (op.kind == OpKind::MatMul && !op.packed) all_packed_ = false;
  // Layer norms the decode team may fold into the matmul after them
  // (team_members): read by that matmul alone, and no wider than run_team's
  // rows (n_embd floats). A property of the graph, so found once here.
  const std::vector<Op>& ops = graph_.ops;
  norm_feeds_next_.assign(ops.size(), false);
  for (size_t i = 0; i + 1 < ops.size(); ++i) {
    const Op& norm = ops[i];
    const Op& next = ops[i + 1];
    norm_feeds_next_[i] =
        norm.kind == OpKind::LayerNorm && next.kind == OpKind::MatMul && next.input == norm.output &&
        next.in_features <= model_->config().n_embd &&
        std::count_if(ops.begin(), ops.end(), [&](const Op& o) { return o.input == norm.output; }) == 1;
  }
  if (!decode_team_by_default()) decode_team_ = 1;
}

bool Executor::decode_team_by_default() {
  const char* v = std::getenv("MMGPT_DECODE_TEAM");
  return v == nullptr || std::string(v) != "0";
}

Executor::~Executor() { forget_decode_prefetch_owner(this); }

std::span<const float> Executor::run(std::span<const int32_t> ids, KVCache& cache, size_t logit_rows) {
  const SequenceStep step{ids, &cache, logit_rows};
  return run(std::span<const SequenceStep>(&step, 1));
}

std::span<const float> Executor::run(std::span<const SequenceStep> steps) {
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

  auto compute = [&] {
    if (const size_t members = team_members(steps, tokens); members > 1)
      run_team(steps.front(), members);
    else
      for (const Op& op : graph_.ops) run_op(op, steps, tokens, logit_rows);
  };
  if (tokens == steps.size()) {  // a decode step (one token a sequence): timed for the prefetch hint
    TunedDecodeStep timed(this, steps.size());
    compute();
    timed.done();
  } else {
    compute();
  }
  for (const SequenceStep& s : steps) s.cache->set_length(s.cache->length() + s.ids.size());
  return {buffer(graph_.logits), logit_rows * c.vocab_size};
}

size_t Executor::team_members(std::span<const SequenceStep> steps, size_t tokens) {
  // A decode step of one sequence: every matmul is a GEMV over panels, one
  // head per attention part. Batches and prefill keep TBB's tasks (their
  // operations are long enough that a fork and join cost little).
  if (steps.size() != 1 || tokens != 1 || !all_packed_ || decode_team_ == 1) return 1;
  const size_t members = decode_team_ != 0 ? decode_team_ : mmgpt::thread_budget();
  if (members < 2) return 1;
  // Matmuls split as matmul_packed splits them for that many threads.
  const ModelConfig& c = model_->config();
  const std::vector<Op>& ops = graph_.ops;
  team_parts_.resize(ops.size());
  team_grain_.resize(ops.size());
  bool split = false;
  for (size_t i = 0; i < ops.size(); ++i) {
    const Op& op = ops[i];
    team_grain_[i] = 0, team_parts_[i] = 1;
    if (op.kind == OpKind::MatMul) {
      const size_t panels = panel_count(op.out_features);
      team_grain_[i] = kernels::panel_range_grain(1, op.in_features, op.out_features, members);
      team_parts_[i] = static_cast<uint32_t>((panels + team_grain_[i] - 1) / team_grain_[i]);
      split = split || team_parts_[i] > 1;
    } else if (op.kind == OpKind::Attention) {
      // A block of heads a member (a group of the cache when it was made for
      // as many threads): its keys are then one run of each block of the
      // cache (kv_cache.hpp), where a head a part would read runs of 64 rows
      // far apart.
      team_parts_[i] = static_cast<uint32_t>(std::min<size_t>(c.n_head, members));
    }
  }
  // A layer norm read only by the matmul after it is no stage of its own:
  // each member normalizes the row itself as it starts its parts of that
  // matmul (run_team), instead of one member doing it while the others wait
  // at a stage boundary and then fetch its output from that member's cache
  // (docs/kernels.md, "The decode team"). The norm's input is then read
  // while other members write the matmul's output, so the two must not
  // share arena bytes (this step's plan).
  auto apart = [&](int a, int b) {
    return plan_->offsets[a] + plan_->sizes[a] <= plan_->offsets[b] ||
           plan_->offsets[b] + plan_->sizes[b] <= plan_->offsets[a];
  };
  for (size_t i = 0; i + 1 < ops.size(); ++i)
    if (norm_feeds_next_[i] && apart(ops[i].input, ops[i + 1].output)) team_parts_[i] = 0;
  // A quantized matmul whose x is the previous stage's output: that stage's
  // parts quantize what they wrote (a head of attention output, a part's
  // panels of a matmul's output after its epilogue) into team_q_, and each
  // member's product reads those blocks instead of quantizing the whole row
  // itself. Every part then starts on a q8 block boundary, so the blocks are
  // the bytes quantize_rows gives for the whole row. Each member moves a
  // quarter of the bytes from the other's cache (q8 instead of f32) and
  // quantizes only its share (docs/kernels.md, "The decode team").
  team_quantizes_.assign(ops.size(), false);
  size_t q_width = 0;
  for (size_t i = 0; i + 1 < ops.size(); ++i) {
    const Op& op = ops[i];
    const Op& next = ops[i + 1];
    if (next.kind != OpKind::MatMul || !is_quantized(next.w_type) || next.input != op.output) continue;
    if (i > 0 && team_quantizes_[i - 1]) continue;  // its own x is in team_q_, read while its parts would write
    const bool by_heads = op.kind == OpKind::Attention && (c.n_embd / c.n_head) % kQuantBlock == 0;
    const bool by_panels =
        op.kind == OpKind::MatMul && team_parts_[i] > 0 && (team_grain_[i] * kPanelWidth) % kQuantBlock == 0;
    if (by_heads || by_panels) team_quantizes_[i] = true, q_width = std::max(q_width, next.in_features);
  }
  if (team_scale_.size() < quant_blocks(q_width)) {
    team_q_.resize(quant_blocks(q_width) * kQuantBlock);
    team_scale_.resize(quant_blocks(q_width));
    team_sum_.resize(quant_blocks(q_width));
  }
  // A model so small that no matmul is worth splitting runs op by op: a team
  // would only add its waits.
  return split || decode_team_ > 1 ? members : 1;
}

void Executor::run_team(const SequenceStep& step, size_t members) {
  const ModelConfig& c = model_->config();
  const std::vector<Op>& ops = graph_.ops;
  // Per member: its product of the stage it last ran a matmul part of (x is
  // prepared once per member and stage, on the member's own thread).
  struct alignas(64) MemberState {
    size_t stage = SIZE_MAX;
    std::optional<kernels::PanelProduct> product;
  };
  std::vector<MemberState> state(members);
  const std::span<const SequenceStep> steps(&step, 1);
  const size_t base = step.cache->length();
  const size_t row_lines = (c.n_embd * sizeof(float) + sizeof(Line) - 1) / sizeof(Line);
  if (team_rows_.size() < members * row_lines) team_rows_.resize(members * row_lines);
  const size_t head_dim = c.n_embd / c.n_head;
  // Columns [c0, c1) of op's output row (c0 on a q8 block boundary) into
  // team_q_ for the matmul after it (team_members).
  auto quantize_for_next = [&](const Op& op, size_t c0, size_t c1) {
    const size_t b0 = c0 / kQuantBlock;
    kernels::quantize_rows(buffer(op.output) + c0, 1, c1 - c0, team_q_.data() + c0, team_scale_.data() + b0,
                           team_sum_.data() + b0);
  };
  // What member m reads first in stage j, for it to prefetch while it waits
  // for the stage before (run_stages): its own block of a matmul's weights;
  // before attention, its own block of heads' keys so far, block by block of
  // the cache, then their values, as it attends. run_stages stops at about
  // what L2 holds.
  const StageReads next_reads = [&](size_t j, size_t m, size_t run) -> std::span<const std::byte> {
    const Op& op = ops[j];
    if (op.kind == OpKind::Attention) {
      const auto [part, own_end] = stage_own_block(team_parts_[j], members, m);  // part: the first it runs
      if (part >= own_end || base == 0) return {};
      KVCache& kv = *step.cache;
      const auto [h0, part_end] = stage_own_block(c.n_head, team_parts_[j], part);
      const size_t h1 = std::min(part_end, kv.group_begin(kv.group_of(h0) + 1));  // its heads in h0's group
      const size_t blocks = (base + KVCache::kBlock - 1) / KVCache::kBlock, layer = static_cast<size_t>(op.layer);
      if (run >= 2 * blocks) return {};
      const size_t pos = run % blocks * KVCache::kBlock;
      const void* rows = run < blocks ? kv.key_row(layer, h0, pos) : kv.value_row(layer, h0, pos);
      const size_t bytes = ((h1 - h0 - 1) * KVCache::kBlock + std::min(KVCache::kBlock, base - pos)) * head_dim *
                           KVCache::element_bytes(kv.dtype());
      return {static_cast<const std::byte*>(rows), bytes};
    }
    if (op.kind != OpKind::MatMul || team_parts_[j] < members || run != 0) return {};
    const auto [b0, b1] = stage_own_block(team_parts_[j], members, m);
    const size_t panels = panel_count(op.out_features);
    const size_t p0 = std::min(panels, b0 * team_grain_[j]), p1 = std::min(panels, b1 * team_grain_[j]);
    const size_t from = packed_weight_bytes(op.w_type, p0 * kPanelWidth, op.in_features);
    const size_t to = packed_weight_bytes(op.w_type, p1 * kPanelWidth, op.in_features);
    return {static_cast<const std::byte*>(op.w_data) + from, to - from};
  };
  run_stages(
      team_parts_, members,
      [&](size_t i, size_t part, size_t m) {
        const Op& op = ops[i];
        switch (op.kind) {
          case OpKind::MatMul: {
            MemberState& s = state[m];
            if (s.stage != i) {
              if (i > 0 && team_quantizes_[i - 1]) {  // x in q8 blocks, written by the stage before
                s.product.emplace(
                    QuantizedRows{team_q_.data(), team_scale_.data(), team_sum_.data(), quant_blocks(op.in_features)},
                    op.w_data, op.w_type, op.b, buffer(op.output), 1, op.in_features, op.out_features, op.epilogue);
              } else {
                const float* x = buffer(op.input);
                if (i > 0 && team_parts_[i - 1] == 0) {  // the layer norm before it, this member's own copy
                  const Op& norm = ops[i - 1];
                  float* row = reinterpret_cast<float*>(team_rows_.data() + m * row_lines);
                  kernels::layernorm(buffer(norm.input), norm.w, norm.b, row, 1, op.in_features, c.norm_eps);
                  x = row;
                }
                s.product.emplace(x, op.w_data, op.w_type, op.b, buffer(op.output), 1, op.in_features, op.out_features,
                                  op.epilogue);
              }
              s.stage = i;
            }
            const size_t p0 = part * team_grain_[i];
            const size_t p1 = std::min(s.product->panels(), p0 + team_grain_[i]);
            s.product->run(p0, p1);
            if (team_quantizes_[i])
              quantize_for_next(op, p0 * kPanelWidth, std::min(op.out_features, p1 * kPanelWidth));
            break;
          }
          case OpKind::Attention: {
            const auto [h0, h1] = stage_own_block(c.n_head, team_parts_[i], part);
            thread_local std::vector<float> scores;
            if (scores.size() < (h1 - h0) * (base + 1)) scores.resize((h1 - h0) * (base + 1));
            causal_attention_heads(buffer(op.input), buffer(op.output), base, static_cast<size_t>(op.layer), h0, h1,
                                   c.n_head, *step.cache, scores.data());
            if (team_quantizes_[i]) quantize_for_next(op, h0 * head_dim, h1 * head_dim);
            break;
          }
          default: run_op(op, steps, 1, step.logit_rows);
        }
      },
      next_reads);
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
        for (size_t t = 0; t < s.ids.size(); ++t, ++row) {
          const float* pos = op.b + (base + t) * d;
          float* dst = out + row * d;
          if (op.packed) {  // the token's row is strided through its panel (a tied LM head)
            unpack_panel_row(op.w_data, op.w_type, c.vocab_size, d, static_cast<size_t>(s.ids[t]), dst);  // widened
            for (size_t i = 0; i < d; ++i) dst[i] += pos[i];
          } else {
            const float* tok = op.w + static_cast<size_t>(s.ids[t]) * d;
            for (size_t i = 0; i < d; ++i) dst[i] = tok[i] + pos[i];
          }
        }
      }
      break;
    }
    case OpKind::LayerNorm: kernels::layernorm(in, op.w, op.b, out, out_rows, width, c.norm_eps); break;
    case OpKind::MatMul:
      if (op.packed)
        kernels::matmul_packed(in, op.w_data, op.w_type, op.b, out, out_rows, op.in_features, op.out_features,
                               op.epilogue);
      else
        kernels::matmul(in, op.w, op.b, out, out_rows, op.in_features, op.out_features);
      break;
    case OpKind::Attention: {
      // Each sequence attends to its own cache; sequences run in parallel.
      std::vector<size_t> first_row(steps.size());
      for (size_t i = 0, row = 0; i < steps.size(); row += steps[i].ids.size(), ++i) first_row[i] = row;
      mmgpt::parallel_for(
          tbb::blocked_range<size_t>(0, steps.size(), 1),
          [&](const tbb::blocked_range<size_t>& r) {
            for (size_t i = r.begin(); i < r.end(); ++i) {
              const SequenceStep& s = steps[i];
              causal_attention(in + first_row[i] * 3 * d, out + first_row[i] * d, s.ids.size(), s.cache->length(),
                               static_cast<size_t>(op.layer), c.n_head, *s.cache);
            }
          },
          tbb::auto_partitioner());
      break;
    }
    case OpKind::AddInPlace: kernels::add(out, in, out_rows * width); break;
    case OpKind::Gelu:
      if (c.gelu == GeluKind::Erf)
        kernels::gelu_erf(out, out_rows * width);
      else
        kernels::gelu_tanh(out, out_rows * width);
      break;
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
