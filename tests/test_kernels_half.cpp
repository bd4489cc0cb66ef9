// 16-bit weights (bf16, f16) in the panel layout: the f32 <-> 16-bit
// conversions, and the packed matmul over 16-bit panels on every SIMD
// instantiation and the scalar reference.
//
// Widening bf16/f16 to f32 is exact, and the kernels keep the f32 numerics
// (one FMA chain per output from zero), so:
// - on any data, a 16-bit matrix gives bit for bit what the f32 kernel of the
//   same ISA gives on the widened matrix (so M and the thread count cannot
//   matter either);
// - against an exact (double) evaluation on the widened weights, each output
//   is within (K+1) u sum|x w| (plus the bias, GELU and residual rounding);
// - on small-integer data every product and partial sum is exact: SIMD equals
//   the scalar reference bit for bit.
// Where the instantiation has the bf16 dot product (kernels/registry.hpp,
// test_kernels_bf16dot.cpp), bf16 weights take it instead: x is rounded to
// bf16 first. There matmul_packed is checked against that reference (and the
// exact evaluation on the rounded x), and the set's widening kernel, the
// path MMGPT_BF16DOT=0 takes, is called directly against the f32 kernel.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include <tbb/global_control.h>

#include "core/half.hpp"
#include "kernels_testing.hpp"

namespace k = mmgpt::kernels;
namespace kd = mmgpt::kernels::detail;
using k::Activation;
using k::Epilogue;
using kt::kU;
using mmgpt::WeightType;

