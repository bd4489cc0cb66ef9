#include "tools/cli/bench_profile.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>

#include <tbb/task_arena.h>
#include <nlohmann/json.hpp>

#include "core/weight_type.hpp"
#include "engine/sampler.hpp"
#include "formats/atomic_file.hpp"
#include "kernels/parallel.hpp"

namespace mmgpt::cli {

namespace {

using Clock = std::chrono::steady_clock;

// One step of the profiled run: its op times and what the step computed.
struct StepRecord {
  std::string name;
  Clock::time_point t0, t1;
  std::vector<Executor::OpTime> ops;
  std::vector<size_t> new_tokens, context;  // per sequence: tokens fed, positions cached before
};

// The work of one op in a step: flops (multiply-adds count 2) and the bytes it
// must move at least once. `compute`: read against a compute peak (a matmul
// or attention over many rows), else against the read bandwidth. int8 / bf16:
// a matmul of quantized / bf16 weights (read against the AMX peak where the
// tiles run it).
struct Work {
  double flops = 0, bytes = 0;
  bool compute = false, int8 = false, bf16 = false;
};

Work op_work(const Graph& g, const Op& op, const StepRecord& s, const ModelConfig& c, WeightType kv) {
  size_t tokens = 0;
  for (size_t n : s.new_tokens) tokens += n;
  const size_t rows = g.buffers[op.output].rows == Rows::Tokens ? tokens : s.new_tokens.size();
  const double width = double(g.buffers[op.output].width), q = double(c.q_width()), kvw = double(c.kv_width());
  Work w;
  switch (op.kind) {
    case OpKind::MatMul: {
      const double in = double(op.in_features), out = double(op.out_features);
      const double wbytes = double(packed_weight_bytes(op.w_type, op.out_features, op.in_features));
      w.flops = 2.0 * double(rows) * in * out;
      w.bytes = wbytes + 4.0 * double(rows) * (in + out);
      w.compute = rows >= 16;
      w.int8 = is_quantized(op.w_type);
      w.bf16 = op.w_type == WeightType::BF16;
      break;
    }
    case OpKind::Attention:
      for (size_t i = 0; i < s.new_tokens.size(); ++i) {
        const double n = double(s.new_tokens[i]), c0 = double(s.context[i]);
        // q.k and p.v over the causal triangle (a sliding window: at most `window` positions a query)
        const double window = op.window ? double(op.window) : c0 + n;
        w.flops += 4.0 * q * n * std::min(c0 + (n + 1) / 2, window);
        // keys and values of every position seen (once, however many query heads share
        // them), and each new token's qkv row and output
        w.bytes += 2.0 * kvw * double(KVCache::element_bytes(kv)) * std::min(c0 + n, window + n - 1) +
                   4.0 * n * (2 * q + 2 * kvw);
      }
      // Each sequence's queries share its keys and values: compute-bound only
      // with many new tokens in one sequence (a prefill), not a batch of decodes.
      w.compute = *std::max_element(s.new_tokens.begin(), s.new_tokens.end()) >= 16;
      break;
    case OpKind::Embed: w.bytes = 12.0 * double(rows) * width; break;
    default: w.bytes = 8.0 * double(rows) * width; break;  // read and write every element once
  }
  return w;
}

void print_table(std::FILE* out, const char* title, const std::vector<const StepRecord*>& steps, const Executor& exec,
                 const ProfileLimits& lim, WeightType kv) {
  const Graph& g = exec.graph();
  struct Row {
    size_t calls = 0;
    double seconds = 0, flops = 0, bytes = 0;
    bool compute = false, int8 = false, bf16 = false;
  };
  std::map<std::string, Row> by_kind;
  double wall = 0, in_ops = 0;
  for (const StepRecord* s : steps) {
    wall += std::chrono::duration<double>(s->t1 - s->t0).count();
    for (const Executor::OpTime& t : s->ops) {
      const double sec = std::chrono::duration<double>(t.t1 - t.t0).count();
      if (t.op == Executor::kSetUp) {  // checks, buffer plan: no work of its own to rate
        Row& r = by_kind["step set-up"];
        r.calls++, r.seconds += sec, in_ops += sec;
        continue;
      }
      const Op& op = g.ops[t.op];
      const Work w = op_work(g, op, *s, exec.model().config(), kv);
      std::string kind = op_kind_name(op.kind);
      if (op.kind == OpKind::MatMul) kind.append(" ").append(weight_type_name(op.w_type));
      Row& r = by_kind[kind];
      r.calls++, r.seconds += sec, r.flops += w.flops, r.bytes += w.bytes;
      r.compute = r.compute || w.compute, r.int8 = r.int8 || w.int8, r.bf16 = r.bf16 || w.bf16;
      in_ops += sec;
    }
  }
  const double n = double(steps.size());
  std::fprintf(out, "\n%s: %.3f ms a step (%zu step%s), ops %.1f%% of it\n", title, wall / n * 1e3, steps.size(),
               steps.size() == 1 ? "" : "s", wall > 0 ? in_ops / wall * 100 : 0.0);
  std::fprintf(out, "| op | calls a step | ms a step | share | GFLOP/s | GB/s | limit | frac of limit |\n");
  std::fprintf(out, "| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: |\n");
  std::vector<std::pair<std::string, Row>> rows(by_kind.begin(), by_kind.end());
  std::sort(rows.begin(), rows.end(), [](auto& a, auto& b) { return a.second.seconds > b.second.seconds; });
  for (const auto& [kind, r] : rows) {
    const double gflops = r.seconds > 0 ? r.flops / r.seconds * 1e-9 : 0;
    const double gbps = r.seconds > 0 ? r.bytes / r.seconds * 1e-9 : 0;
    const bool rated = r.flops > 0 || r.bytes > 0;
    const bool amx_int8 = r.compute && r.int8 && lim.amx_int8_gops > 0;
    const bool amx_bf16 = r.compute && r.bf16 && lim.amx_bf16_gflops > 0;
    const char* limit = !rated      ? "-"
                        : amx_int8  ? "AMX int8 peak"
                        : amx_bf16  ? "AMX bf16 peak"
                        : r.compute ? (r.int8 ? "int8 dot peak" : "fp32 FMA peak")
                                    : "read bandwidth";
    const double cap = amx_int8    ? lim.amx_int8_gops
                       : amx_bf16  ? lim.amx_bf16_gflops
                       : r.compute ? (r.int8 ? lim.int8_gops : lim.fma_gflops)
                                   : lim.read_gbps;
    const double frac = cap > 0 ? (r.compute ? gflops : gbps) / cap : 0;
    std::fprintf(out, "| %s | %.0f | %.3f | %.1f%% | %s | %s | %s | %s |\n", kind.c_str(), double(r.calls) / n,
                 r.seconds / n * 1e3, wall > 0 ? r.seconds / wall * 100 : 0.0,
                 r.flops > 0 ? fmt("%.0f", gflops).c_str() : "-", rated ? fmt("%.1f", gbps).c_str() : "-", limit,
                 rated ? fmt("%.3f", frac).c_str() : "-");
  }
}

void write_trace(const std::string& path, const std::vector<StepRecord>& steps, const Executor& exec,
                 const TaskRecorder& tasks, unsigned threads) {
  using nlohmann::json;
  const Clock::time_point origin = steps.front().t0;
  auto us = [&](Clock::time_point t) { return std::chrono::duration<double, std::micro>(t - origin).count(); };
  json events = json::array();
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 1}, {"args", {{"name", "mmgpt bench"}}}});
  events.push_back(
      {{"name", "thread_name"}, {"ph", "M"}, {"pid", 1}, {"tid", 0}, {"args", {{"name", "steps and ops"}}}});
  for (size_t i = 0; i < tasks.slots().size(); ++i)
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", 1},
                      {"tid", i + 1},
                      {"args", {{"name", "tasks, arena thread " + std::to_string(i)}}}});
  auto span = [&](const std::string& name, const char* cat, size_t tid, Clock::time_point t0, Clock::time_point t1) {
    return json{{"name", name},          {"cat", cat}, {"ph", "X"}, {"pid", 1}, {"tid", tid}, {"ts", us(t0)},
                {"dur", us(t1) - us(t0)}};
  };
  for (const StepRecord& s : steps) {
    events.push_back(span(s.name, "step", 0, s.t0, s.t1));
    for (const Executor::OpTime& t : s.ops) {
      if (t.op == Executor::kSetUp) {
        events.push_back(span("step set-up", "set-up", 0, t.t0, t.t1));
        continue;
      }
      const Op& op = exec.graph().ops[t.op];
      events.push_back(span(op.label, op_kind_name(op.kind), 0, t.t0, t.t1));
    }
  }
  for (size_t i = 0; i < tasks.slots().size(); ++i)
    for (const TaskRecorder::Span& t : tasks.slots()[i]) events.push_back(span("task", "task", i + 1, t.t0, t.t1));
  const json doc{{"traceEvents", events},
                 {"displayTimeUnit", "ms"},
                 {"otherData", {{"n_layer", exec.model().config().n_layer}, {"threads", threads}}}};
  const std::string text = doc.dump() + "\n";
  AtomicFile out(path);
  out.write(text.data(), text.size());
  out.commit();
}

}  // namespace

