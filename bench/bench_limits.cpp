// The machine's own limits, measured in this run: read bandwidth with 1 and N
// threads (N = the CPUs this process may run on), from anonymous huge-page memory and
// from a page-cache-backed file mapping, peak fp32 FMA throughput and peak
// int8 dot-product throughput (the quantized kernels' instructions) per core
// and on all cores, and where the CPU has AMX tiles the peaks of TDPBF16PS
// and TDPBSSD (the tile kernels' instructions; "AMX: not available on this
// CPU" on stderr otherwise). Every other figure in bench/ is read against these.
//
//   bench_limits                          # 1 GiB buffers
//   MMGPT_BENCH_BW_MIB=256 bench_limits   # smaller buffers (keep well past the LLC)
//
// Counters: GB=x/s (1e9 bytes read per second, mean), best_GB/s; GFLOP/s (2 flops per FMA, mean),
// the best rate and its per-thread share; the int8 probes (VNNI / AVX2 and AMX's TDPBSSD)
// count 2 ops per byte product, TDPBF16PS 2 flops per bf16 product.
// Google Benchmark repeats each case; ask for --benchmark_repetitions=5 to see spread.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include <benchmark/benchmark.h>

#if defined(__linux__)
#include <sched.h>
#endif

#include "kernels/machine_limits.hpp"

namespace lim = mmgpt::limits;

namespace {

// Buffers are made once and shared by every case that reads them (making 1 GiB takes a while).
const lim::ReadBuffer& buffer(lim::ReadBuffer::Kind kind) {
  static std::unique_ptr<lim::ReadBuffer> anon, file;
  auto& slot = kind == lim::ReadBuffer::Kind::AnonHugePages ? anon : file;
  if (!slot) slot = std::make_unique<lim::ReadBuffer>(lim::probe_bytes(), kind);
  return *slot;
}

void bench_read(benchmark::State& state, lim::ReadBuffer::Kind kind, unsigned threads) {
  const lim::ReadBuffer& buf = buffer(kind);
  double best = 0;
  for (auto _ : state) {
    const double gbps = lim::read_bandwidth_gbps(buf, threads, 1);
    best = std::max(best, gbps);
    state.SetIterationTime(double(buf.size()) / (gbps * 1e9));
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * buf.size()));
  state.counters["GB"] = benchmark::Counter(double(buf.size()) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["best_GB/s"] = best;
  state.SetLabel(buf.describe());
}

// A peak probe: probe(threads) returns the best rate of one short pass, which
// the counters named after `unit` report; label names the instructions timed.
template <class Probe>
void bench_peak(benchmark::State& state, unsigned threads, const std::string& unit, const char* label, Probe probe) {
  double best = 0, sum = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    const double g = probe(threads);
    state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    best = std::max(best, g), sum += g;
  }
  state.counters[unit] = sum / double(state.iterations());  // mean over iterations
  state.counters[unit + "_per_thread"] = best / threads;
  state.counters["best_" + unit] = best;
  state.SetLabel(label);
}

// The CPUs this process may run on (taskset, cgroups), else every hardware thread.
unsigned usable_cpus() {
#if defined(__linux__)
  cpu_set_t set;
  if (::sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return unsigned(CPU_COUNT(&set));
#endif
  return std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace

int main(int argc, char** argv) {
  // Every probe: 5 timed iterations, in ms, with the time the probe reports.
  auto reg = [](const std::string& name, auto fn) {
    benchmark::RegisterBenchmark(name.c_str(), fn)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(5);
  };
  const unsigned n = usable_cpus();
  for (unsigned t : {1u, n}) {
    const std::string th = "/threads=" + std::to_string(t);
    reg("read_bw/anon_hugepage" + th,
        [t](benchmark::State& s) { bench_read(s, lim::ReadBuffer::Kind::AnonHugePages, t); });
    reg("read_bw/mmapped_file" + th, [t](benchmark::State& s) { bench_read(s, lim::ReadBuffer::Kind::FileMapped, t); });
    reg("fma_peak/fp32" + th, [t](benchmark::State& s) {
      bench_peak(s, t, "GFLOP/s", lim::best_fma_path().isa, [](unsigned n) { return lim::fma_peak_gflops(n, 0.1, 1); });
    });
    if (lim::int8_dot_path().run)
      reg("dot_peak/int8" + th, [t](benchmark::State& s) {
        bench_peak(s, t, "GOP/s", lim::int8_dot_path().isa,
                   [](unsigned n) { return lim::int8_dot_peak_gops(n, 0.1, 1); });
      });
    if (lim::amx_support().bf16_usable())
      reg("amx_peak/bf16" + th, [t](benchmark::State& s) {
        bench_peak(s, t, "GFLOP/s", "amx tdpbf16ps", [](unsigned n) { return lim::amx_bf16_peak_gflops(n, 0.1, 1); });
      });
    if (lim::amx_support().int8_usable())
      reg("amx_peak/int8" + th, [t](benchmark::State& s) {
        bench_peak(s, t, "GOP/s", "amx tdpbssd", [](unsigned n) { return lim::amx_int8_peak_gops(n, 0.1, 1); });
      });
    if (n == 1) break;
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  // To stderr, with Google Benchmark's own context: stdout stays the report
  // (--benchmark_format=json reads whole).
  const lim::AmxSupport& amx = lim::amx_support();
  if (!amx.tile || (!amx.int8 && !amx.bf16))
    std::fprintf(stderr, "AMX: not available on this CPU\n");
  else if (!amx.os_state)
    std::fprintf(stderr, "AMX: the CPU has tiles, but the OS does not enable their state (XCR0 bits 17, 18)\n");
  else if (!amx.permitted)
    std::fprintf(stderr, "AMX: the CPU has tiles, but the kernel refused this process their state (arch_prctl)\n");
  else if (!amx.int8 || !amx.bf16)
    std::fprintf(stderr, "AMX: this CPU has %s tile products only\n", amx.int8 ? "int8" : "bf16");
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