namespace {

const char* type_name(WeightType t) { return t == WeightType::BF16 ? "bf16" : t == WeightType::F16 ? "f16" : "f32"; }

float widen(uint16_t v, WeightType t) { return t == WeightType::BF16 ? mmgpt::bf16_to_f32(v) : mmgpt::f16_to_f32(v); }

// A packed 16-bit W[N, K] and its exact f32 widening (row-major and packed).
struct HalfMatrix {
  std::vector<uint16_t> packed;    // panel layout, 16-bit
  std::vector<float> packed_wide;  // the same panels widened to f32
  std::vector<float> wide;         // row-major widened W
};

HalfMatrix make_half(const std::vector<float>& w, size_t N, size_t K, WeightType t) {
  HalfMatrix h;
  h.packed.resize(mmgpt::panel_floats(N, K));
  mmgpt::pack_half_panels(w.data(), N, K, t, h.packed.data());
  h.wide.resize(N * K);
  for (size_t n = 0; n < N; ++n)
    for (size_t kk = 0; kk < K; ++kk) h.wide[n * K + kk] = widen(h.packed[mmgpt::half_panel_index(N, K, n, kk)], t);
  h.packed_wide.resize(h.packed.size());
  mmgpt::pack_panels(h.wide.data(), N, K, h.packed_wide.data());
  return h;
}

// Random weights in [-1, 1], a few of them tiny (f16 subnormals, bf16 small normals).
std::vector<float> random_weights(size_t n, uint32_t seed) {
  auto w = kt::random_floats(n, -1, 1, seed);
  for (size_t i = 3; i < n; i += 11) w[i] *= 3e-5f;
  return w;
}

double gelu_exact(double v, Activation a) {
  if (a == Activation::GeluErf) return v * 0.5 * (1 + std::erf(v / std::sqrt(2.0)));
  if (a == Activation::GeluTanh) return 0.5 * v * (1 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
  return v;
}

// Runs the active instantiation (or the scalar reference) on one product.
std::vector<float> run(bool scalar, const std::vector<float>& x, const void* wp, WeightType t, const float* bias,
                       std::vector<float> y, size_t M, size_t K, size_t N, Epilogue e) {
  if (scalar)
    k::scalar::matmul_packed(x.data(), wp, t, bias, y.data(), M, K, N, e);
  else
    k::matmul_packed(x.data(), wp, t, bias, y.data(), M, K, N, e);
  return y;
}

// True when matmul_packed multiplies weights of type t with the bf16 dot product.
bool dot_product(WeightType t) { return t == WeightType::BF16 && kt::bf16dot_active(); }

// The active set's widening kernel for t, called directly (one thread).
std::vector<float> run_widening(const std::vector<float>& x, const uint16_t* wp, WeightType t, const float* bias,
                                std::vector<float> y, size_t M, size_t K, size_t N, Epilogue e) {
  kt::widening_panels(t, x.data(), wp, bias, y.data(), M, K, N, 0, mmgpt::panel_count(N), e);
  return y;
}

// One shape and epilogue, against the exact evaluation on the widened
// weights; unless `scalar`, also bit for bit against the f32 kernel on them
// (with the bf16 dot product: matmul_packed against its reference, the
// widening kernel against the f32 kernel).
void check_shape(bool scalar, WeightType t, size_t M, size_t K, size_t N, bool with_bias, Epilogue e, uint32_t seed) {
  CAPTURE(std::string(type_name(t)));
  CAPTURE(scalar);
  CAPTURE(M);
  CAPTURE(K);
  CAPTURE(N);
  CAPTURE(with_bias);
  CAPTURE(int(e.act));
  CAPTURE(e.accumulate);
  const auto x = kt::random_floats(M * K, -1, 1, seed), b = kt::random_floats(N, -1, 1, seed + 1);
  const auto y0 = kt::random_floats(M * N, -1, 1, seed + 2);
  const HalfMatrix h = make_half(random_weights(N * K, seed + 3), N, K, t);
  const float* bias = with_bias ? b.data() : nullptr;
  const auto got = run(scalar, x, h.packed.data(), t, bias, y0, M, K, N, e);
  const bool dot = !scalar && dot_product(t);
  // x as the products see it: rounded to bf16 on the dot product.
  std::vector<float> xe = x;
  if (!scalar) {
    auto same = y0;
    k::matmul_packed(x.data(), h.packed_wide.data(), bias, same.data(), M, K, N, e);
    if (dot) {
      CHECK(got == kt::bf16dot_expected(x.data(), h.packed.data(), bias, y0, M, K, N, e));
      CHECK(run_widening(x, h.packed.data(), t, bias, y0, M, K, N, e) == same);
      std::vector<uint16_t> xr(M * kd::bf16dot_row_elems(K));
      kd::bf16dot_round_rows(x.data(), M, K, xr.data());
      for (size_t m = 0; m < M; ++m)
        for (size_t kk = 0; kk < K; ++kk) xe[m * K + kk] = mmgpt::bf16_to_f32(xr[m * kd::bf16dot_row_elems(K) + kk]);
    } else {
      CHECK(got == same);
    }
  }
  size_t bad = 0;
  for (size_t m = 0; m < M; ++m)
    for (size_t n = 0; n < N; ++n) {
      double exact = 0, mag = 0;
      for (size_t kk = 0; kk < K; ++kk) {
        const double p = double(xe[m * K + kk]) * h.wide[n * K + kk];
        exact += p;
        mag += std::fabs(p);
      }
      if (bias) exact += b[n];
      double want = gelu_exact(exact, e.act);
      if (e.accumulate) want += y0[m * N + n];
      double tol = (double(K) + 1) * kU * mag + (bias ? 2 * kU * std::fabs(b[n]) : 0);
      if (e.act != Activation::None) tol = 1.13 * tol + 4 * kt::ulp(want) + 0x1p-22;
      if (e.accumulate) tol += 2 * kU * std::fabs(y0[m * N + n]);
      tol += 2 * kt::ulp(want);
      if (!(std::fabs(double(got[m * N + n]) - want) <= tol)) ++bad;
    }
  CHECK(bad == 0);
}

// Small integers (exact in bf16 and f16): SIMD equals the scalar reference bit for bit.
void check_exact(WeightType t, size_t M, size_t K, size_t N, uint32_t seed) {
  CAPTURE(std::string(type_name(t)));
  CAPTURE(M);
  CAPTURE(K);
  CAPTURE(N);
  const auto x = kt::random_ints(M * K, -4, 4, seed), w = kt::random_ints(N * K, -4, 4, seed + 1);
  const auto b = kt::random_ints(N, -100, 100, seed + 2), y0 = kt::random_ints(M * N, -50, 50, seed + 3);
  const HalfMatrix h = make_half(w, N, K, t);
  CHECK(h.wide == w);
  for (Epilogue e : {Epilogue{}, Epilogue{Activation::None, true}}) {
    const auto got = run(false, x, h.packed.data(), t, b.data(), y0, M, K, N, e);
    const auto want = run(true, x, h.packed.data(), t, b.data(), y0, M, K, N, e);
    CHECK(got == want);
  }
}

// 19: three tiles of rows and one, where 16-bit blocks are widened once for all tiles (gemm_simd.hpp).
const size_t kMs[] = {1, 2, 5, 6, 7, 8, 13, 16, 17, 19};
const size_t kKs[] = {1, 3, 17, 64, 255, 769};
const size_t kNs[] = {1, 15, 16, 17, 33, 50};
const Epilogue kEpilogues[] = {
    {Activation::GeluTanh, false}, {Activation::None, true}, {Activation::GeluErf, true}, {Activation::GeluErf, false}};

void check_all_shapes(bool scalar, WeightType t) {
  uint32_t seed = t == WeightType::BF16 ? 1 : 5000;
  size_t i = 0;
  for (size_t M : kMs)
    for (size_t K : kKs)
      for (size_t N : kNs) {
        check_shape(scalar, t, M, K, N, true, {}, seed);
        check_shape(scalar, t, M, K, N, false, {}, seed + 1);
        check_shape(scalar, t, M, K, N, (i & 1) == 0, kEpilogues[i % 4], seed + 2);
        if (!scalar) check_exact(t, M, K, N, seed + 3);
        seed += 7;
        ++i;
      }
}

}  // namespace

TEST_CASE("f32 -> bf16 / f16 rounding: every value round-trips, midpoints go to even, overflow to inf") {
  using mmgpt::bf16_to_f32;
  using mmgpt::f16_to_f32;
  using mmgpt::f32_to_bf16;
  using mmgpt::f32_to_f16;
  size_t bad = 0;
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const auto v = uint16_t(h);
    // Round trip (NaNs stay NaN; a quiet NaN keeps its bits).
    const float fb = bf16_to_f32(v), fh = f16_to_f32(v);
    if (std::isnan(fb))
      bad += !std::isnan(bf16_to_f32(f32_to_bf16(fb)));
    else
      bad += f32_to_bf16(fb) != v;
    if (std::isnan(fh))
      bad += !std::isnan(f16_to_f32(f32_to_f16(fh)));
    else
      bad += f32_to_f16(fh) != v;
    // Between v and the next value up (same sign, both finite): the midpoint is
    // exact in f32 and rounds to the one with an even last bit; one f32 ulp either
    // side rounds to the nearer one.
    const uint16_t up = uint16_t(v + 1);
    if ((v & 0x7fff) != 0x7fff && (up & 0x7fff) != 0 && (v & 0x8000) == (up & 0x8000)) {
      const float b0 = bf16_to_f32(v), b1 = bf16_to_f32(up);
      if (std::isfinite(b0) && std::isfinite(b1)) {
        const float mid = float((double(b0) + double(b1)) / 2);
        bad += f32_to_bf16(mid) != ((v & 1) ? up : v);
        bad += f32_to_bf16(std::nextafter(mid, b0)) != v;
        bad += f32_to_bf16(std::nextafter(mid, b1)) != up;
      }
      const float h0 = f16_to_f32(v), h1 = f16_to_f32(up);
      if (std::isfinite(h0) && std::isfinite(h1)) {
        const float mid = float((double(h0) + double(h1)) / 2);
        bad += f32_to_f16(mid) != ((v & 1) ? up : v);
        bad += f32_to_f16(std::nextafter(mid, h0)) != v;
        bad += f32_to_f16(std::nextafter(mid, h1)) != up;
      }
    }
  }
  CHECK(bad == 0);
  CHECK(f32_to_f16(65504.0f) == 0x7bff);
  CHECK(f32_to_f16(65519.99f) == 0x7bff);
  CHECK(f32_to_f16(65520.0f) == 0x7c00);  // the tie above the largest finite rounds to even: infinity
  CHECK(f32_to_f16(-1e9f) == 0xfc00);
  CHECK(f32_to_f16(1e-10f) == 0x0000);
  CHECK(f32_to_f16(-1e-10f) == 0x8000);
  CHECK(f32_to_bf16(3.4028235e38f) == 0x7f80);  // rounds up past the largest bf16
  CHECK(f32_to_bf16(1.0f) == 0x3f80);
  CHECK(std::isnan(bf16_to_f32(f32_to_bf16(std::nanf("")))));
  CHECK(std::isnan(f16_to_f32(f32_to_f16(-std::nanf("")))));
}

