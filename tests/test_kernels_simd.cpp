// Every SIMD instantiation the CPU can run, compared with the scalar
// reference on awkward sizes (around and between the vector widths).
//
// Tolerances:
// - Dot-like results (dot, matmul) are compared twice. On small-integer data
//   every product and partial sum is exact, so the SIMD result must equal the
//   reference bit for bit whatever its summation order: this catches a
//   dropped or repeated element. On random data the two differ only by
//   summation order and FMA; each is within (n+1) u sum|x_i w_i| of the exact
//   value (the standard bound for any summation order), so they are within
//   twice that of each other.
// - Elementwise functions: both sides evaluate the same formula with erf/tanh
//   accurate to <= 2 ulp; a few ulp of the result, plus the absolute error of
//   1 + erf (or 1 + tanh) near -1 (an ulp of 1, i.e. 2^-23, times 0.5|x|),
//   where the formula itself cancels.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string_view>
#include <vector>

#include "kernels_testing.hpp"

namespace k = mmgpt::kernels;
using kt::kU;

namespace {

double dot_bound(const float* a, const float* b, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; ++i) s += std::fabs(static_cast<double>(a[i]) * b[i]);
  return 2.0 * (static_cast<double>(n) + 1.0) * kU * s;
}

// Checks matmul against the scalar reference for one shape.
void check_matmul(size_t M, size_t K, size_t N, bool with_bias, uint32_t seed) {
  CAPTURE(M);
  CAPTURE(K);
  CAPTURE(N);
  CAPTURE(with_bias);
  {  // Integer data: exact, so bit-identical.
    const auto x = kt::random_ints(M * K, -4, 4, seed);
    const auto w = kt::random_ints(N * K, -4, 4, seed + 1);
    const auto b = kt::random_ints(N, -100, 100, seed + 2);
    const float* bias = with_bias ? b.data() : nullptr;
    std::vector<float> got(M * N, -1.0f), want(M * N, -2.0f);
    kt::matmul_rowmajor(x.data(), w.data(), bias, got.data(), M, K, N);
    k::scalar::matmul(x.data(), w.data(), bias, want.data(), M, K, N);
    CHECK(got == want);
  }
  {  // Random data: summation-order tolerance.
    const auto x = kt::random_floats(M * K, -1.0f, 1.0f, seed + 3);
    const auto w = kt::random_floats(N * K, -1.0f, 1.0f, seed + 4);
    const auto b = kt::random_floats(N, -1.0f, 1.0f, seed + 5);
    const float* bias = with_bias ? b.data() : nullptr;
    std::vector<float> got(M * N), want(M * N);
    kt::matmul_rowmajor(x.data(), w.data(), bias, got.data(), M, K, N);
    k::scalar::matmul(x.data(), w.data(), bias, want.data(), M, K, N);
    size_t bad = 0;
    for (size_t m = 0; m < M; ++m)
      for (size_t n = 0; n < N; ++n) {
        const double tol =
            dot_bound(&x[m * K], &w[n * K], K) + (bias ? 2 * kU * std::fabs(b[n]) : 0) + 2 * kt::ulp(want[m * N + n]);
        if (std::fabs(static_cast<double>(got[m * N + n]) - want[m * N + n]) > tol) ++bad;
      }
    CHECK(bad == 0);
  }
}

double gelu_tol(float x, float ref) { return 4 * kt::ulp(ref) + std::fabs(x) * 0x1p-22; }

// Inputs for the gelu tests: a dense sweep of the interesting range plus
// special values, repeated to the requested length.
std::vector<float> gelu_inputs(size_t n, uint32_t seed) {
  auto v = kt::random_floats(n, -8.0f, 8.0f, seed);
  const float specials[] = {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-3f, -1e-3f, 20.0f, -20.0f, 100.0f, -100.0f};
  for (size_t i = 0; i < n; i += 3) v[i] = specials[(i / 3) % std::size(specials)];
  return v;
}

}  // namespace

TEST_CASE("at least one SIMD instantiation runs where the CPU has one") {
  const int ran = kt::for_each_simd_isa([](std::string_view) {});
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && kt::cpu_has_f16c()) CHECK(ran >= 1);
#elif defined(__aarch64__)
  CHECK(ran == 1);
