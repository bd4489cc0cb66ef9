// The panel-packed matmul (core/panel_layout.hpp, gemm_simd.hpp): the
// layout itself, every SIMD instantiation against the scalar reference on
// awkward shapes (rows 1 .. MR and beyond, N around the panel width, K around
// the vector widths, and long), every epilogue, and the invariants the
// engine relies on: fusing changes nothing, a row's result does not depend on
// M or on the thread count.
//
// Tolerances are those of test_kernels_simd.cpp: on small-integer data every
// product and partial sum is exact, so results must be bit-identical; on
// random data each side is within (K+1) u sum|x w| of the exact value.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string_view>
#include <vector>

#include <tbb/global_control.h>

#include "kernels_testing.hpp"

namespace k = mmgpt::kernels;
using k::Activation;
using k::Epilogue;
using kt::kU;

namespace {

std::vector<float> pack(const std::vector<float>& w, size_t N, size_t K) {
  std::vector<float> p(mmgpt::panel_floats(N, K), -7.0f);
  mmgpt::pack_panels(w.data(), N, K, p.data());
  return p;
}

// sum |x_k w_k| for row m of x and row n of W.
double abs_dot(const std::vector<float>& x, const std::vector<float>& w, size_t m, size_t n, size_t K) {
  double s = 0;
  for (size_t i = 0; i < K; ++i) s += std::fabs(double(x[m * K + i]) * w[n * K + i]);
  return s;
}

const char* act_name(Activation a) {
  return a == Activation::None      ? "none"
         : a == Activation::GeluErf ? "gelu_erf"
         : a == Activation::GeluTanh ? "gelu_tanh"
                                     : "relu2";
}

// matmul_packed against scalar::matmul_packed for one shape and epilogue.
void check_packed(size_t M, size_t K, size_t N, bool with_bias, Epilogue e, uint32_t seed) {
  CAPTURE(M);
  CAPTURE(K);
  CAPTURE(N);
  CAPTURE(with_bias);
  CAPTURE(act_name(e.act));
  CAPTURE(e.accumulate);
  if (e.act == Activation::None || e.act == Activation::ReluSquared) {  // integer data: exact, so bit-identical
    const auto x = kt::random_ints(M * K, -4, 4, seed), w = kt::random_ints(N * K, -4, 4, seed + 1);
    const auto b = kt::random_ints(N, -100, 100, seed + 2), y0 = kt::random_ints(M * N, -50, 50, seed + 3);
    const auto wp = pack(w, N, K);
    auto got = y0, want = y0;
    const float* bias = with_bias ? b.data() : nullptr;
    k::matmul_packed(x.data(), wp.data(), bias, got.data(), M, K, N, e);
    k::scalar::matmul_packed(x.data(), wp.data(), bias, want.data(), M, K, N, e);
    CHECK(got == want);
  }
  const auto x = kt::random_floats(M * K, -1, 1, seed + 4), w = kt::random_floats(N * K, -1, 1, seed + 5);
  const auto b = kt::random_floats(N, -1, 1, seed + 6), y0 = kt::random_floats(M * N, -1, 1, seed + 7);
  const auto wp = pack(w, N, K);
  auto got = y0, want = y0;
  const float* bias = with_bias ? b.data() : nullptr;
  k::matmul_packed(x.data(), wp.data(), bias, got.data(), M, K, N, e);
  k::scalar::matmul_packed(x.data(), wp.data(), bias, want.data(), M, K, N, e);
  size_t bad = 0;
  for (size_t m = 0; m < M; ++m)
    for (size_t n = 0; n < N; ++n) {
      const double pre = 2.0 * (double(K) + 1) * kU * abs_dot(x, w, m, n, K) + (bias ? 2 * kU * std::fabs(b[n]) : 0);
      // GELU's slope is below 1.13, and each side's GELU is a few ulp from exact.
      double tol = e.act == Activation::None ? pre : 1.13 * pre + 4 * kt::ulp(want[m * N + n]) + 0x1p-22;
      // ReLU squared: (a + e)^2 - a^2 = 2 a e + e^2, a = sqrt(result).
      if (e.act == Activation::ReluSquared)
        tol = (2 * std::sqrt(std::fabs(double(want[m * N + n]))) + pre) * pre + 2 * kt::ulp(want[m * N + n]);
      if (e.accumulate) tol += 2 * kU * std::fabs(y0[m * N + n]);
      tol += 2 * kt::ulp(want[m * N + n]);
      if (!(std::fabs(double(got[m * N + n]) - want[m * N + n]) <= tol)) ++bad;
    }
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("panel layout: pack puts W[n][k] at panel_index and zero-pads the last panel") {
  for (size_t N : {1, 15, 16, 17, 33}) {
    for (size_t K : {1, 3, 64}) {
      CAPTURE(N);
      CAPTURE(K);
      const auto w = kt::random_ints(N * K, -9, 9, 1);
      const auto p = pack(w, N, K);
      REQUIRE(p.size() == (N + 15) / 16 * 16 * K);
      for (size_t n = 0; n < N; ++n)
        for (size_t kk = 0; kk < K; ++kk) CHECK(p[mmgpt::panel_index(K, n, kk)] == w[n * K + kk]);
      size_t nonzero_padding = 0;
      for (size_t n = N; n < (N + 15) / 16 * 16; ++n)
        for (size_t kk = 0; kk < K; ++kk) nonzero_padding += p[mmgpt::panel_index(K, n, kk)] != 0.0f;
      CHECK(nonzero_padding == 0);
      std::vector<float> row(K);
      for (size_t n = 0; n < N; ++n) {
        mmgpt::unpack_panel_row(p.data(), K, n, row.data());
        CHECK(std::equal(row.begin(), row.end(), w.begin() + n * K));
      }
    }
  }
}

TEST_CASE("scalar packed matmul equals the scalar row-major matmul on exact data") {
  const size_t M = 5, K = 37, N = 19;
  const auto x = kt::random_ints(M * K, -4, 4, 1), w = kt::random_ints(N * K, -4, 4, 2),
             b = kt::random_ints(N, -9, 9, 3);
  std::vector<float> a(M * N), c(M * N);
  k::scalar::matmul(x.data(), w.data(), b.data(), a.data(), M, K, N);
  k::scalar::matmul_packed(x.data(), pack(w, N, K).data(), b.data(), c.data(), M, K, N);
  CHECK(a == c);
}

TEST_CASE("packed matmul matches the scalar reference on awkward shapes") {
  const size_t Ks[] = {1, 2, 3, 7, 8, 9, 15, 16, 17, 33, 65, 257};
  const size_t Ns[] = {1, 5, 15, 16, 17, 31, 32, 33, 47, 129};
  kt::for_each_simd_isa([&](std::string_view) {
    uint32_t seed = 1;
    for (size_t M : {1, 2, 3, 5, 6, 7, 8, 9, 12, 13, 16, 17, 20, 25})
      for (size_t K : Ks)
        for (size_t N : Ns) {
          check_packed(M, K, N, true, {}, seed);
          check_packed(M, K, N, false, {}, seed + 1);
          seed += 13;
        }
  });
}

TEST_CASE("packed matmul epilogues match the scalar reference") {
  kt::for_each_simd_isa([&](std::string_view) {
    uint32_t seed = 500;
    for (Activation act : {Activation::None, Activation::GeluErf, Activation::GeluTanh, Activation::ReluSquared})
      for (bool accumulate : {false, true})
        for (size_t M : {1, 4, 7})
          for (size_t N : {1, 16, 45}) {
            check_packed(M, 33, N, true, {act, accumulate}, seed);
            check_packed(M, 20, N, false, {act, accumulate}, seed + 1);
            seed += 5;
          }
  });
}

TEST_CASE("packed matmul: large shapes (x past 256 KiB, K past 1024) match the reference") {
  // Long FMA chains over K and many tiles of rows per panel, with partial
  // tiles of rows and of panels.
  kt::for_each_simd_isa([&](std::string_view) {
    check_packed(300, 300, 37, true, {}, 1);
    check_packed(241, 1031, 18, true, {Activation::GeluTanh, false}, 2);
    check_packed(97, 769, 33, false, {Activation::None, true}, 3);
  });
}

TEST_CASE("packed matmul with K = 0 is the epilogue of zero") {
  kt::for_each_simd_isa([](std::string_view) {
    const float bias[3] = {1.5f, -2.0f, 0.25f};
    std::vector<float> y(6, 99.0f);
    k::matmul_packed(nullptr, nullptr, bias, y.data(), 2, 0, 3);
    CHECK(y == std::vector<float>{1.5f, -2.0f, 0.25f, 1.5f, -2.0f, 0.25f});
    k::matmul_packed(nullptr, nullptr, nullptr, y.data(), 2, 0, 3, {Activation::None, true});
    CHECK(y == std::vector<float>{1.5f, -2.0f, 0.25f, 1.5f, -2.0f, 0.25f});
  });
}

TEST_CASE("fused epilogues equal the unfused kernels bit for bit") {
  kt::for_each_simd_isa([](std::string_view) {
    for (size_t M : {1, 5, 300}) {
      for (size_t N : {45, 64}) {
        CAPTURE(M);
        CAPTURE(N);
        const size_t K = 300;
        const auto x = kt::random_floats(M * K, -1, 1, 1), w = kt::random_floats(N * K, -1, 1, 2);
        const auto b = kt::random_floats(N, -1, 1, 3), r = kt::random_floats(M * N, -1, 1, 4);
        const auto wp = pack(w, N, K);
        for (Activation act : {Activation::GeluErf, Activation::GeluTanh, Activation::ReluSquared}) {
          std::vector<float> fused(M * N), plain(M * N);
          k::matmul_packed(x.data(), wp.data(), b.data(), fused.data(), M, K, N, {act, false});
          k::matmul_packed(x.data(), wp.data(), b.data(), plain.data(), M, K, N);
          if (act == Activation::GeluErf)
            k::gelu_erf(plain.data(), plain.size());
          else if (act == Activation::GeluTanh)
            k::gelu_tanh(plain.data(), plain.size());
          else
            k::scalar::relu_squared(plain.data(), plain.size());
          CHECK(fused == plain);
        }
        auto fused = r, plain = r;
        std::vector<float> tmp(M * N);
        k::matmul_packed(x.data(), wp.data(), b.data(), fused.data(), M, K, N, {Activation::None, true});
        k::matmul_packed(x.data(), wp.data(), b.data(), tmp.data(), M, K, N);
        k::add(plain.data(), tmp.data(), plain.size());
        CHECK(fused == plain);
      }
    }
  });
}

TEST_CASE("packed matmul: a row's result does not depend on M (decode equals prefill equals a batch)") {
  kt::for_each_simd_isa([](std::string_view) {
    for (auto mk : {std::pair<size_t, size_t>{13, 7}, {16, 129}, {17, 768}, {300, 1031}}) {
      // Named copies, not a structured binding: clang 14 (the sanitizer build)
      // cannot capture bindings in CAPTURE's lambda.
      const size_t M = mk.first, K = mk.second;
      CAPTURE(M);
      CAPTURE(K);
      const size_t N = 45;
      const auto x = kt::random_floats(M * K, -1, 1, 31), w = kt::random_floats(N * K, -1, 1, 32);
      const auto b = kt::random_floats(N, -1, 1, 33);
      const auto wp = pack(w, N, K);
      std::vector<float> all(M * N), one(N);
      k::matmul_packed(x.data(), wp.data(), b.data(), all.data(), M, K, N);
      size_t differ = 0;
      for (size_t m = 0; m < M; ++m) {
        k::matmul_packed(x.data() + m * K, wp.data(), b.data(), one.data(), 1, K, N);
        differ += !std::equal(one.begin(), one.end(), all.begin() + m * N);
      }
      CHECK(differ == 0);
    }
  });
}

TEST_CASE("packed matmul results do not depend on the thread count") {
  kt::for_each_simd_isa([](std::string_view) {
    for (auto mkn : {std::tuple<size_t, size_t, size_t>{1, 768, 2307}, {8, 768, 2307}, {16, 65, 2307}, {300, 1031, 515}}) {
      const size_t M = std::get<0>(mkn), K = std::get<1>(mkn), N = std::get<2>(mkn);
      CAPTURE(M);
      const auto x = kt::random_floats(M * K, -1, 1, 5), w = kt::random_floats(N * K, -1, 1, 6);
      const auto b = kt::random_floats(N, -1, 1, 7);
      const auto wp = pack(w, N, K);
      std::vector<std::vector<float>> runs;
      for (size_t threads : {1, 2, 7}) {
        tbb::global_control limit(tbb::global_control::max_allowed_parallelism, threads);
        std::vector<float> y(M * N);
        k::matmul_packed(x.data(), wp.data(), b.data(), y.data(), M, K, N, {Activation::GeluTanh, false});
        runs.push_back(std::move(y));
      }
      CHECK(runs[0] == runs[1]);
      CHECK(runs[0] == runs[2]);
    }
  });
}

TEST_CASE("PanelProduct: any split of the panels, run in any order, gives matmul_packed's result bit for bit") {
  // Every weight type, on every ISA (and the bf16 dot product where the CPU
  // has it): ranges of one panel, odd starts (a 16-bit pair split), a range
  // past a pair, whole; decode and prefill rows.
  kt::for_each_simd_isa([](std::string_view) {
    for (auto t : {mmgpt::WeightType::F32, mmgpt::WeightType::BF16, mmgpt::WeightType::F16, mmgpt::WeightType::Q8_0,
                   mmgpt::WeightType::Q4_0}) {
      for (auto mkn : {std::tuple<size_t, size_t, size_t>{1, 67, 113}, {5, 96, 80}, {1, 768, 257}}) {
        const size_t M = std::get<0>(mkn), K = std::get<1>(mkn), N = std::get<2>(mkn);
        CAPTURE(static_cast<int>(t));
        CAPTURE(M);
        CAPTURE(K);
        const auto x = kt::random_floats(M * K, -1, 1, 11), w = kt::random_floats(N * K, -1, 1, 12);
        const auto b = kt::random_floats(N, -1, 1, 13);
        std::vector<uint8_t> wp(mmgpt::packed_weight_bytes(t, N, K));
        if (t == mmgpt::WeightType::F32) {
          const auto p = pack(w, N, K);
          std::memcpy(wp.data(), p.data(), wp.size());
        } else if (t == mmgpt::WeightType::BF16 || t == mmgpt::WeightType::F16) {
          std::vector<uint16_t> h(mmgpt::panel_floats(N, K));
          mmgpt::pack_half_panels(w.data(), N, K, t, h.data());
          std::memcpy(wp.data(), h.data(), wp.size());
        } else {
          mmgpt::quantize_panels(w.data(), N, K, t, wp.data());
        }
        const Epilogue e{Activation::GeluTanh, false};
        std::vector<float> want(M * N);
        k::matmul_packed(x.data(), wp.data(), t, b.data(), want.data(), M, K, N, e);
        const size_t panels = mmgpt::panel_count(N);
        // Ranges cut at 1, 2, 3, 6 and the middle: odd starts (a 16-bit pair
        // split) included; run back to front.
        std::vector<float> got(M * N, -1.0f);
        const k::PanelProduct product(x.data(), wp.data(), t, b.data(), got.data(), M, K, N, e);
        REQUIRE(product.panels() == panels);
        std::vector<size_t> cuts = {0, 1, 2, 3, 6, panels / 2 + 1, panels};
        for (size_t& c : cuts) c = std::min(c, panels);
        std::sort(cuts.begin(), cuts.end());
        for (size_t i = cuts.size() - 1; i-- > 0;)
          if (cuts[i] < cuts[i + 1]) product.run(cuts[i], cuts[i + 1]);
        CHECK(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)) == 0);
      }
    }
  });
}