TEST_CASE("16-bit panels: unpack_panel_row widens a packed row exactly") {
  for (WeightType t : {WeightType::F32, WeightType::BF16, WeightType::F16}) {
    const size_t N = 33, K = 17;
    const auto w = kt::random_floats(N * K, -2, 2, 9);
    std::vector<float> p(mmgpt::panel_floats(N, K));
    mmgpt::pack_panels(w.data(), N, K, p.data());
    std::vector<uint16_t> p16(p.size());
    if (t != WeightType::F32) mmgpt::pack_half_panels(w.data(), N, K, t, p16.data());
    const void* data = t == WeightType::F32 ? static_cast<const void*>(p.data()) : p16.data();
    std::vector<float> row(K);
    size_t bad = 0;
    for (size_t n = 0; n < N; ++n) {
      mmgpt::unpack_panel_row(data, t, N, K, n, row.data());
      for (size_t kk = 0; kk < K; ++kk) {
        const float want = t == WeightType::F32 ? w[n * K + kk] : widen(p16[mmgpt::half_panel_index(N, K, n, kk)], t);
        bad += row[kk] != want;
        // and the widened value is the nearest 16-bit value: within half an ulp of the type
        const double rel = t == WeightType::BF16 ? 0x1p-8 : 0x1p-11;  // unit roundoff: 2^-precision
        bad += std::fabs(double(row[kk]) - w[n * K + kk]) > rel * std::fabs(w[n * K + kk]) + 0x1p-25;
      }
    }
    CAPTURE(std::string(type_name(t)));
    CHECK(bad == 0);
  }
}

