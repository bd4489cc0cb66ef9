// Dispatch (which instantiation runs) and thread-count independence.
#include <string>
#include <vector>

#include <tbb/global_control.h>

#include "kernels_testing.hpp"

namespace k = mmgpt::kernels;

TEST_CASE("the default instantiation is the best the CPU runs") {
    const std::string name{k::isa_name()};
    MESSAGE("dispatched ISA: " << name);
#if defined(__x86_64__)
    const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && kt::cpu_has_f16c();
    if (std::getenv("MMGPT_ISA") == nullptr) CHECK(name == (avx512 ? "avx512" : avx2 ? "avx2" : "scalar"));
    // Never an instantiation the CPU cannot run.
    kt::IsaGuard guard;
    CHECK(k::force_isa("avx512") == avx512);
    CHECK(k::force_isa("avx2") == avx2);
    CHECK_FALSE(k::force_isa("neon"));
#elif defined(__aarch64__)
    if (std::getenv("MMGPT_ISA") == nullptr) CHECK(name == "neon");
#endif
}

TEST_CASE("force_isa switches and refuses unknown names") {
    kt::IsaGuard guard;
    const std::string before{k::isa_name()};
    CHECK(k::force_isa("scalar"));
    CHECK(k::isa_name() == "scalar");
    CHECK_FALSE(k::force_isa("sse9"));
    CHECK_FALSE(k::force_isa(""));
    CHECK_FALSE(k::force_isa("AVX2"));
    CHECK(k::isa_name() == "scalar");  // a refused name changes nothing
    CHECK(k::force_isa(before));
    CHECK(k::isa_name() == before);
}

TEST_CASE("the forced scalar instantiation is the scalar reference") {
    kt::IsaGuard guard;
    REQUIRE(k::force_isa("scalar"));
    const size_t M = 3, K = 257, N = 131;
    const auto x = kt::random_floats(M * K, -1, 1, 1), w = kt::random_floats(N * K, -1, 1, 2);
    const auto b = kt::random_floats(N, -1, 1, 3);
    std::vector<float> got(M * N), want(M * N);
    k::matmul(x.data(), w.data(), b.data(), got.data(), M, K, N);
    k::scalar::matmul(x.data(), w.data(), b.data(), want.data(), M, K, N);
    CHECK(got == want);
    auto g1 = x, g2 = x;
    k::gelu_erf(g1.data(), g1.size());
    k::scalar::gelu_erf(g2.data(), g2.size());
    CHECK(g1 == g2);
}

namespace {

// Runs every parallel kernel on inputs large enough to be split into many
// tasks, with at most `threads` threads.
std::vector<std::vector<float>> run_parallel_kernels(size_t threads) {
    tbb::global_control limit(tbb::global_control::max_allowed_parallelism, threads);
    std::vector<std::vector<float>> out;
    for (size_t M : {1, 8, 67}) {
        const size_t K = 768, N = 2304 + 3;
        const auto x = kt::random_floats(M * K, -1, 1, 5), w = kt::random_floats(N * K, -1, 1, 6);
        const auto b = kt::random_floats(N, -1, 1, 7);
        std::vector<float> y(M * N);
        k::matmul(x.data(), w.data(), b.data(), y.data(), M, K, N);
        out.push_back(y);
    }
    const size_t rows = 300, dim = 771;
    const auto x = kt::random_floats(rows * dim, -3, 3, 8), g = kt::random_floats(dim, 0.5f, 1.5f, 9);
    std::vector<float> y(rows * dim);
    k::layernorm(x.data(), g.data(), nullptr, y.data(), rows, dim, 1e-5f);
    out.push_back(y);
    auto e = x;
    k::gelu_erf(e.data(), e.size());
    out.push_back(e);
    e = x;
    k::gelu_tanh(e.data(), e.size());
    out.push_back(e);
    e = x;
    k::axpy(0.5f, y.data(), e.data(), e.size());
    k::add(e.data(), x.data(), e.size());
    out.push_back(e);
    return out;
}

}  // namespace

TEST_CASE("results are bit-identical for any thread count") {
    auto check_isa = [](std::string_view) {
        const auto one = run_parallel_kernels(1);
        const auto two = run_parallel_kernels(2);
        const auto many = run_parallel_kernels(7);
        REQUIRE(one.size() == two.size());
        for (size_t i = 0; i < one.size(); ++i) {
            CAPTURE(i);
            CHECK(one[i] == two[i]);
            CHECK(one[i] == many[i]);
        }
    };
    kt::for_each_simd_isa(check_isa);
    kt::IsaGuard guard;
    REQUIRE(k::force_isa("scalar"));
    check_isa("scalar");
}
