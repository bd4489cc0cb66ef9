#pragma once
// Runs the GPT graph for one step of one sequence: a prefill of T tokens or
// a decode step of one, appending their keys and values to the KV cache.
// One Executor per concurrent session (it owns the activation arena); the
// Model it reads is shared and never written.
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "engine/attention.hpp"
#include "engine/graph.hpp"
#include "engine/kv_cache.hpp"
#include "engine/model.hpp"

namespace mmgpt {

// One sequence's share of a step: its new tokens, its cache, and how many of
// its last rows need logits.
struct SequenceStep {
  std::span<const int32_t> ids;
  KVCache* cache = nullptr;
  size_t logit_rows = 1;
};

class Executor {
 public:
  explicit Executor(std::shared_ptr<const Model> model);
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  const Model& model() const { return *model_; }
  const Graph& graph() const { return graph_; }

  // Feeds `ids` at positions cache.length() .. cache.length()+T-1 and returns
  // the logits of the last `logit_rows` of them, row-major [logit_rows, vocab].
  // Throws mmgpt::Error for an id outside the vocabulary or a step that would
  // run past the context length. The span stays valid until the next run().
  std::span<const float> run(std::span<const int32_t> ids, KVCache& cache, size_t logit_rows = 1);

  // A step of several sequences at once: their rows go through every matmul
  // together (a batched decode is one GEMM per weight instead of B GEMVs),
  // each attends only to its own cache. Returns the logits of every
  // sequence's requested rows, in order. Row for row the results are
  // bit-identical to running each sequence alone.
  std::span<const float> run(std::span<const SequenceStep> steps);

  // While set, run() appends when each op of the graph started and ended
  // (graph_.ops index), after the step's set-up (op kSetUp: the checks of
  // the step, its buffer plan and arena), for `mmgpt bench --profile` and
  // `--trace`.
  static constexpr size_t kSetUp = SIZE_MAX;
  struct OpTime {
    size_t op;
    std::chrono::steady_clock::time_point t0, t1;
  };
  void record_op_times(std::vector<OpTime>* out) { op_times_ = out; }

 private:
  float* buffer(int id) { return reinterpret_cast<float*>(arena_.data() + plan_->offsets[id]); }
  // One operation of the graph over every row of the step; each kernel
  // splits its own work over the threads (TBB tasks).
  void run_op(const Op& op, std::span<const SequenceStep> steps, size_t tokens, size_t logit_rows);
  // The residual stream's row of token `id` at position `pos` as the embed
  // op (and the norm after it, if any) make it: the smear's previous row
  // when that token was in an earlier step.
  void embed_row(int32_t id, size_t pos, float* dst) const;

  std::shared_ptr<const Model> model_;
  Graph graph_;
  AttentionSpec attention_;                                // the layers' attention, but for the norm weights and angles
  std::vector<float> inv_freq_;                            // rotary frequencies (empty: learned positions)
  std::vector<float> cos_, sin_;                           // the step's rotary angles, a row of rope_dims / 2 per token
  std::map<std::pair<size_t, size_t>, BufferPlan> plans_;  // by (tokens, logit rows)
  const BufferPlan* plan_ = nullptr;
  struct alignas(64) Line {
    std::byte bytes[64];
  };
  std::vector<Line> arena_storage_;
  std::span<std::byte> arena_;
  std::vector<OpTime>* op_times_ = nullptr;
};

}  // namespace mmgpt