TEST_CASE("16-bit panel pairs: the lines of two panels alternate, an odd K's last k-steps end the pair") {
  // N = 40: panels 0 and 1 are a pair, panel 2 is alone; K = 5: lines
  // (k 0-1), (k 2-3), then the last k-step of each panel of the pair.
  const size_t N = 40, K = 5;
  CHECK(mmgpt::half_panel_index(N, K, 0, 0) == 0);
  CHECK(mmgpt::half_panel_index(N, K, 3, 1) == 16 + 3);         // panel 0, k 1: second half of its first line
  CHECK(mmgpt::half_panel_index(N, K, 16, 0) == 32);            // panel 1, k 0: the pair's second line
  CHECK(mmgpt::half_panel_index(N, K, 16 + 15, 1) == 48 + 15);  // panel 1, k 1
  CHECK(mmgpt::half_panel_index(N, K, 5, 2) == 64 + 5);         // panel 0, k 2: the pair's third line
  CHECK(mmgpt::half_panel_index(N, K, 20, 3) == 96 + 16 + 4);   // panel 1, k 3
  CHECK(mmgpt::half_panel_index(N, K, 0, 4) == 128);            // the last k-step: panel 0's, then panel 1's
  CHECK(mmgpt::half_panel_index(N, K, 16, 4) == 144);
  CHECK(mmgpt::half_panel_index(N, K, 32 + 7, 3) == 160 + 48 + 7);  // panel 2, alone: k-steps in order
  // Every (n, k) of every shape has its own slot, within the f32 layout's size.
  for (size_t n_ : {1, 16, 17, 33, 48, 50})
    for (size_t k_ : {1, 2, 3, 8, 17}) {
      CAPTURE(n_);
      CAPTURE(k_);
      const size_t rows = mmgpt::panel_count(n_) * mmgpt::kPanelWidth;
      std::vector<int> used(mmgpt::panel_floats(n_, k_), 0);
      for (size_t n = 0; n < rows; ++n)
        for (size_t kk = 0; kk < k_; ++kk) {
          const size_t i = mmgpt::half_panel_index(n_, k_, n, kk);
          REQUIRE(i < used.size());
          ++used[i];
        }
      CHECK(std::count(used.begin(), used.end(), 1) == long(used.size()));
    }
}