#endif
}

TEST_CASE("dot matches the scalar reference") {
  kt::for_each_simd_isa([](std::string_view) {
    for (size_t n : kt::kSizes) {
      CAPTURE(n);
      const auto ai = kt::random_ints(n, -8, 8, 11 + n), bi = kt::random_ints(n, -8, 8, 12 + n);
      CHECK(k::dot(ai.data(), bi.data(), n) == k::scalar::dot(ai.data(), bi.data(), n));
      const auto a = kt::random_floats(n, -1, 1, 13 + n), b = kt::random_floats(n, -1, 1, 14 + n);
      const float got = k::dot(a.data(), b.data(), n), want = k::scalar::dot(a.data(), b.data(), n);
      CHECK(std::fabs(double(got) - want) <= dot_bound(a.data(), b.data(), n) + kt::ulp(want));
    }
    CHECK(k::dot(nullptr, nullptr, 0) == 0.0f);
  });
}

TEST_CASE("axpy and add match the scalar reference") {
  kt::for_each_simd_isa([](std::string_view) {
    for (size_t n : kt::kSizes) {
      CAPTURE(n);
      const auto x = kt::random_floats(n, -1, 1, 21 + n), y0 = kt::random_floats(n, -1, 1, 22 + n);
      // add has no rounding choice: bit-identical.
      auto got = y0, want = y0;
      k::add(got.data(), x.data(), n);
      k::scalar::add(want.data(), x.data(), n);
      CHECK(got == want);
      // axpy may be fused (one rounding) or not (two): within an ulp
      // of the two magnitudes involved.
      const float a = 0.37f;
      got = y0;
      want = y0;
      k::axpy(a, x.data(), got.data(), n);
      k::scalar::axpy(a, x.data(), want.data(), n);
      size_t bad = 0;
      for (size_t i = 0; i < n; ++i) {
        const double tol = 2 * kU * (std::fabs(y0[i]) + std::fabs(a * x[i])) + kt::ulp(want[i]);
        if (std::fabs(double(got[i]) - want[i]) > tol) ++bad;
      }
      CHECK(bad == 0);
    }
  });
}

TEST_CASE("matmul matches the scalar reference on awkward shapes") {
  const size_t Ks[] = {1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 33, 63, 64, 65, 127, 257, 769};
  const size_t Ns[] = {1, 2, 3, 5, 7, 13, 17, 31, 67};
  kt::for_each_simd_isa([&](std::string_view) {
    uint32_t seed = 100;
    for (size_t M : {1, 2, 3, 5, 8, 17})
      for (size_t K : Ks)
        for (size_t N : Ns) {
          check_matmul(M, K, N, true, seed);
          check_matmul(M, K, N, false, seed + 7);
          seed += 11;
        }
  });
}

TEST_CASE("matmul matches the scalar reference on shapes split over many tasks") {
  kt::for_each_simd_isa([](std::string_view) {
    check_matmul(1, 768, 2304, true, 1);
    check_matmul(5, 768, 773, true, 2);
    check_matmul(17, 257, 1031, false, 3);
  });
}

