// mmgpt bench: end-to-end prefill and decode throughput, llama-bench style.
//
// For every (threads, batch, prompt length) combination: one warm-up, then r
// timed repetitions of a prefill of p random token ids (fixed seed) in each of
// b sequences, then n greedy decode steps (end-of-text ignored). Reported:
// medians with the min-max spread, time to first token, peak RSS, and the
// decode's fraction of the read bandwidth, which is what bounds decode: a step
// reads every weight once (the LM head included), so
//   frac_of_bw = weight bytes per step * steps/s / read bandwidth
// where the read bandwidth is measured in this process, with the same thread
// count, right before each timed run (after a pause of kProbeSettle, so the
// threads of the run before are quiet), by streaming the model's own mapped file
// (the very pages decode reads) with plain vector loads (kernels/machine_limits.hpp),
// best of two passes, each started with the file evicted from the CPU caches
// (x86): a file only a few times the L3 is otherwise partly read from the L3
// on the second pass, which is not the memory bandwidth the ratio is about;
// frac_of_bw is the median over the runs of each run's ratio. A probe of
// anonymous huge-page memory is printed in the header for reference.
// A step also reads the KV cache: keys and values of every layer for each
// position so far (the new one included), n_layer * 2 * n_kv_head *
// head_dim elements of the cache's dtype per position and sequence. frac_of_bw_with_kv adds those
// bytes, which is what memory actually serves per step; at long contexts they
// are a sizeable part of it (73.7 KB per position for 124M with an f32 cache).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <tbb/global_control.h>
#include <nlohmann/json.hpp>

#include "core/platform.hpp"
#include "core/weight_type.hpp"
#include "engine/executor.hpp"
#include "engine/mmgpt.hpp"
#include "engine/sampler.hpp"
#include "formats/error.hpp"
#include "kernels/kernels.hpp"
#include "kernels/machine_limits.hpp"
#include "tools/cli/bench_profile.hpp"
#include "tools/cli/commands.hpp"
#include "tools/cli/validate.hpp"

