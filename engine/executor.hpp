#pragma once
// Runs the GPT graph for one step of one sequence: a prefill of T tokens or
// a decode step of one, appending their keys and values to the KV cache.
// One Executor per concurrent session (it owns the activation arena); the
// Model it reads is shared and never written.
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <utility>
#include <vector>

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
  ~Executor();  // ends a prefetch comparison of its decode steps (decode_prefetch_tuner.hpp)
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

  // A decode step of one sequence (one new token) on more than one thread
  // runs its operations as a team (engine/stage_team.hpp) of `members`
  // threads instead of forking and joining TBB tasks per operation: 0 (the
  // default) means one member per thread of the budget (--threads) where
  // some matmul is large enough to split (matmul_packed's rule,
  // kernels::panel_range_grain), 1 turns the team off, more forces a team of
  // that many. MMGPT_DECODE_TEAM=0 in the environment turns it off too.
  // Results are the same bit for bit either way.
  //
  // Such a step (one sequence, one token) is also timed for the decode
  // kernels' prefetch hint while its setting is auto
  // (engine/decode_prefetch_tuner.hpp): which hint runs changes no result.
  void set_decode_team(size_t members) { decode_team_ = members; }
  // Whether new Executors run decode as a team (false when MMGPT_DECODE_TEAM=0).
  static bool decode_team_by_default();

 private:
  float* buffer(int id) { return reinterpret_cast<float*>(arena_.data() + plan_->offsets[id]); }
  void run_op(const Op& op, std::span<const SequenceStep> steps, size_t tokens, size_t logit_rows);
  // Members of the team for a step, or 1 for the plain op-by-op run; sets
  // team_parts_, team_grain_ and team_quantizes_ for run_team.
  size_t team_members(std::span<const SequenceStep> steps, size_t tokens);
  void run_team(const SequenceStep& step, size_t members);

  std::shared_ptr<const Model> model_;
  Graph graph_;
  std::map<std::pair<size_t, size_t>, BufferPlan> plans_;  // by (tokens, logit rows)
  const BufferPlan* plan_ = nullptr;
  struct alignas(64) Line {
    std::byte bytes[64];
  };
  std::vector<Line> arena_storage_;
  std::span<std::byte> arena_;
  size_t decode_team_ = 0;
  bool all_packed_ = false;            // every matmul's weight in the panel layout: the team runs them by panels
  std::vector<uint32_t> team_parts_;   // per op: parts of its stage (0: a layer norm folded into the next matmul)
  std::vector<size_t> team_grain_;     // per matmul op: panels per part
  std::vector<Line> team_rows_;        // per member: its own copy of a folded layer norm's output row
  std::vector<bool> norm_feeds_next_;  // per op: a layer norm read only by the matmul after it
  // Per op: its stage's parts also write their output in q8 blocks, which the
  // quantized matmul after it reads instead of quantizing the row itself.
  std::vector<bool> team_quantizes_;
  std::vector<int8_t> team_q_;  // that row's q8 blocks: quants, scales, sums
  std::vector<float> team_scale_;
  std::vector<int32_t> team_sum_;
};

}  // namespace mmgpt