TEST_CASE("layernorm matches the scalar reference") {
  kt::for_each_simd_isa([](std::string_view) {
    const float eps = 1e-5f;
    for (size_t dim : kt::kSizes) {
      CAPTURE(dim);
      const size_t rows = 3;
      const auto g = kt::random_floats(dim, 0.5f, 1.5f, 41 + dim), be = kt::random_floats(dim, -1, 1, 42);
      for (const float* beta : {be.data(), static_cast<const float*>(nullptr)}) {
        CAPTURE(beta != nullptr);
        {  // Integer rows with sum 0: mean and variance are exact in any
           // order, so only the last multiply-add may round differently.
          auto x = kt::random_ints(rows * dim, -8, 8, 43 + dim);
          for (size_t r = 0; r < rows; ++r) {
            float s = 0;
            for (size_t i = 0; i + 1 < dim; ++i) s += x[r * dim + i];
            x[r * dim + dim - 1] = -s;
          }
          std::vector<float> got(rows * dim), want(rows * dim);
          k::layernorm(x.data(), g.data(), beta, got.data(), rows, dim, eps);
          k::scalar::layernorm(x.data(), g.data(), beta, want.data(), rows, dim, eps);
          size_t bad = 0;
          for (size_t i = 0; i < got.size(); ++i) {
            const double tol = 2 * kt::ulp(want[i]) + (beta ? 2 * kt::ulp(be[i % dim]) : 0.0);
            if (std::fabs(double(got[i]) - want[i]) > tol) ++bad;
          }
          CHECK(bad == 0);
        }
        {  // Random rows with an offset mean: error of the mean and
           // variance sums, propagated through (x - mean) * rstd * gamma.
          const auto x = kt::random_floats(rows * dim, 2.0f, 4.0f, 44 + dim);
          std::vector<float> got(rows * dim), want(rows * dim);
          k::layernorm(x.data(), g.data(), beta, got.data(), rows, dim, eps);
          k::scalar::layernorm(x.data(), g.data(), beta, want.data(), rows, dim, eps);
          size_t bad = 0;
          for (size_t r = 0; r < rows; ++r) {
            double sum = 0, sumabs = 0;
            for (size_t i = 0; i < dim; ++i) sum += x[r * dim + i], sumabs += std::fabs(x[r * dim + i]);
            const double mean = sum / dim;
            double var = 0;
            for (size_t i = 0; i < dim; ++i) var += (x[r * dim + i] - mean) * (x[r * dim + i] - mean);
            var /= dim;
            const double rstd = 1 / std::sqrt(var + eps);
            // |d mean| <= 2 (n+1) u mean|x|; relative |d var| <= 2 (n+4) u,
            // plus the mean error's effect on the deviations.
            const double dmean = 2 * (dim + 1) * kU * sumabs / dim;
            const double dvar_rel = 2 * (dim + 4) * kU + 2 * dmean * rstd;
            for (size_t i = 0; i < dim; ++i) {
              const size_t j = r * dim + i;
              const double xhat = std::fabs(x[j] - mean) * rstd;
              const double tol = std::fabs(g[i]) * (dmean * rstd + xhat * (dvar_rel + 8 * kU)) + 2 * kt::ulp(want[j]) +
                                 (beta ? 2 * kt::ulp(be[i]) : 0.0);
              if (std::fabs(double(got[j]) - want[j]) > tol) ++bad;
            }
          }
          CHECK(bad == 0);
        }
      }
    }
  });
}

TEST_CASE("gelu_erf and gelu_tanh match the scalar reference") {
  kt::for_each_simd_isa([](std::string_view) {
    for (size_t n : kt::kSizes) {
      CAPTURE(n);
      const auto x = gelu_inputs(n, 51 + n);
      for (int which = 0; which < 2; ++which) {
        CAPTURE(which);
        auto got = x, want = x;
        if (which == 0) {
          k::gelu_erf(got.data(), n);
          k::scalar::gelu_erf(want.data(), n);
        } else {
          k::gelu_tanh(got.data(), n);
          k::scalar::gelu_tanh(want.data(), n);
        }
        size_t bad = 0;
        for (size_t i = 0; i < n; ++i)
          if (!(std::fabs(double(got[i]) - want[i]) <= gelu_tol(x[i], want[i]))) {
            if (bad++ < 5) MESSAGE("x=" << x[i] << " got=" << got[i] << " want=" << want[i]);
          }
        CHECK(bad == 0);
      }
    }
  });
}

TEST_CASE("softmax matches the scalar reference") {
  kt::for_each_simd_isa([](std::string_view) {
    for (size_t n : kt::kSizes) {
      CAPTURE(n);
      {  // Entries of 0 and -inf: exp gives exactly 1 and 0, the sum is
         // an exact count, so every output is bit-identical.
        auto x = kt::random_ints(n, 0, 1, 61 + n);
        for (auto& v : x) v = v == 0 ? -std::numeric_limits<float>::infinity() : 0.0f;
        x[n - 1] = 0.0f;  // the last (tail) element counts too
        auto got = x, want = x;
        k::softmax(got.data(), n);
        k::scalar::softmax(want.data(), n);
        CHECK(got == want);
      }
      {  // Random: exp within 1 ulp each side, plus the relative error
         // of an n-term sum of positive terms in either order.
        const auto x = kt::random_floats(n, -10, 10, 62 + n);
        auto got = x, want = x;
        k::softmax(got.data(), n);
        k::scalar::softmax(want.data(), n);
        size_t bad = 0;
        for (size_t i = 0; i < n; ++i) {
          const double tol = want[i] * (2 * (n + 4) * kU) + 4 * kt::ulp(want[i]);
          if (std::fabs(double(got[i]) - want[i]) > tol) ++bad;
        }
        CHECK(bad == 0);
      }
    }
  });
}