namespace mmgpt::cli {

namespace {

using Clock = std::chrono::steady_clock;
// Idle time before each bandwidth probe, so the threads of the run before
// have gone quiet (below).
constexpr auto kProbeSettle = std::chrono::milliseconds(200);
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct BenchArgs {
  std::string model;
  std::vector<size_t> prompt{512}, batch{1};
  size_t n = 128, reps = 5, bw_mib = 1024;
  std::vector<unsigned> threads;
  std::string prompt_list = "512", batch_list = "1", threads_list;  // as given; parsed by the callback
  bool json = false;
  std::string kv_dtype = "f32";
  bool profile = false;
  std::string trace;  // Chrome trace-event JSON of the first combination's profiled run
};

// Decode steps of the profiled run (--profile, --trace): enough to average a
// decode step, few enough for a trace to stay readable.
constexpr size_t kProfileDecodeSteps = 8;

struct Spread {
  double median = 0, min = 0, max = 0;
  std::vector<double> samples;
};
Spread spread(std::vector<double> v) {
  Spread s;
  s.samples = v;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.min = v.front(), s.max = v.back();
  const size_t m = v.size() / 2;
  s.median = v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
  return s;
}

// Bytes of weights a decode step reads: every matrix and vector once, the LM
// head included (wte when tied), but only one row of each embedding table.
uint64_t decode_weight_bytes(const Model& model) {
  const ModelConfig& c = model.config();
  uint64_t bytes = 0;
  for (const TensorView& t : model.file().tensors()) {
    if (t.name == "wpe" || (t.name == "wte" && !c.tied_lm_head))
      // One row: its share of the tensor (panel16 rows are padded to 16; a
      // quantized row is its blocks' quants and scales).
      bytes += t.layout == Layout::Panel16 ? t.nbytes / ((t.shape[0] + 15) / 16 * 16) : t.nbytes / t.shape[0];
    else
      bytes += t.nbytes;
  }
  return bytes;
}

// Floating-point operations of a prefill of p tokens in one sequence: every
// block matmul for each token, attention (q.k and p.v over the causal
// triangle), and the LM head for the last position only.
double prefill_flops(const ModelConfig& c, size_t p) {
  const double d = c.n_embd, ff = c.n_ff, L = c.n_layer, P = double(p), q = double(c.q_width());
  const double kv = double(c.kv_width()), up = c.mlp_gated ? 2 * ff : ff;
  const double matmul = 2.0 * P * L * ((q + 2 * kv) * d + q * d + up * d + ff * d);
  const double attention = 2.0 * 2.0 * L * q * (P * (P + 1) / 2);
  return matmul + attention + 2.0 * d * c.vocab_size;
}

struct Result {
  unsigned threads = 0;
  size_t batch = 0, prompt = 0, decode = 0;
  Spread prefill_tps, decode_tps, ttft_ms;
  double decode_gbps = 0, frac_of_bw = 0, read_bw = 0, peak_rss = 0;
  double kv_bytes_per_step = 0, frac_of_bw_with_kv = 0;  // KV cache reads, mean over the decode steps
  Spread model_bw;                                       // GB/s streaming the mapped model file, probed before each run
  double prefill_gflops = 0, frac_of_peak = 0;
  double frac_of_amx_peak = -1;  // of the AMX peak of the model's main weight type; < 0: AMX not in use
};

// One timed run: prefill then decode, b sequences together.
struct RunTimes {
  double prefill_s = 0, ttft_s = 0, decode_s = 0;
};
RunTimes run_once(Executor& exec, std::vector<KVCache>& caches, const std::vector<std::vector<int32_t>>& prompts,
                  size_t n) {
  const size_t b = prompts.size(), vocab = exec.model().config().vocab_size;
  for (KVCache& c : caches) c.clear();
  std::vector<SequenceStep> steps(b);
  std::vector<int32_t> next(b);
  auto pick = [&](std::span<const float> logits) {  // greedy, one row per sequence
    for (size_t i = 0; i < b; ++i) next[i] = argmax(logits.subspan(i * vocab, vocab));
  };
  RunTimes t;
  const Clock::time_point start = Clock::now();
  for (size_t i = 0; i < b; ++i) steps[i] = SequenceStep{prompts[i], &caches[i], 1};
  std::span<const float> logits = exec.run(steps);
  t.prefill_s = since(start);
  pick(logits);
  t.ttft_s = since(start);
  const Clock::time_point d0 = Clock::now();
  for (size_t s = 0; s < n; ++s) {
    for (size_t i = 0; i < b; ++i) steps[i] = SequenceStep{std::span<const int32_t>(&next[i], 1), &caches[i], 1};
    pick(exec.run(steps));
  }
  t.decode_s = since(d0);
  return t;
}

std::string fmt_spread(const Spread& s, const char* f) {
  return fmt(f, s.median) + " (" + fmt(f, s.min) + "-" + fmt(f, s.max) + ")";
}

void run_bench(const BenchArgs& a) {
  const LanguageModel lm = LanguageModel::load(a.model);  // first: a bad path fails before the probe
  // Bandwidth probes; their buffer is freed before any timed run, and peak
  // RSS is reset per combination, so it does not count there.
  std::map<unsigned, double> bw;
  std::string probe_kind;
  {
    const limits::ReadBuffer buf(a.bw_mib << 20, limits::ReadBuffer::Kind::AnonHugePages);
    probe_kind = buf.describe();
    for (unsigned t : a.threads)
      if (!bw.count(t)) bw[t] = limits::read_bandwidth_gbps(buf, t, 3);
  }
  if (!a.trace.empty()) {  // before minutes of runs: a trace that cannot be written fails now
    const std::filesystem::path dir = std::filesystem::absolute(a.trace).parent_path();
    if (!std::filesystem::is_directory(dir)) throw Error("--trace " + a.trace + ": no directory " + dir.string());
    if (std::filesystem::is_directory(a.trace)) throw Error("--trace " + a.trace + ": is a directory");
  }
  // AMX: where the kernels run a weight type of this model on tiles, its
  // matmuls are read against the tile peak (--profile), and so is the
  // prefill where most of the matrices' elements are of that type (--json's
  // prefill_frac_of_amx_peak). The kernels name themselves "amx-int8" (every
  // quantized type) and "amx-bf16".
  uint64_t matrix_elems = 0, quant_elems = 0, bf16_elems = 0;
  for (const TensorView& t : lm.model().file().tensors())
    if (t.shape.size() == 2) {
      matrix_elems += t.numel();
      if (is_quantized(t.dtype)) quant_elems += t.numel();
      if (t.dtype == WeightType::BF16) bf16_elems += t.numel();
    }
  const bool amx_int8 = kernels::quant_isa_name() == "amx-int8" && quant_elems > 0;
  const bool amx_bf16 = kernels::bf16_isa_name() == "amx-bf16" && bf16_elems > 0;
  const bool prefill_on_int8 = amx_int8 && 2 * quant_elems > matrix_elems;
  const bool prefill_on_bf16 = !prefill_on_int8 && amx_bf16 && 2 * bf16_elems > matrix_elems;
  const char* prefill_amx = prefill_on_int8 ? "amx-int8" : prefill_on_bf16 ? "amx-bf16" : nullptr;
  std::map<unsigned, double> peak, int8_peak;               // fp32 FMA and int8 dot-product peaks, per thread count
  std::map<unsigned, double> amx_int8_peak, amx_bf16_peak;  // tile peaks, per thread count, where in use
  for (unsigned t : a.threads)
    if (!peak.count(t)) {
      peak[t] = limits::fma_peak_gflops(t);
      if (a.profile) int8_peak[t] = limits::int8_dot_peak_gops(t);
      if (amx_int8) amx_int8_peak[t] = limits::amx_int8_peak_gops(t);
      if (amx_bf16) amx_bf16_peak[t] = limits::amx_bf16_peak_gflops(t);
    }
  auto at = [](const std::map<unsigned, double>& m, unsigned t) { return m.count(t) ? m.at(t) : 0.0; };
  bool traced = false;
  const ModelConfig& config = lm.config();
  const uint64_t step_bytes = decode_weight_bytes(lm.model());
  const WeightType kv_dtype = parse_kv_dtype(a.kv_dtype);
  const uint64_t kv_per_position = uint64_t{config.n_layer} * 2 * config.kv_width() * KVCache::element_bytes(kv_dtype);
  uint64_t params = 0;
  for (const TensorView& t : lm.model().file().tensors()) params += t.numel();
  std::vector<std::string> notes;
  std::mt19937 rng(1234);  // the same prompts every run
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(config.vocab_size - 1));

