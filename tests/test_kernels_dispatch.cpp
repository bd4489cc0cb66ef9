// Dispatch (which instantiation runs) and thread-count independence.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <tbb/global_control.h>
#include <tbb/task_arena.h>

#include "kernels/parallel.hpp"
#include "kernels_testing.hpp"

namespace k = mmgpt::kernels;
using k::Activation;
using mmgpt::WeightType;

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
  std::vector<float> got(M * N), want(M * N), wp(mmgpt::panel_floats(N, K));
  mmgpt::pack_panels(w.data(), N, K, wp.data());
  k::matmul_packed(x.data(), wp.data(), b.data(), got.data(), M, K, N);
  k::scalar::matmul_packed(x.data(), wp.data(), b.data(), want.data(), M, K, N);
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
    kt::matmul_rowmajor(x.data(), w.data(), b.data(), y.data(), M, K, N);
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

TEST_CASE(
    "bf16 weights: the dot product by default on AMD, off x86 and on AMX-BF16 tiles, widened on Intel and other x86 "
    "vendors otherwise") {
  CHECK(k::bf16dot_for_vendor("AuthenticAMD"));
  CHECK(k::bf16dot_for_vendor("HygonGenuine"));
  CHECK(k::bf16dot_for_vendor(""));  // no CPUID (Arm): BFDOT
  CHECK_FALSE(k::bf16dot_for_vendor("GenuineIntel"));
  CHECK_FALSE(k::bf16dot_for_vendor("CentaurHauls"));
  const std::string isa{k::isa_name()}, bf16{k::bf16_isa_name()};
  MESSAGE("CPU vendor '" << k::cpu_vendor() << "', bf16 kernels " << k::describe_bf16());
  CHECK(k::describe_bf16().rfind(bf16, 0) == 0);  // the name first, then why
  kt::IsaGuard guard;
  REQUIRE(k::force_isa(isa, true));
  const bool cpu_has_dot = k::bf16_isa_name() != "f32";
  const bool tiles = k::bf16_isa_name() == "amx-bf16";  // taken whatever the vendor
  if (std::getenv("MMGPT_BF16DOT") == nullptr && std::getenv("MMGPT_ISA") == nullptr)
    CHECK((bf16 != "f32") == (cpu_has_dot && (tiles || k::bf16dot_for_vendor(k::cpu_vendor()))));
  REQUIRE(k::force_isa(isa, false));
  CHECK(k::bf16_isa_name() == "f32");  // widened when asked, on every CPU
}

TEST_CASE("decode prefetch hint: non-temporal on AMD and off x86, T0 on other x86 vendors; forced by name") {
  using k::DecodePrefetch;
  CHECK(k::decode_prefetch_for_vendor("AuthenticAMD") == DecodePrefetch::Nta);
  CHECK(k::decode_prefetch_for_vendor("HygonGenuine") == DecodePrefetch::Nta);
  CHECK(k::decode_prefetch_for_vendor("") == DecodePrefetch::Nta);  // no CPUID (Arm)
  CHECK(k::decode_prefetch_for_vendor("GenuineIntel") == DecodePrefetch::T0);
  CHECK(k::decode_prefetch_for_vendor("CentaurHauls") == DecodePrefetch::T0);
  if (std::getenv("MMGPT_DECODE_PREFETCH") == nullptr) {
    // Unset: auto, the vendor's hint.
    CHECK(k::decode_prefetch_setting() == "auto");
    CHECK(k::decode_prefetch() == k::decode_prefetch_for_vendor(k::cpu_vendor()));
  }
  MESSAGE("CPU vendor '" << k::cpu_vendor() << "', decode prefetch " << k::decode_prefetch_setting() << " ("
                         << k::decode_prefetch_name() << ")");
  CHECK(k::decode_prefetch_name(DecodePrefetch::Nta) == "nta");
  CHECK(k::decode_prefetch_name(DecodePrefetch::T0) == "t0");
  CHECK(k::decode_prefetch_name(DecodePrefetch::None) == "none");

  kt::DecodePrefetchGuard guard;
  CHECK(k::force_decode_prefetch("t0"));
  CHECK(k::decode_prefetch() == DecodePrefetch::T0);
  CHECK(k::decode_prefetch_name() == "t0");
  CHECK(k::decode_prefetch_setting() == "t0");
  CHECK(k::describe_decode_prefetch() == "t0");
  for (const char* bad : {"", "NTA", "t1", "t0 ", "Auto", "off"}) {
    CAPTURE(bad);
    CHECK_FALSE(k::force_decode_prefetch(bad));
    CHECK(k::decode_prefetch_name() == "t0");  // a refused name changes nothing
    CHECK(k::decode_prefetch_setting() == "t0");
  }
  CHECK(k::force_decode_prefetch("none"));
  CHECK(k::decode_prefetch() == DecodePrefetch::None);
  CHECK(k::decode_prefetch_setting() == "none");
  CHECK(k::force_decode_prefetch("nta"));
  CHECK(k::decode_prefetch() == DecodePrefetch::Nta);
  CHECK(k::decode_prefetch_name() == "nta");
  // Auto: the vendor's hint again.
  CHECK(k::force_decode_prefetch("auto"));
  CHECK(k::decode_prefetch_setting() == "auto");
  CHECK(k::decode_prefetch() == k::decode_prefetch_for_vendor(k::cpu_vendor()));
  CHECK(k::describe_decode_prefetch() == "auto (" + std::string(k::decode_prefetch_name()) + ", this CPU's default)");
}