TEST_CASE("softmax edge cases") {
  kt::for_each_simd_isa([](std::string_view) {
    const float inf = std::numeric_limits<float>::infinity();
    for (size_t n : {1, 2, 7, 8, 9, 17, 33}) {
      CAPTURE(n);
      for (size_t hot = 0; hot < n; hot += (n > 3 ? n / 3 : 1)) {
        std::vector<float> x(n, -inf);
        x[hot] = 3.5f;
        k::softmax(x.data(), n);
        std::vector<float> want(n, 0.0f);
        want[hot] = 1.0f;
        CHECK(x == want);
      }
    }
    float one = 123.0f;
    k::softmax(&one, 1);
    CHECK(one == 1.0f);
    k::softmax(nullptr, 0);  // no-op
  });
}

TEST_CASE("non-finite inputs do not crash any instantiation") {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  auto run_all = [&](std::string_view) {
    std::vector<float> x = {nan, inf, -inf, 1.0f, 0.0f, -2.0f, nan, 3.0f, inf, 1e-40f, -1e-40f};
    const size_t n = x.size();
    std::vector<float> g(n, 1.0f), y(n);
    auto t = x;
    k::gelu_erf(t.data(), n);
    t = x;
    k::gelu_tanh(t.data(), n);
    t = x;
    k::softmax(t.data(), n);
    k::layernorm(x.data(), g.data(), nullptr, y.data(), 1, n, 1e-5f);
    (void)k::dot(x.data(), g.data(), n);
    kt::matmul_rowmajor(x.data(), g.data(), nullptr, y.data(), 1, n, 1);
    // gelu of the finite specials is still right.
    t = {1e-40f, -1e-40f, inf, -20.0f};
    k::gelu_erf(t.data(), t.size());
    CHECK(std::fabs(t[0]) <= 1e-40f);
    CHECK(t[2] == inf);
    CHECK(std::fabs(t[3]) <= 1e-30f);
  };
  kt::for_each_simd_isa(run_all);
  kt::IsaGuard guard;
  REQUIRE(k::force_isa("scalar"));
  run_all("scalar");
}

TEST_CASE("rmsnorm matches the scalar reference") {
  kt::for_each_simd_isa([](std::string_view) {
    const float eps = 1e-6f;
    for (size_t dim : kt::kSizes) {
      CAPTURE(dim);
      const size_t rows = 3;
      const auto g = kt::random_floats(dim, 0.5f, 1.5f, 51 + dim);
      const auto x = kt::random_floats(rows * dim, -3.0f, 3.0f, 52 + dim);
      for (const float* gamma : {g.data(), static_cast<const float*>(nullptr)}) {
        CAPTURE(gamma != nullptr);
        std::vector<float> got(rows * dim), want(rows * dim);
        k::rmsnorm(x.data(), gamma, got.data(), rows, dim, eps);
        k::scalar::rmsnorm(x.data(), gamma, want.data(), rows, dim, eps);
        // The sum of squares differs by summation order only: relative
        // error 2 (n+1) u, half of it through the square root, then the
        // two products.
        size_t bad = 0;
        for (size_t i = 0; i < got.size(); ++i) {
          const double tol = std::fabs(want[i]) * ((dim + 1) * kU + 6 * kU) + 2 * kt::ulp(want[i]);
          if (std::fabs(double(got[i]) - want[i]) > tol) ++bad;
        }
        CHECK(bad == 0);
      }
    }
    // Integer rows whose mean square is a power of two: exact in any order.
    std::vector<float> x(64, 2.0f), got(64), want(64);
    k::rmsnorm(x.data(), nullptr, got.data(), 1, 64, 0.0f + 1e-30f);
    k::scalar::rmsnorm(x.data(), nullptr, want.data(), 1, 64, 1e-30f);
    CHECK(got == want);
  });
}

