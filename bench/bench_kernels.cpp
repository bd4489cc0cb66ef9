// Kernel throughput for GPT-2 small to XL shapes (768, 1024, 1280, 1600 wide),
// for the dispatched instantiation and (GPT-2 small shapes only) the scalar
// reference. Wall-clock time (the kernels use all threads).
//
//   bench_kernels --benchmark_filter='matmul/avx2'
//   MMGPT_BENCH_BW_MIB=256 bench_kernels     # smaller bandwidth probe at start-up
//
// Rate counters, shown as GFLOP=x/s (2 flops per multiply-add) and GB=x/s (bytes the kernel
// must read and write at least once: for matmul x, W, bias and y).
// Each figure is also read against the machine's limit, measured once at
// start-up in this process (kernels/machine_limits.hpp) with as many threads as
// the kernels use, and printed before the table:
//   frac_of_peak  GFLOP/s / fp32 FMA peak     (matmul with M > 1: compute-bound GEMM)
//   frac_of_bw    GB/s / read bandwidth        (M = 1 GEMV and streaming kernels: memory-bound;
//                 the GEMV cycles through 256 MiB of weight copies so it reads from DRAM)
//   frac_of_int8_peak  GOP/s / int8 dot-product peak  (q8_0/q4_0 matmul with M > 1)
// matmul_openblas rows run the same products through OpenBLAS's sgemm
// (bench/openblas.hpp; skipped where libopenblas.so.0 is missing), with as
// many threads; the line before the table says which OpenBLAS core ran.
// The streaming kernels' small operands live in cache, so their frac_of_bw
// may exceed 1: it says how far they are from being limited by DRAM.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <benchmark/benchmark.h>

#include <tbb/task_arena.h>

#include "core/quant_layout.hpp"
#include "engine/attention.hpp"
#include "engine/kv_cache.hpp"
#include "kernels/kernels.hpp"
#include "kernels/machine_limits.hpp"
#include "openblas.hpp"

namespace k = mmgpt::kernels;