TEST_CASE("bf16 / f16 packed matmul: a panel range may start or end inside a pair") {
  // Threads get even ranges (kernels.cpp), but each kernel must be right for
  // any: split calls equal one call over all panels, bit for bit.
  kt::for_each_simd_isa([](std::string_view) {
    const kd::MatmulKernels* bf16dot = kt::active_bf16dot();
    for (WeightType t : {WeightType::BF16, WeightType::F16})
      for (size_t M : {1, 7, 19})
        for (size_t K : {17, 256}) {
          CAPTURE(std::string(type_name(t)));
          CAPTURE(M);
          CAPTURE(K);
          const size_t N = 80, panels = mmgpt::panel_count(N);  // 5: two pairs and one alone
          const auto x = kt::random_floats(M * K, -1, 1, 41), b = kt::random_floats(N, -1, 1, 42);
          const HalfMatrix h = make_half(random_weights(N * K, 43), N, K, t);
          std::vector<uint16_t> xr(M * kd::bf16dot_row_elems(K));
          kd::bf16dot_round_rows(x.data(), M, K, xr.data());
          auto gemm = [&](bool dot, std::vector<float>& y, size_t p0, size_t p1) {
            if (dot)
              kt::bf16dot_panels(*bf16dot, xr.data(), h.packed.data(), b.data(), y.data(), M, K, N, p0, p1, {});
            else
              kt::widening_panels(t, x.data(), h.packed.data(), b.data(), y.data(), M, K, N, p0, p1, {});
          };
          for (bool dot : {false, true}) {
            if (dot && (t != WeightType::BF16 || bf16dot == nullptr)) continue;
            CAPTURE(dot);
            std::vector<float> all(M * N), split(M * N);
            gemm(dot, all, 0, panels);
            for (auto [p0, p1] : {std::pair<size_t, size_t>{0, 1}, {1, 4}, {4, 5}}) gemm(dot, split, p0, p1);
            CHECK(split == all);
            std::fill(split.begin(), split.end(), 0.0f);
            for (auto [p0, p1] : {std::pair<size_t, size_t>{0, 3}, {3, 5}}) gemm(dot, split, p0, p1);
            CHECK(split == all);
          }
        }
  });
}

TEST_CASE("bf16 / f16 packed matmul: scalar reference against the exact evaluation on awkward shapes") {
  for (WeightType t : {WeightType::BF16, WeightType::F16}) check_all_shapes(true, t);
}

TEST_CASE("bf16 / f16 packed matmul: every ISA against the exact evaluation, the f32 kernel and the reference") {
  kt::for_each_simd_isa([](std::string_view) {
    for (WeightType t : {WeightType::BF16, WeightType::F16}) check_all_shapes(false, t);
  });
}

