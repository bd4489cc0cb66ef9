// Kernel throughput for GPT-2 small shapes, for the dispatched instantiation
// and for the scalar reference. Wall-clock time (the kernels use all threads).
//
//   bench_kernels --benchmark_filter='matmul/avx2'
//
// Rate counters, shown as GFLOP=x/s (2 flops per multiply-add) and GB=x/s (bytes the kernel
// must read and write at least once: for matmul x, W, bias and y).
#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "kernels/kernels.hpp"

namespace k = mmgpt::kernels;

namespace {

std::vector<float> random_floats(size_t n, uint32_t seed) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> v(n);
    for (auto& x : v) x = dist(gen);
    return v;
}

// Forces `isa` for the duration of one benchmark.
struct IsaScope {
    std::string saved{k::isa_name()};
    explicit IsaScope(const std::string& isa) {
        if (!k::force_isa(isa)) std::fprintf(stderr, "bench_kernels: cannot force ISA %s\n", isa.c_str());
    }
    ~IsaScope() { k::force_isa(saved); }
};

void set_rates(benchmark::State& state, double flops, double bytes) {
    using benchmark::Counter;
    if (flops > 0) state.counters["GFLOP"] = Counter(flops * 1e-9, Counter::kIsIterationInvariantRate);
    state.counters["GB"] = Counter(bytes * 1e-9, Counter::kIsIterationInvariantRate);
}

void bench_matmul(benchmark::State& state, std::string isa, size_t M, size_t K, size_t N) {
    IsaScope scope(isa);
    const auto x = random_floats(M * K, 1), w = random_floats(N * K, 2), b = random_floats(N, 3);
    std::vector<float> y(M * N);
    for (auto _ : state) {
        k::matmul(x.data(), w.data(), b.data(), y.data(), M, K, N);
        benchmark::DoNotOptimize(y.data());
        benchmark::ClobberMemory();
    }
    set_rates(state, 2.0 * M * K * N, 4.0 * (M * K + N * K + N + M * N));
}

void bench_layernorm(benchmark::State& state, std::string isa, size_t rows, size_t dim) {
    IsaScope scope(isa);
    const auto x = random_floats(rows * dim, 4), g = random_floats(dim, 5), b = random_floats(dim, 6);
    std::vector<float> y(rows * dim);
    for (auto _ : state) {
        k::layernorm(x.data(), g.data(), b.data(), y.data(), rows, dim, 1e-5f);
        benchmark::DoNotOptimize(y.data());
        benchmark::ClobberMemory();
    }
    state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * rows * dim));
    set_rates(state, 0, 4.0 * (2 * rows * dim + 2 * dim));
}

// In-place kernels restore their input every iteration (gelu applied over and
// over would drift into denormals): the copy is timed too, and counted in GB/s.
template <void (*Fn)(float*, size_t)>
void bench_inplace(benchmark::State& state, std::string isa, size_t n) {
    IsaScope scope(isa);
    const auto src = random_floats(n, 7);
    std::vector<float> x(n);
    for (auto _ : state) {
        std::copy(src.begin(), src.end(), x.begin());
        Fn(x.data(), n);
        benchmark::DoNotOptimize(x.data());
        benchmark::ClobberMemory();
    }
    state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * n));
    set_rates(state, 0, 4.0 * 3 * n);  // copy: read + write; kernel: in cache
}

void register_all(const std::string& isa) {
    auto reg = [&](const std::string& name, auto fn) {
        benchmark::RegisterBenchmark(name.c_str(), fn)->UseRealTime()->Unit(benchmark::kMicrosecond);
    };
    struct Shape {
        size_t K, N;
    };
    for (size_t M : {1, 64})
        for (Shape s : {Shape{768, 768}, Shape{768, 2304}, Shape{768, 3072}, Shape{3072, 768}}) {
            const std::string name = "matmul/" + isa + "/M=" + std::to_string(M) + "/K=" + std::to_string(s.K) +
                                     "/N=" + std::to_string(s.N);
            reg(name, [=](benchmark::State& st) { bench_matmul(st, isa, M, s.K, s.N); });
        }
    for (size_t rows : {1, 64})
        reg("layernorm/" + isa + "/rows=" + std::to_string(rows) + "/dim=768",
            [=](benchmark::State& st) { bench_layernorm(st, isa, rows, 768); });
    for (size_t n : {3072, 64 * 3072}) {
        reg("gelu_erf/" + isa + "/n=" + std::to_string(n),
            [=](benchmark::State& st) { bench_inplace<k::gelu_erf>(st, isa, n); });
        reg("gelu_tanh/" + isa + "/n=" + std::to_string(n),
            [=](benchmark::State& st) { bench_inplace<k::gelu_tanh>(st, isa, n); });
    }
    for (size_t n : {64, 1024, 50257})
        reg("softmax/" + isa + "/n=" + std::to_string(n),
            [=](benchmark::State& st) { bench_inplace<k::softmax>(st, isa, n); });
}

}  // namespace

int main(int argc, char** argv) {
    const std::string dispatched{k::isa_name()};
    register_all(dispatched);
    if (dispatched != "scalar") register_all("scalar");
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