void profile_run(Executor& exec, std::vector<KVCache>& caches, const std::vector<std::vector<int32_t>>& prompts,
                 size_t decode_steps, unsigned threads, const ProfileLimits& limits, std::FILE* out,
                 const std::string& trace_path) {
  const size_t b = prompts.size(), vocab = exec.model().config().vocab_size;
  for (KVCache& c : caches) c.clear();
  std::vector<StepRecord> records;
  records.reserve(decode_steps + 1);
  TaskRecorder tasks(static_cast<size_t>(tbb::this_task_arena::max_concurrency()));
  TaskRecorder::install(&tasks);
  std::vector<int32_t> next(b);
  try {
    std::vector<SequenceStep> steps(b);
    for (size_t s = 0; s <= decode_steps; ++s) {
      StepRecord& r = records.emplace_back();
      for (size_t i = 0; i < b; ++i) {
        steps[i] = s == 0 ? SequenceStep{prompts[i], &caches[i], 1}
                          : SequenceStep{std::span<const int32_t>(&next[i], 1), &caches[i], 1};
        r.new_tokens.push_back(steps[i].ids.size());
        r.context.push_back(caches[i].length());
      }
      r.name = s == 0 ? "prefill " + std::to_string(prompts[0].size()) + " tokens x " + std::to_string(b)
                      : "decode step " + std::to_string(s);
      r.ops.reserve(exec.graph().ops.size() + 1);
      exec.record_op_times(&r.ops);
      r.t0 = Clock::now();
      const std::span<const float> logits = exec.run(steps);
      r.t1 = Clock::now();
      exec.record_op_times(nullptr);
      for (size_t i = 0; i < b; ++i) next[i] = argmax(logits.subspan(i * vocab, vocab));
    }
  } catch (...) {
    TaskRecorder::install(nullptr);
    exec.record_op_times(nullptr);
    throw;
  }
  TaskRecorder::install(nullptr);
  const WeightType kv = caches.front().dtype();
  if (out) {
    const std::string head =
        std::to_string(threads) + " thread" + (threads == 1 ? "" : "s") + ", batch " + std::to_string(b);
    print_table(out, ("profile: prefill of " + std::to_string(prompts[0].size()) + " tokens, " + head).c_str(),
                {&records[0]}, exec, limits, kv);
    std::vector<const StepRecord*> dec;
    for (size_t s = 1; s < records.size(); ++s) dec.push_back(&records[s]);
    if (!dec.empty()) print_table(out, ("profile: decode step, " + head).c_str(), dec, exec, limits, kv);
  }
  if (!trace_path.empty()) write_trace(trace_path, records, exec, tasks, threads);
}

}  // namespace mmgpt::cli