namespace {

// The limits every figure is divided by (set in main before any benchmark runs).
struct Limits {
  double bw_gbps = 0;      // read bandwidth, all kernel threads, huge-page anonymous memory
  double peak_gflops = 0;  // fp32 FMA peak, all kernel threads
  double int8_gops = 0;    // int8 dot-product peak, all kernel threads (0: no probe for this CPU)
  unsigned threads = 1;    // the kernels' threads (OpenBLAS is given as many)
} g_limits;

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

// Forces `isa` for the duration of one benchmark.
// bf16dot: bf16 weights on the bf16 dot product where the CPU has one (else
// widened), whatever the CPU's default.
struct IsaScope {
  std::string saved{k::isa_name()};
  bool saved_bf16dot = k::bf16_isa_name() != "f32";
  explicit IsaScope(const std::string& isa, bool bf16dot = true) {
    if (!k::force_isa(isa, bf16dot)) std::fprintf(stderr, "bench_kernels: cannot force ISA %s\n", isa.c_str());
  }
  ~IsaScope() { k::force_isa(saved, saved_bf16dot); }
};

// bound: which limit the figure is read against (the other is not reported).
enum class Bound { Compute, Memory };

using Clock = std::chrono::steady_clock;

// The fractions are plain counters computed from our own wall-clock time of
// the timing loop (Google Benchmark's rate counters would print them as "/s").
// Returns the loop's seconds.
double set_rates(benchmark::State& state, Clock::time_point loop_start, double flops, double bytes,
                 Bound bound = Bound::Memory) {
  using benchmark::Counter;
  const double seconds = std::chrono::duration<double>(Clock::now() - loop_start).count();
  const double iters = static_cast<double>(state.iterations());
  if (flops > 0) state.counters["GFLOP"] = Counter(flops * 1e-9, Counter::kIsIterationInvariantRate);
  state.counters["GB"] = Counter(bytes * 1e-9, Counter::kIsIterationInvariantRate);
  if (seconds <= 0) return seconds;
  if (bound == Bound::Compute && g_limits.peak_gflops > 0)
    state.counters["frac_of_peak"] = flops * 1e-9 * iters / seconds / g_limits.peak_gflops;
  if (bound == Bound::Memory && g_limits.bw_gbps > 0)
    state.counters["frac_of_bw"] = bytes * 1e-9 * iters / seconds / g_limits.bw_gbps;
  return seconds;
}

// A GEMV (M = 1) reads each weight once per call, so to measure what decode
// sees it must read from memory, not from a cache that the previous iteration
// filled: it cycles through enough copies of W to overflow any LLC (256 MiB).
// Packed: W in the panel layout the converter writes (matmul_packed, what the
// engine runs); OpenBlas: the same product by OpenBLAS's cblas_sgemm
// (bench/openblas.hpp) on the row-major W, without the bias, counted the same
// so the rows compare directly.
enum class Gemm { Packed, OpenBlas };
void bench_matmul(benchmark::State& state, std::string isa, size_t M, size_t K, size_t N, Gemm how) {
  IsaScope scope(isa);
  const bool packed = how == Gemm::Packed;
  if (how == Gemm::OpenBlas) mmgpt::bench::OpenBlas::get().set_threads(static_cast<int>(g_limits.threads));
  const auto x = random_floats(M * K, 1), b = random_floats(N, 3);
  const size_t wn = packed ? mmgpt::panel_floats(N, K) : N * K;
  // Decode and batched decode (M <= 16) read their weights from memory every
  // step: cycle through 256 MiB of copies, as the engine's steps would.
  const size_t copies = M <= 16 ? std::max<size_t>(1, ((size_t{256} << 20) / sizeof(float) + wn - 1) / wn) : 1;
  std::vector<float> w = random_floats(N * K, 2);
  if (packed) {
    std::vector<float> p(wn);
    mmgpt::pack_panels(w.data(), N, K, p.data());
    w.swap(p);
  }
  w.resize(wn * copies);
  for (size_t c = 1; c < copies; ++c) std::copy(w.begin(), w.begin() + wn, w.begin() + c * wn);
  std::vector<float> y(M * N);
  size_t next = 0;
  const Clock::time_point start = Clock::now();
  for (auto _ : state) {
    const float* wc = w.data() + next * wn;
    switch (how) {
      case Gemm::Packed: k::matmul_packed(x.data(), wc, b.data(), y.data(), M, K, N); break;
      case Gemm::OpenBlas: mmgpt::bench::OpenBlas::get().x_wt(x.data(), wc, y.data(), int(M), int(K), int(N)); break;
    }
    next = next + 1 == copies ? 0 : next + 1;
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  // Both rates for every M: FLOPs, and the bytes the call moves at least once
  // (x, W, bias, y). One row (a GEMV) is judged against the read bandwidth,
  // more rows, which reuse each weight M times, against the FMA peak.
  set_rates(state, start, 2.0 * M * K * N, 4.0 * (M * K + N * K + N + M * N), M == 1 ? Bound::Memory : Bound::Compute);
}

// Block-quantized weights (q8_0 / q4_0) through the public matmul_packed,
// which quantizes x to q8 blocks and runs the dispatched quantized kernel set;
// the bf16 and f16 panels of the same shape for comparison. GB counts the bytes the
// call must move at least once: x, the packed weights
// (mmgpt::packed_weight_bytes: quants, scales, padding), bias and y. Decode
// (M = 1) cycles through 256 MiB of weight copies, as bench_matmul does.
void bench_matmul_typed(benchmark::State& state, std::string isa, mmgpt::WeightType t, size_t M, size_t K, size_t N,
                        bool bf16dot = true) {
  IsaScope scope(isa, bf16dot);
  const auto x = random_floats(M * K, 1), b = random_floats(N, 3);
  const auto w = random_floats(N * K, 2);
  const size_t wbytes = mmgpt::packed_weight_bytes(t, N, K);
  const size_t copies = M == 1 ? std::max<size_t>(1, ((size_t{256} << 20) + wbytes - 1) / wbytes) : 1;
  std::vector<uint8_t> packed(wbytes * copies);
  if (t == mmgpt::WeightType::Q8_0 || t == mmgpt::WeightType::Q4_0) {
    mmgpt::quantize_panels(w.data(), N, K, t, packed.data());
  } else {  // bf16 / f16 panel pairs
    std::vector<uint16_t> h(mmgpt::panel_floats(N, K));
    mmgpt::pack_half_panels(w.data(), N, K, t, h.data());
    std::memcpy(packed.data(), h.data(), wbytes);
  }
  for (size_t c = 1; c < copies; ++c) std::copy(packed.begin(), packed.begin() + wbytes, packed.begin() + c * wbytes);
  std::vector<float> y(M * N);
  size_t next = 0;
  const Clock::time_point start = Clock::now();
  for (auto _ : state) {
    k::matmul_packed(x.data(), packed.data() + next * wbytes, t, b.data(), y.data(), M, K, N);
    next = next + 1 == copies ? 0 : next + 1;
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  const double seconds = set_rates(state, start, 2.0 * M * K * N, double(wbytes) + 4.0 * (M * K + N + M * N),
                                   M == 1 ? Bound::Memory : Bound::Compute);
  // Quantized prefill runs int8 dot products: read it against their peak too.
  const bool quant = t == mmgpt::WeightType::Q8_0 || t == mmgpt::WeightType::Q4_0;
  if (quant && M > 1 && g_limits.int8_gops > 0 && seconds > 0)
    state.counters["frac_of_int8_peak"] =
        2.0 * M * K * N * 1e-9 * double(state.iterations()) / seconds / g_limits.int8_gops;
}

void bench_layernorm(benchmark::State& state, std::string isa, size_t rows, size_t dim) {
  IsaScope scope(isa);
  const auto x = random_floats(rows * dim, 4), g = random_floats(dim, 5), b = random_floats(dim, 6);
  std::vector<float> y(rows * dim);
  const Clock::time_point start = Clock::now();
  for (auto _ : state) {
    k::layernorm(x.data(), g.data(), b.data(), y.data(), rows, dim, 1e-5f);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * rows * dim));
  set_rates(state, start, 0, 4.0 * (2 * rows * dim + 2 * dim));
}

// In-place kernels restore their input every iteration (gelu applied over and
// over would drift into denormals): the copy is timed too, and counted in GB/s.
template <void (*Fn)(float*, size_t)>
void bench_inplace(benchmark::State& state, std::string isa, size_t n) {
  IsaScope scope(isa);
  const auto src = random_floats(n, 7);
  std::vector<float> x(n);
  const Clock::time_point start = Clock::now();
  for (auto _ : state) {
    std::copy(src.begin(), src.end(), x.begin());
    Fn(x.data(), n);
    benchmark::DoNotOptimize(x.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * n));
  set_rates(state, start, 0, 4.0 * 3 * n);  // copy: read + write; kernel: in cache
}

// A decode step's attention (engine/attention.cpp causal_attention: one new
// token against n positions, every layer, all heads, split over the threads
// as the engine splits it) on a GPT-2-shaped KV cache (engine/kv_cache.hpp,
// f32 or f16 elements). It reads each layer's keys and values of n positions
// once, so it cycles through copies of the cache (256 MiB in all) to read from
// memory, as decode does; GB counts those bytes.
void bench_attention(benchmark::State& state, std::string isa, size_t d, size_t n_layer, size_t n,
                     mmgpt::WeightType kv) {
  IsaScope scope(isa);
  mmgpt::ModelConfig c;
  c.n_layer = static_cast<uint32_t>(n_layer), c.n_head = static_cast<uint32_t>(d / 64);
  c.n_embd = static_cast<uint32_t>(d), c.n_ctx = static_cast<uint32_t>(n);
  const double bytes = 2.0 * n * d * mmgpt::KVCache::element_bytes(kv) * n_layer;
  const size_t copies = std::max<size_t>(1, static_cast<size_t>(double(size_t{256} << 20) / bytes + 1));
  std::vector<mmgpt::KVCache> caches;
  auto qkv = random_floats(n * 3 * d, 8);  // GPT-2's attention: no prologue rewrites it
  std::vector<float> out(n * d);
  for (size_t i = 0; i < copies; ++i) {  // filled as a prefill of n tokens fills it
    caches.emplace_back(c, kv);
    for (size_t l = 0; l < n_layer; ++l)
      mmgpt::causal_attention(qkv.data(), out.data(), n, 0, l, mmgpt::attention_spec(c), caches.back());
  }
  size_t next = 0;
  const mmgpt::AttentionSpec spec = mmgpt::attention_spec(c);
  const Clock::time_point start = Clock::now();
  for (auto _ : state) {
    for (size_t l = 0; l < n_layer; ++l)
      mmgpt::causal_attention(qkv.data() + (n - 1) * 3 * d, out.data(), 1, n - 1, l, spec, caches[next]);
    next = next + 1 == copies ? 0 : next + 1;
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  set_rates(state, start, 4.0 * n * d * n_layer, bytes);
}

// A prefill's attention: n tokens from position 0 against themselves, one
// layer, all heads (causal_attention, split over the threads as the engine
// splits it). Keys and values of a head stay in the CPU's caches, so it is
// read against the FMA peak: 4 * d flops per query and position it sees.
void bench_prefill_attention(benchmark::State& state, std::string isa, size_t d, size_t n, mmgpt::WeightType kv) {
  IsaScope scope(isa);
  mmgpt::ModelConfig c;
  c.n_layer = 1, c.n_head = static_cast<uint32_t>(d / 64);
  c.n_embd = static_cast<uint32_t>(d), c.n_ctx = static_cast<uint32_t>(n);
  mmgpt::KVCache cache(c, kv);
  auto qkv = random_floats(n * 3 * d, 9);
  std::vector<float> out(n * d);
  const Clock::time_point start = Clock::now();
  for (auto _ : state) {
    mmgpt::causal_attention(qkv.data(), out.data(), n, 0, 0, mmgpt::attention_spec(c), cache);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  set_rates(state, start, 4.0 * d * n * (n + 1) / 2, 2.0 * n * d * mmgpt::KVCache::element_bytes(kv), Bound::Compute);
}

// widths: model widths to cover; rows: matmul M values (1 = decode GEMV, 16 = batched decode, 128/512 = prefill GEMM).
void register_all(const std::string& isa, std::initializer_list<size_t> widths, std::initializer_list<size_t> rows) {
  auto reg = [&](const std::string& name, auto fn) {
    benchmark::RegisterBenchmark(name.c_str(), fn)->UseRealTime()->Unit(benchmark::kMicrosecond);
  };
  struct Shape {
    size_t K, N;
  };
  constexpr size_t kVocab = 50257;
  for (size_t d : widths) {
    // A block's four matmuls: qkv, attention projection, MLP up and down.
    for (size_t M : rows)
      for (Shape s : {Shape{d, 3 * d}, Shape{d, d}, Shape{d, 4 * d}, Shape{4 * d, d}}) {
        const std::string name =
            "matmul/" + isa + "/M=" + std::to_string(M) + "/K=" + std::to_string(s.K) + "/N=" + std::to_string(s.N);
        reg(name, [=](benchmark::State& st) { bench_matmul(st, isa, M, s.K, s.N, Gemm::Packed); });
        if (isa != "scalar" && mmgpt::bench::OpenBlas::get().ok())  // side by side with the dispatched kernels
          reg("matmul_openblas" + name.substr(7 + isa.size()),
              [=](benchmark::State& st) { bench_matmul(st, isa, M, s.K, s.N, Gemm::OpenBlas); });
      }
    // Quantized (and bf16, f16) weights, GPT-2 small only: decode shapes and the MLP up at prefill.
    if (d == 768) {
      const std::pair<mmgpt::WeightType, const char*> types[] = {{mmgpt::WeightType::Q8_0, "q8_0"},
                                                                 {mmgpt::WeightType::Q4_0, "q4_0"},
                                                                 {mmgpt::WeightType::BF16, "bf16"},
                                                                 {mmgpt::WeightType::F16, "f16"}};
      struct Case {
        size_t M, K, N;
      };
      const Case cases[] = {{1, d, 3 * d},  {1, d, 4 * d},   {1, 4 * d, d},
                            {1, d, kVocab}, {128, d, 4 * d}, {512, d, 4 * d}};
      // Where the CPU has a bf16 dot product, bf16 both ways (the default
      // takes one by CPU vendor: kernels::bf16dot_for_vendor).
      const bool has_bf16dot = [&] {
        IsaScope scope(isa);
        return k::bf16_isa_name() != "f32";
      }();
      for (const auto& [t, tname] : types)
        for (Case c : cases) {
          const std::string shape =
              "/" + isa + "/M=" + std::to_string(c.M) + "/K=" + std::to_string(c.K) + "/N=" + std::to_string(c.N);
          reg("matmul_" + std::string(tname) + shape,
              [=](benchmark::State& st) { bench_matmul_typed(st, isa, t, c.M, c.K, c.N); });
          if (t == mmgpt::WeightType::BF16 && has_bf16dot)
            reg("matmul_bf16_widened" + shape,
                [=](benchmark::State& st) { bench_matmul_typed(st, isa, t, c.M, c.K, c.N, false); });
        }
    }
    // The LM head: one row per step (prefill needs only the last position's logits).
    reg("matmul/" + isa + "/M=1/K=" + std::to_string(d) + "/N=" + std::to_string(kVocab) + "/lm_head",
        [=](benchmark::State& st) { bench_matmul(st, isa, 1, d, kVocab, Gemm::Packed); });
  }
  // Streaming kernels at decode (one row) and prefill (max of `rows`) sizes of each width.
  const size_t prefill_rows = std::max<size_t>(rows);
  for (size_t d : widths) {
    for (size_t r : {size_t{1}, prefill_rows})
      reg("layernorm/" + isa + "/rows=" + std::to_string(r) + "/dim=" + std::to_string(d),
          [=](benchmark::State& st) { bench_layernorm(st, isa, r, d); });
    for (size_t n : {4 * d, prefill_rows * 4 * d}) {
      reg("gelu_erf/" + isa + "/n=" + std::to_string(n),
          [=](benchmark::State& st) { bench_inplace<k::gelu_erf>(st, isa, n); });
      reg("gelu_tanh/" + isa + "/n=" + std::to_string(n),
          [=](benchmark::State& st) { bench_inplace<k::gelu_tanh>(st, isa, n); });
    }
  }
  // Decode attention at a short and a long context, for each width's GPT-2 depth.
  for (size_t d : widths) {
    const size_t layers = d == 768 ? 12 : d == 1024 ? 24 : d == 1280 ? 36 : 48;
    for (size_t n : {64, 576})
      for (mmgpt::WeightType kv : {mmgpt::WeightType::F32, mmgpt::WeightType::F16})
        reg("attention/" + isa + "/d=" + std::to_string(d) + "/layers=" + std::to_string(layers) +
                "/n=" + std::to_string(n) + "/kv=" + (kv == mmgpt::WeightType::F32 ? "f32" : "f16"),
            [=](benchmark::State& st) { bench_attention(st, isa, d, layers, n, kv); });
  }
  // Prefill attention at the prefill rows and at GPT-2's context.
  for (size_t d : widths)
    for (size_t n : {prefill_rows, size_t{1024}})
      for (mmgpt::WeightType kv : {mmgpt::WeightType::F32, mmgpt::WeightType::F16})
        reg("attention_prefill/" + isa + "/d=" + std::to_string(d) + "/n=" + std::to_string(n) +
                "/kv=" + (kv == mmgpt::WeightType::F32 ? "f32" : "f16"),
            [=](benchmark::State& st) { bench_prefill_attention(st, isa, d, n, kv); });
  for (size_t n : {64, 1024, 50257})
    reg("softmax/" + isa + "/n=" + std::to_string(n),
        [=](benchmark::State& st) { bench_inplace<k::softmax>(st, isa, n); });
}

}  // namespace

int main(int argc, char** argv) {
  namespace lim = mmgpt::limits;
  const unsigned threads = static_cast<unsigned>(tbb::this_task_arena::max_concurrency());
  {
    const lim::ReadBuffer buf(lim::probe_bytes(), lim::ReadBuffer::Kind::AnonHugePages);
    g_limits.bw_gbps = lim::read_bandwidth_gbps(buf, threads, 3);
  }
  g_limits.peak_gflops = lim::fma_peak_gflops(threads);
  g_limits.int8_gops = lim::int8_dot_peak_gops(threads);
  g_limits.threads = threads;
  std::fprintf(stderr,
               "limits (%u threads, measured now): read bandwidth %.1f GB/s (%s, %zu MiB, best of 3); "
               "fp32 FMA peak %.1f GFLOP/s (%s); int8 dot-product peak %.1f GOP/s (%s)\n",
               threads, g_limits.bw_gbps, "anonymous, MADV_HUGEPAGE", lim::probe_bytes() >> 20, g_limits.peak_gflops,
               lim::best_fma_path().isa, g_limits.int8_gops, lim::int8_dot_path().isa);
  const auto& blas = mmgpt::bench::OpenBlas::get();
  std::fprintf(stderr, "%s\n", blas.describe().c_str());
  benchmark::AddCustomContext("limit_read_bw_GBps", std::to_string(g_limits.bw_gbps));
  benchmark::AddCustomContext("limit_fma_peak_GFLOPs", std::to_string(g_limits.peak_gflops));
  benchmark::AddCustomContext("limit_int8_dot_peak_GOPs", std::to_string(g_limits.int8_gops));
  benchmark::AddCustomContext("limit_threads", std::to_string(threads));
  benchmark::AddCustomContext("openblas", blas.describe());

  const std::string dispatched{k::isa_name()};
  register_all(dispatched, {768, 1024, 1280, 1600}, {1, 16, 128, 512});
  // The scalar reference is slow: GPT-2 small shapes only, as a baseline.
  if (dispatched != "scalar") register_all("scalar", {768}, {1, 128});
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