TEST_CASE(
    "bf16 / f16 packed matmul: large shapes equal the f32 kernel on the widened weights (bf16 dot product: its "
    "reference)") {
  kt::for_each_simd_isa([](std::string_view) {
    for (WeightType t : {WeightType::BF16, WeightType::F16})
      for (auto mkn : {std::tuple<size_t, size_t, size_t>{300, 300, 37}, {241, 1031, 18}, {97, 769, 33}}) {
        // Named copies, not a structured binding: clang 14 (the sanitizer build)
        // cannot capture bindings in CAPTURE's lambda.
        const size_t M = std::get<0>(mkn), K = std::get<1>(mkn), N = std::get<2>(mkn);
        CAPTURE(std::string(type_name(t)));
        CAPTURE(M);
        const auto x = kt::random_floats(M * K, -1, 1, 3), b = kt::random_floats(N, -1, 1, 4);
        const HalfMatrix h = make_half(random_weights(N * K, 5), N, K, t);
        const Epilogue e{Activation::GeluTanh, false};
        std::vector<float> got(M * N), want(M * N);
        k::matmul_packed(x.data(), h.packed.data(), t, b.data(), got.data(), M, K, N, e);
        k::matmul_packed(x.data(), h.packed_wide.data(), b.data(), want.data(), M, K, N, e);
        if (dot_product(t)) {
          CHECK(got ==
                kt::bf16dot_expected(x.data(), h.packed.data(), b.data(), std::vector<float>(M * N), M, K, N, e));
          CHECK(run_widening(x, h.packed.data(), t, b.data(), std::vector<float>(M * N), M, K, N, e) == want);
        } else {
          CHECK(got == want);
        }
      }
  });
}

TEST_CASE("bf16 / f16 packed matmul: a row's result does not depend on M (decode row == prefill row)") {
  kt::for_each_simd_isa([](std::string_view) {
    for (WeightType t : {WeightType::BF16, WeightType::F16})
      for (auto mk : {std::pair<size_t, size_t>{13, 7}, {17, 768}, {300, 1031}}) {
        const size_t M = mk.first, K = mk.second;
        CAPTURE(std::string(type_name(t)));
        CAPTURE(M);
        CAPTURE(K);
        const size_t N = 45;
        const auto x = kt::random_floats(M * K, -1, 1, 31), b = kt::random_floats(N, -1, 1, 33);
        const HalfMatrix h = make_half(random_weights(N * K, 32), N, K, t);
        std::vector<float> all(M * N), one(N);
        k::matmul_packed(x.data(), h.packed.data(), t, b.data(), all.data(), M, K, N);
        size_t differ = 0;
        for (size_t m = 0; m < M; ++m) {
          k::matmul_packed(x.data() + m * K, h.packed.data(), t, b.data(), one.data(), 1, K, N);
          differ += !std::equal(one.begin(), one.end(), all.begin() + m * N);
        }
        CHECK(differ == 0);
      }
  });
}

TEST_CASE("bf16 / f16 packed matmul results do not depend on the thread count") {
  kt::for_each_simd_isa([](std::string_view) {
    for (WeightType t : {WeightType::BF16, WeightType::F16})
      for (auto mkn : {std::tuple<size_t, size_t, size_t>{1, 768, 2307}, {8, 768, 2307}, {300, 1031, 515}}) {
        const size_t M = std::get<0>(mkn), K = std::get<1>(mkn), N = std::get<2>(mkn);
        CAPTURE(std::string(type_name(t)));
        CAPTURE(M);
        const auto x = kt::random_floats(M * K, -1, 1, 5), b = kt::random_floats(N, -1, 1, 7);
        const HalfMatrix h = make_half(random_weights(N * K, 6), N, K, t);
        std::vector<std::vector<float>> runs;
        for (size_t threads : {1, 2, 7}) {
          tbb::global_control limit(tbb::global_control::max_allowed_parallelism, threads);
          std::vector<float> y(M * N);
          k::matmul_packed(x.data(), h.packed.data(), t, b.data(), y.data(), M, K, N, {Activation::GeluTanh, false});
          runs.push_back(std::move(y));
        }
        CHECK(runs[0] == runs[1]);
        CHECK(runs[0] == runs[2]);
      }
  });
}

TEST_CASE("bf16 / f16 packed matmul with K = 0 is the epilogue of zero") {
  kt::for_each_simd_isa([](std::string_view) {
    for (WeightType t : {WeightType::BF16, WeightType::F16}) {
      const float bias[3] = {1.5f, -2.0f, 0.25f};
      std::vector<float> y(6, 99.0f);
      k::matmul_packed(nullptr, static_cast<const void*>(nullptr), t, bias, y.data(), 2, 0, 3);
      CHECK(y == std::vector<float>{1.5f, -2.0f, 0.25f, 1.5f, -2.0f, 0.25f});
    }
  });
}