  std::vector<Result> results;
  bool rss_scoped = true;
  for (unsigned threads : a.threads) {
    tbb::global_control limit(tbb::global_control::max_allowed_parallelism, threads);
    for (size_t b : a.batch)
      for (size_t p_req : a.prompt) {
        size_t p = std::min<size_t>(p_req, config.n_ctx);
        if (p != p_req)
          notes.push_back("-p " + std::to_string(p_req) + " exceeds the context length " +
                          std::to_string(config.n_ctx) + "; using " + std::to_string(p));
        const size_t n = std::min(a.n, size_t{config.n_ctx} - p);
        if (n != a.n)
          notes.push_back("-n " + std::to_string(a.n) + " after " + std::to_string(p) +
                          " prompt tokens exceeds the context length; decoding " + std::to_string(n));
        std::vector<std::vector<int32_t>> prompts(b, std::vector<int32_t>(p));
        for (auto& pr : prompts)
          for (int32_t& x : pr) x = id(rng);
        rss_scoped = platform::reset_peak_rss() && rss_scoped;
        Executor exec(lm.shared_model());
        std::vector<KVCache> caches(b, KVCache(config, kv_dtype));
        run_once(exec, caches, prompts, n);  // warm-up: pages in the weights, plans the buffers
        std::vector<double> pre, dec, ttft, mbw, frac, frac_kv;
        // KV bytes of the n steps: step s attends over p + s + 1 positions in each sequence.
        const double kv_bytes =
            double(b) * double(kv_per_position) * (double(n) * double(p) + double(n) * double(n + 1) / 2);
        const ModelFile& file = lm.model().file();
        for (size_t r = 0; r < a.reps; ++r) {
          // The limit, measured now: the machine's load moves both figures together.
          // First a pause: right after a run (the warm-up or the previous one) the
          // probe reads less than it does a moment later, which would overstate frac_of_bw.
          std::this_thread::sleep_for(kProbeSettle);
          mbw.push_back(
              limits::read_bandwidth_gbps(file.mapped_bytes(), file.file_size(), threads, 2, /*from_memory=*/true));
          const RunTimes t = run_once(exec, caches, prompts, n);
          pre.push_back(double(b * p) / t.prefill_s);
          ttft.push_back(t.ttft_s * 1e3);
          if (n > 0) {
            dec.push_back(double(b * n) / t.decode_s);
            frac.push_back(double(step_bytes) * double(n) / t.decode_s * 1e-9 / mbw.back());
            frac_kv.push_back((double(step_bytes) * double(n) + kv_bytes) / t.decode_s * 1e-9 / mbw.back());
          }
        }
        if (a.profile || (!a.trace.empty() && !traced)) {
          ProfileLimits lim{peak.at(threads), a.profile ? int8_peak.at(threads) : 0.0, bw.at(threads)};
          lim.amx_int8_gops = at(amx_int8_peak, threads), lim.amx_bf16_gflops = at(amx_bf16_peak, threads);
          profile_run(exec, caches, prompts, std::min(n, kProfileDecodeSteps), threads, lim,
                      a.profile ? (a.json ? stderr : stdout) : nullptr, traced ? std::string() : a.trace);
          traced = true;
        }
        Result res;
        res.threads = threads, res.batch = b, res.prompt = p, res.decode = n;
        res.prefill_tps = spread(pre), res.decode_tps = spread(dec), res.ttft_ms = spread(ttft);
        res.read_bw = bw.at(threads);
        res.model_bw = spread(mbw);
        res.prefill_gflops = prefill_flops(config, p) * double(b) / (double(b * p) / res.prefill_tps.median) * 1e-9;
        res.frac_of_peak = res.prefill_gflops / peak.at(threads);
        if (prefill_amx) {
          const double amx = at(prefill_on_int8 ? amx_int8_peak : amx_bf16_peak, threads);
          if (amx > 0) res.frac_of_amx_peak = res.prefill_gflops / amx;
        }
        if (n > 0) {
          const double steps_per_s = res.decode_tps.median / double(b);
          res.decode_gbps = double(step_bytes) * steps_per_s * 1e-9;
          res.frac_of_bw = spread(frac).median;
          res.kv_bytes_per_step = kv_bytes / double(n);
          res.frac_of_bw_with_kv = spread(frac_kv).median;
        }
        res.peak_rss = platform::peak_rss_bytes() / 1048576.0;
        results.push_back(std::move(res));
      }
  }
  if (!rss_scoped) notes.push_back("peak RSS is the process's lifetime peak (cannot reset it here)");
  // After the runs, which read every page of the model. Said in a note only
  // for a model large enough to be streamed from memory (64 MiB, more than a
  // typical L3); a small one cannot fill 2 MB pages anyway.
  const std::optional<double> on_2mb_pages = platform::huge_mapped_share(lm.model().file().mapped_bytes());
  if (on_2mb_pages && *on_2mb_pages < 0.9 && lm.model().file().file_size() >= (uint64_t{64} << 20))
    notes.push_back(fmt("%.0f%%", *on_2mb_pages * 100) + " of " + a.model +
                    " is mapped with 2 MB pages: the page cache holds it in small pieces (a copy by `cp`, or a "
                    "file written by an older mmgpt convert), so decode pays a TLB miss every 4 KB; `dd if=" +
                    a.model +
                    " iflag=nocache count=0` drops it from the cache, and the next run reads it in 2 MB pages");
  for (const std::string& note : notes) std::fprintf(stderr, "mmgpt bench: note: %s\n", note.c_str());

