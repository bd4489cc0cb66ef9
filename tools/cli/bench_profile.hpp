#pragma once
// `mmgpt bench --profile` and `--trace FILE`: one extra run of a prefill and
// a few decode steps with every op timed (Executor::record_op_times) and
// every parallel task timed on its thread (TaskRecorder, kernels/parallel.hpp).
#include <cstdio>
#include <string>
#include <vector>

#include "engine/executor.hpp"
#include "engine/kv_cache.hpp"

namespace mmgpt::cli {

// One number through a printf format, for the bench tables.
inline std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

struct ProfileLimits {
  double fma_gflops = 0;  // fp32 FMA peak, these threads
  double int8_gops = 0;   // int8 dot-product peak, these threads (0: no probe)
  double read_gbps = 0;   // read bandwidth, these threads
  // AMX tile peaks, these threads, where the matmuls of that weight type run
  // on tiles (kernels::quant_isa_name() "amx-int8", bf16_isa_name()
  // "amx-bf16"); 0: not in use, those matmuls are read against the vector peaks.
  double amx_int8_gops = 0;    // TDPBSSD: quantized weights
  double amx_bf16_gflops = 0;  // TDPBF16PS: bf16 weights
};

// Runs the prompts (one sequence each, together) and then `decode_steps`
// greedy steps on `exec` and `caches` (cleared first). Unless `out` is null,
// prints to it a table for the prefill and one for the mean decode step: each op kind's
// time, share, rate of work and fraction of the limit that bounds it. With a trace path,
// writes the Chrome trace-event JSON of the run (opens in Perfetto or
// chrome://tracing): one track of steps and ops for the calling thread, one
// of tasks for each of the arena's threads. Throws mmgpt::Error when the file
// cannot be written.
void profile_run(Executor& exec, std::vector<KVCache>& caches, const std::vector<std::vector<int32_t>>& prompts,
                 size_t decode_steps, unsigned threads, const ProfileLimits& limits, std::FILE* out,
                 const std::string& trace_path);

}  // namespace mmgpt::cli