TEST_CASE("glu (SwiGLU, GeGLU) matches the scalar reference") {
  kt::for_each_simd_isa([](std::string_view) {
    for (size_t ff : kt::kSizes) {
      CAPTURE(ff);
      const size_t rows = 2;
      auto in = kt::random_floats(rows * 2 * ff, -8.0f, 8.0f, 61 + ff);
      if (ff > 2) in[0] = -100.0f, in[1] = 100.0f;  // exp's overflow and underflow
      for (k::Gate act : {k::Gate::Silu, k::Gate::GeluErf, k::Gate::GeluTanh}) {
        CAPTURE(static_cast<int>(act));
        std::vector<float> got(rows * ff, -1.0f), want(rows * ff, -2.0f);
        k::glu(in.data(), got.data(), rows, ff, act);
        k::scalar::glu(in.data(), want.data(), rows, ff, act);
        size_t bad = 0;
        for (size_t r = 0; r < rows; ++r)
          for (size_t j = 0; j < ff; ++j) {
            const size_t i = r * ff + j;
            // exp/erf/tanh within 2 ulp, the division and the product: a few
            // ulp of the result, and near a zero of the gate, of its scale.
            const double g = in[r * 2 * ff + j], u = std::fabs(in[r * 2 * ff + ff + j]);
            const double tol = 8 * kt::ulp(want[i]) + u * std::fabs(g) * 8 * kU + 1e-30;
            if (std::fabs(double(got[i]) - want[i]) > tol) ++bad;
          }
        CHECK(bad == 0);
      }
    }
  });
}

TEST_CASE("softcap matches the scalar reference") {
  kt::for_each_simd_isa([](std::string_view) {
    for (size_t n : kt::kSizes) {
      CAPTURE(n);
      auto x = kt::random_floats(n, -60.0f, 60.0f, 71 + n);
      auto got = x, want = x;
      k::softcap(got.data(), n, 15.0f);
      k::scalar::softcap(want.data(), n, 15.0f);
      size_t bad = 0;
      for (size_t i = 0; i < n; ++i)
        if (std::fabs(double(got[i]) - want[i]) > 4 * kt::ulp(want[i]) + 15.0 * kU) ++bad;
      CHECK(bad == 0);
    }
  });
}

TEST_CASE("rope matches the scalar reference (split halves, interleaved, partial)") {
  kt::for_each_simd_isa([](std::string_view) {
    for (size_t hd : {2, 8, 16, 32, 34, 64, 80, 128, 130}) {
      for (size_t rot : {hd, hd / 2 - (hd / 2) % 2, size_t{2}}) {
        if (rot == 0) continue;
        for (bool interleaved : {false, true}) {
          CAPTURE(hd);
          CAPTURE(rot);
          CAPTURE(interleaved);
          const size_t heads = 3;
          const auto x = kt::random_floats(heads * hd, -2.0f, 2.0f, 81 + hd + rot);
          std::vector<float> c(rot / 2), s(rot / 2);
          for (size_t i = 0; i < rot / 2; ++i) c[i] = std::cos(0.37f * i + 1), s[i] = std::sin(0.37f * i + 1);
          auto got = x, want = x;
          k::rope(got.data(), heads, hd, rot, c.data(), s.data(), interleaved);
          k::scalar::rope(want.data(), heads, hd, rot, c.data(), s.data(), interleaved);
          size_t bad = 0;
          for (size_t i = 0; i < got.size(); ++i)
            // Two products and a sum, perhaps contracted into an FMA: 3 u of |x|.
            if (std::fabs(double(got[i]) - want[i]) > 2.0 * 3 * kU * 2) ++bad;
          CHECK(bad == 0);
          // Beyond rot, nothing moves.
          for (size_t h = 0; h < heads; ++h)
            for (size_t i = rot; i < hd; ++i) CHECK(got[h * hd + i] == x[h * hd + i]);
        }
      }
    }
  });
}