  const std::string isa(kernels::isa_name());
  if (a.json) {
    nlohmann::json j;
    j["model"] = a.model;
    j["params"] = params;
    j["n_layer"] = config.n_layer, j["n_embd"] = config.n_embd, j["n_ctx"] = config.n_ctx;
    j["kernel_isa"] = isa;
    j["quant_kernel_isa"] = std::string(kernels::quant_isa_name());
    j["bf16_kernel_isa"] = std::string(kernels::bf16_isa_name());
    j["decode_prefetch"] = std::string(kernels::decode_prefetch_setting());
    j["weight_bytes_per_decode_step"] = step_bytes;
    j["kv_dtype"] = a.kv_dtype;
    j["decode_team"] = false;  // decode runs op by op like every step; the key stays for readers of older output
    j["kv_bytes_per_position"] = kv_per_position;
    j["model_share_on_2mb_pages"] = on_2mb_pages ? nlohmann::json(*on_2mb_pages) : nlohmann::json(nullptr);
    j["repetitions"] = a.reps;
    nlohmann::json probe;
    probe["memory"] = probe_kind;
    probe["mib"] = a.bw_mib;
    probe["statistic"] = "best of 3 passes";
    for (auto& [t, g] : bw) probe["gbps_by_threads"][std::to_string(t)] = g;
    for (auto& [t, g] : peak) j["fma_peak_gflops_by_threads"][std::to_string(t)] = g;
    // Only where the model's weights run on tiles (absent otherwise).
    for (auto& [t, g] : amx_int8_peak) j["amx_int8_peak_gops_by_threads"][std::to_string(t)] = g;
    for (auto& [t, g] : amx_bf16_peak) j["amx_bf16_peak_gflops_by_threads"][std::to_string(t)] = g;
    if (prefill_amx) j["prefill_amx_peak_isa"] = prefill_amx;
    j["read_bandwidth_probe"] = probe;
    auto spread_json = [](const Spread& s) {
      return nlohmann::json{{"median", s.median}, {"min", s.min}, {"max", s.max}, {"samples", s.samples}};
    };
    for (const Result& r : results) {
      nlohmann::json e{{"threads", r.threads},
                       {"batch", r.batch},
                       {"prompt_tokens", r.prompt},
                       {"decode_tokens", r.decode},
                       {"prefill_tok_s", spread_json(r.prefill_tps)},
                       {"ttft_ms", spread_json(r.ttft_ms)},
                       {"read_bw_gbps", r.read_bw},
                       {"peak_rss_mib", r.peak_rss},
                       {"model_read_bw_gbps", spread_json(r.model_bw)},
                       {"model_read_bw_from_memory", limits::kCanEvictCaches},
                       {"prefill_gflops", r.prefill_gflops},
                       {"prefill_frac_of_fma_peak", r.frac_of_peak}};
      if (r.frac_of_amx_peak >= 0) e["prefill_frac_of_amx_peak"] = r.frac_of_amx_peak;
      if (r.decode > 0) {
        e["decode_tok_s"] = spread_json(r.decode_tps);
        e["decode_weight_gbps"] = r.decode_gbps;
        e["decode_frac_of_bw"] = r.frac_of_bw;
        e["decode_kv_bytes_per_step"] = r.kv_bytes_per_step;
        e["decode_frac_of_bw_with_kv"] = r.frac_of_bw_with_kv;
      } else {
        e["decode_tok_s"] = nullptr, e["decode_weight_gbps"] = nullptr, e["decode_frac_of_bw"] = nullptr;
        e["decode_kv_bytes_per_step"] = nullptr, e["decode_frac_of_bw_with_kv"] = nullptr;
      }
      j["results"].push_back(std::move(e));
    }
    j["notes"] = notes;
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf(
      "model: %s (%.1fM params, %u layers, width %u); kernels: %s, quantized %s, bf16 %s, decode prefetch %s; KV cache "
      "%s; %zu runs after 1 warm-up\n",
      a.model.c_str(), params / 1e6, config.n_layer, config.n_embd, isa.c_str(),
      std::string(kernels::quant_isa_name()).c_str(), kernels::describe_bf16().c_str(),
      kernels::describe_decode_prefetch().c_str(), a.kv_dtype.c_str(), a.reps);
  std::printf(
      "weights read per decode step: %.1f MB (%s on 2 MB pages), KV cache %.1f KB per position; reference read "
      "bandwidth (%s, %zu MiB, best of 3):",
      step_bytes / 1e6, on_2mb_pages ? fmt("%.0f%%", *on_2mb_pages * 100).c_str() : "unknown share",
      kv_per_position / 1e3, probe_kind.c_str(), a.bw_mib);
  for (auto& [t, g] : bw) std::printf(" %u thread%s %.1f GB/s;", t, t == 1 ? "" : "s", g);
  std::printf("\nfp32 FMA peak (%s, measured now):", limits::best_fma_path().isa);
  for (auto& [t, g] : peak) std::printf(" %u thread%s %.1f GFLOP/s;", t, t == 1 ? "" : "s", g);
  if (!amx_int8_peak.empty()) std::printf("\nAMX int8 peak (tdpbssd, measured now):");
  for (auto& [t, g] : amx_int8_peak) std::printf(" %u thread%s %.1f GOP/s;", t, t == 1 ? "" : "s", g);
  if (!amx_bf16_peak.empty()) std::printf("\nAMX bf16 peak (tdpbf16ps, measured now):");
  for (auto& [t, g] : amx_bf16_peak) std::printf(" %u thread%s %.1f GFLOP/s;", t, t == 1 ? "" : "s", g);
  if (prefill_amx) {
    std::printf("\nprefill's fraction of the %s peak:", prefill_amx);
    for (const Result& r : results)
      if (r.frac_of_amx_peak >= 0)
        std::printf(" %u thread%s batch %zu pp%zu %.3f;", r.threads, r.threads == 1 ? "" : "s", r.batch, r.prompt,
                    r.frac_of_amx_peak);
  }
  std::printf(
      "\nfigures: median (min-max) over the runs; bw GB/s: streaming the mapped model file before each run%s;"
      " frac of bw: median of each run's decode GB/s / its bw;\n"
      "+KV: the same with the KV cache's bytes added (KV MB: read per step, mean over the steps);\n"
      "prefill GFLOP/s: matmuls, attention and the last position's LM head at the median rate; frac of peak: of the "
      "FMA peak\n\n",
      limits::kCanEvictCaches ? " from memory (best of 2 passes, each after evicting the file from the CPU caches)"
                              : " (best of 2 passes; the caches cannot be evicted on this CPU)");
  std::printf(
      "| threads | batch | test | prefill tok/s | prefill GFLOP/s | frac of peak | decode tok/s | TTFT ms | decode "
      "GB/s | bw GB/s | frac of bw | KV MB | frac of bw +KV | peak RSS MiB |\n");
  std::printf("| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  for (const Result& r : results) {
    const std::string test = "pp" + std::to_string(r.prompt) + "+tg" + std::to_string(r.decode);
    std::printf("| %u | %zu | %s | %s | %.1f | %.3f | %s | %s | %s | %s | %s | %s | %s | %.0f |\n", r.threads, r.batch,
                test.c_str(), fmt_spread(r.prefill_tps, "%.1f").c_str(), r.prefill_gflops, r.frac_of_peak,
                r.decode ? fmt_spread(r.decode_tps, "%.1f").c_str() : "-", fmt_spread(r.ttft_ms, "%.1f").c_str(),
                r.decode ? fmt("%.1f", r.decode_gbps).c_str() : "-", fmt_spread(r.model_bw, "%.1f").c_str(),
                r.decode ? fmt("%.3f", r.frac_of_bw).c_str() : "-",
                r.decode ? fmt("%.1f", r.kv_bytes_per_step / 1e6).c_str() : "-",
                r.decode ? fmt("%.3f", r.frac_of_bw_with_kv).c_str() : "-", r.peak_rss);
  }
}

}  // namespace

void add_bench(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  a->threads_list = std::to_string(available_cpus());
  CLI::App* cmd = app.add_subcommand("bench", "measure prefill and decode speed (llama-bench style table)");
  cmd->add_option("-m,--model", a->model, "model file (.mmgpt)")->required()->check(non_empty("path"));
  // Lists are taken as text and checked whole: CLI11's own splitting drops empty entries silently.
  cmd->add_option("-p,--n-prompt", a->prompt_list, "prompt lengths, comma-separated (default 512)")
      ->check(count_list(1, uint64_t{1} << 20));
  cmd->add_option("-n,--n-gen", a->n, "decode steps per run (default 128; 0 = prefill only)")
      ->check(count(0, uint64_t{1} << 20));
  cmd->add_option("-t,--threads", a->threads_list,
                  "thread counts, comma-separated, each at most the CPUs "
                  "available (default: all of them)")
      ->check(count_list(1, UINT32_MAX))
      ->check(CLI::Validator(
          [](std::string& s) -> std::string {
            for (uint64_t t : parse_count_list(s))
              if (t > available_cpus())
                return std::to_string(t) + " threads is more than the " + std::to_string(available_cpus()) +
                       " CPU(s) mmgpt may run on here";
            return {};
          },
          ""));
  cmd->add_option("-b,--batch", a->batch_list, "batch sizes (sequences decoded together), comma-separated (default 1)")
      ->check(count_list(1, 256));
  cmd->add_option("-r,--repetitions", a->reps, "timed runs per combination, after one warm-up (default 5)")
      ->check(count(1, 1000));
  add_kv_dtype_option(cmd, a->kv_dtype);
  cmd->add_option("--bw-mib", a->bw_mib, "bandwidth probe buffer in MiB; keep it far past the LLC (default 1024)")
      ->check(count(16, uint64_t{1} << 20));
  cmd->add_flag("--json", a->json, "print the results as JSON instead of a table");
  cmd->add_flag("--profile", a->profile,
                "after each combination's runs, one more with every op timed: a table per op kind for the prefill "
                "and a decode step (time, share, GFLOP/s or GB/s, fraction of the limit); to stderr with --json");
  cmd->add_option("--trace", a->trace,
                  "write a Chrome trace-event JSON (Perfetto, chrome://tracing) of the first combination's prefill "
                  "and decode steps: steps and ops, and each thread's tasks")
      ->check(non_empty("path"));
  cmd->callback([a]() {
    a->prompt.clear(), a->batch.clear(), a->threads.clear();
    for (uint64_t v : parse_count_list(a->prompt_list)) a->prompt.push_back(v);
    for (uint64_t v : parse_count_list(a->batch_list)) a->batch.push_back(v);
    for (uint64_t v : parse_count_list(a->threads_list)) a->threads.push_back(static_cast<unsigned>(v));
    run_bench(*a);
  });
}

}  // namespace mmgpt::cli