TEST_CASE(
    "decode and small batches under each prefetch hint: every weight type and instantiation, the prefill rows bit for "
    "bit") {
  // The hint picks which instantiation of each decode loop runs
  // (decode_prefetch.hpp), for one row and for the small batches that
  // kernels stream the same way (a single row tile: up to 6 rows for the
  // AVX-512 quantized and 16-bit kernels, 8 for bf16 on VDPBF16PS; f32
  // batches of up to 16 rows); a prefetch never changes a result, so the
  // first m rows of a product, for m = 1 .. 16, must equal the same rows of
  // a 20-row prefill (more than any batch, so it runs no decode loop), at
  // thread budgets 1 and 2 (bf16 on the bf16 dot product has a decode loop
  // for each). Shapes with K odd, K below a q8 block, and N not a multiple
  // of the panel width; ranges of panels longer than the prefetch distance,
  // so the prefetches run past panels and matrices.
  kt::DecodePrefetchGuard guard;
  size_t compared = 0, differ = 0;
  kt::for_each_simd_isa([&](std::string_view isa) {
    for (WeightType t : {WeightType::F32, WeightType::BF16, WeightType::F16, WeightType::Q8_0, WeightType::Q4_0})
      for (auto nk : {std::pair<size_t, size_t>{13, 1}, {261, 95}, {70, 768}, {1031, 129}}) {
        const size_t N = nk.first, K = nk.second, M = 20;
        const auto w = kt::random_floats(N * K, -1, 1, static_cast<uint32_t>(N + K));
        const auto x = kt::random_floats(M * K, -2, 2, static_cast<uint32_t>(7 * K + N));
        const auto bias = kt::random_floats(N, -1, 1, 3);
        std::vector<uint8_t> wp(mmgpt::packed_weight_bytes(t, N, K));  // prefetches past its end never fault
        if (t == WeightType::F32)
          mmgpt::pack_panels(w.data(), N, K, reinterpret_cast<float*>(wp.data()));
        else if (t == WeightType::BF16 || t == WeightType::F16)
          mmgpt::pack_half_panels(w.data(), N, K, t, reinterpret_cast<uint16_t*>(wp.data()));
        else
          mmgpt::quantize_panels(w.data(), N, K, t, wp.data());
        for (int budget : {1, 2}) {
          tbb::global_control c(tbb::global_control::max_allowed_parallelism, budget);
          tbb::task_arena arena(budget);
          arena.execute([&] {
            REQUIRE(mmgpt::thread_budget() == size_t(budget));
            std::vector<float> prefill(M * N);
            k::matmul_packed(x.data(), wp.data(), t, bias.data(), prefill.data(), M, K, N,
                             {Activation::GeluTanh, false});
            for (const char* hint : {"nta", "t0", "none"}) {
              REQUIRE(k::force_decode_prefetch(hint));
              for (size_t m = 1; m <= 16; ++m) {
                std::vector<float> rows(m * N);
                k::matmul_packed(x.data(), wp.data(), t, bias.data(), rows.data(), m, K, N,
                                 {Activation::GeluTanh, false});
                const bool same = std::memcmp(rows.data(), prefill.data(), m * N * 4) == 0;
                if (!same) {
                  MESSAGE(isa << " type " << int(t) << " N " << N << " K " << K << " budget " << budget << " hint "
                              << std::string(hint) << " rows " << m);
                }
                differ += !same;
                ++compared;
              }
            }
          });
        }
      }
  });
  CHECK(differ == 0);
  CHECK(compared > 0);
  MESSAGE(compared << " decodes and small batches compared");
}
