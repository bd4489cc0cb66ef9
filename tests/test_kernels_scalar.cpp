// The scalar reference itself, against known values and double precision.
#include <cmath>
#include <limits>
#include <vector>

#include "kernels_testing.hpp"

namespace s = mmgpt::kernels::scalar;
namespace k = mmgpt::kernels;
using kt::kU;

namespace {

const std::vector<float> kGeluInputs = {-10.0f, -5.0f, -3.0f, -1.5f, -1.0f, -0.5f, -1e-3f, 0.0f,
                                        1e-3f,  0.5f,  1.0f,  1.5f,  3.0f,  5.0f,  10.0f};

// Both gelu formulas cancel in 1 + erf (or 1 + tanh) for negative x, so a
// 1-ulp difference in erf near -1 moves the result by 0.5 |x| 2^-23 absolute.
double gelu_tol(float x, float want) { return 4 * kt::ulp(want) + std::fabs(x) * 0x1p-23; }

}  // namespace

TEST_CASE("scalar gelu_erf matches PyTorch") {
  // torch 1.13 (Debian python3-torch), float32:
  //   torch.nn.functional.gelu(torch.tensor(kGeluInputs), approximate='none')
  const std::vector<float> torch = {
      0.0f, -1.49011612e-06f, -0.00404986739f, -0.10021086f, -0.158655286f, -0.154268786f, -0.000499601127f,
      0.0f, 0.000500398921f,  0.345731199f,    0.841344714f, 1.39978909f,   2.99595022f,   4.99999857f,
      10.0f};
  auto y = kGeluInputs;
  s::gelu_erf(y.data(), y.size());
  for (size_t i = 0; i < y.size(); ++i) {
    CAPTURE(kGeluInputs[i]);
    CHECK(std::fabs(double(y[i]) - torch[i]) <= gelu_tol(kGeluInputs[i], torch[i]));
  }
}

TEST_CASE("scalar gelu_tanh matches PyTorch") {
  // torch 1.13, float32: torch.nn.functional.gelu(torch.tensor(kGeluInputs), approximate='tanh')
  const std::vector<float> torch = {
      -0.0f, -2.98023224e-07f, -0.00363743305f, -0.100428432f, -0.158807993f, -0.154285997f, -0.000499601068f,
      0.0f,  0.000500398979f,  0.345714003f,    0.841192007f,  1.39957154f,   2.99636269f,   4.99999952f,
      10.0f};
  auto y = kGeluInputs;
  s::gelu_tanh(y.data(), y.size());
  for (size_t i = 0; i < y.size(); ++i) {
    CAPTURE(kGeluInputs[i]);
    CHECK(std::fabs(double(y[i]) - torch[i]) <= gelu_tol(kGeluInputs[i], torch[i]));
  }
}

TEST_CASE("scalar softmax matches PyTorch and sums to 1") {
  // torch 1.13, float32: torch.softmax(torch.tensor([1., 2., 3., -1., .5]), 0)
  const std::vector<float> torch = {0.0843938589f, 0.229406297f, 0.623590946f, 0.0114214672f, 0.0511874631f};
  std::vector<float> x = {1.0f, 2.0f, 3.0f, -1.0f, 0.5f};
  s::softmax(x.data(), x.size());
  for (size_t i = 0; i < x.size(); ++i) CHECK(std::fabs(x[i] - torch[i]) <= 4 * kt::ulp(torch[i]));

  for (size_t n : kt::kSizes) {
    CAPTURE(n);
    auto v = kt::random_floats(n, -30, 30, 7 + n);
    s::softmax(v.data(), n);
    double sum = 0;
    for (float p : v) {
      CHECK(p >= 0.0f);
      CHECK(p <= 1.0f);
      sum += p;
    }
    // Each output is within a few ulp plus the sum's relative error.
    CHECK(std::fabs(sum - 1.0) <= (n + 8) * 2 * kU);
  }
}

TEST_CASE("scalar softmax: shift invariance, -inf entries, n = 1") {
  std::vector<float> a = {0.5f, -1.0f, 2.0f}, b = {1000.5f, 999.0f, 1002.0f};  // b = a + 1000
  s::softmax(a.data(), 3);
  s::softmax(b.data(), 3);
  for (int i = 0; i < 3; ++i) CHECK(std::fabs(a[i] - b[i]) <= 1e-4f);  // 1000.5 etc. are rounded inputs

  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> c = {-inf, -inf, 7.0f, -inf};
  s::softmax(c.data(), 4);
  CHECK(c == std::vector<float>{0.0f, 0.0f, 1.0f, 0.0f});

  float one = -3.0f;
  s::softmax(&one, 1);
  CHECK(one == 1.0f);
}

TEST_CASE("scalar layernorm matches a double-precision computation") {
  const float eps = 1e-5f;
  for (size_t dim : {1, 2, 3, 8, 17, 768, 1000}) {
    CAPTURE(dim);
    const size_t rows = 2;
    const auto x = kt::random_floats(rows * dim, -2.0f, 6.0f, 3 + dim);
    const auto g = kt::random_floats(dim, 0.5f, 1.5f, 4), b = kt::random_floats(dim, -1, 1, 5);
    for (const float* beta : {b.data(), static_cast<const float*>(nullptr)}) {
      std::vector<float> y(rows * dim);
      s::layernorm(x.data(), g.data(), beta, y.data(), rows, dim, eps);
      for (size_t r = 0; r < rows; ++r) {
        const float* xr = &x[r * dim];
        double mean = 0, sumabs = 0;
        for (size_t i = 0; i < dim; ++i) mean += xr[i], sumabs += std::fabs(xr[i]);
        mean /= dim;
        double var = 0;  // biased, as torch.nn.LayerNorm
        for (size_t i = 0; i < dim; ++i) var += (xr[i] - mean) * (xr[i] - mean);
        var /= dim;
        const double rstd = 1 / std::sqrt(var + eps);
        // Float error of the index-order sums: |d mean| <= (n+1) u mean|x|,
        // relative |d var| <= (n+4) u (+ the mean error, second order).
        const double dmean = (dim + 1) * kU * sumabs / dim;
        for (size_t i = 0; i < dim; ++i) {
          const double want = (xr[i] - mean) * rstd * g[i] + (beta ? beta[i] : 0.0);
          const double xhat = std::fabs(xr[i] - mean) * rstd;
          const double tol = std::fabs(g[i]) * (dmean * rstd + xhat * ((dim + 8) * kU)) + 4 * kt::ulp(want) +
                             (beta ? kt::ulp(beta[i]) : 0.0);
          CHECK(std::fabs(y[r * dim + i] - want) <= tol);
        }
      }
    }
  }
}

TEST_CASE("scalar layernorm known values") {
  // x = [1, 2, 3, 4]: mean 2.5, biased variance 1.25.
  const float x[4] = {1, 2, 3, 4}, g[4] = {1, 1, 2, 1}, b[4] = {0, 0, 0, 10};
  float y[4];
  s::layernorm(x, g, b, y, 1, 4, 0.0f);
  const double r = 1 / std::sqrt(1.25);
  const double want[4] = {-1.5 * r, -0.5 * r, 2 * 0.5 * r, 1.5 * r + 10};
  for (int i = 0; i < 4; ++i) CHECK(std::fabs(y[i] - want[i]) <= 4e-7 * std::fabs(want[i]));
  // A constant row normalises to beta (var 0, eps keeps it finite).
  const float c[3] = {5, 5, 5}, g3[3] = {1, 1, 1}, b3[3] = {0.5f, -0.5f, 0};
  float yc[3];
  s::layernorm(c, g3, b3, yc, 1, 3, 1e-5f);
  CHECK(yc[0] == 0.5f);
  CHECK(yc[1] == -0.5f);
  CHECK(yc[2] == 0.0f);
}

TEST_CASE("scalar matmul, dot, axpy, add known values") {
  // x = [[1, 2, 3], [4, 5, 6]], W = [[1, 0, -1], [2, 1, 0]], b = [10, 20]
  const float x[6] = {1, 2, 3, 4, 5, 6}, w[6] = {1, 0, -1, 2, 1, 0}, b[2] = {10, 20};
  float y[4];
  s::matmul(x, w, b, y, 2, 3, 2);
  CHECK(std::vector<float>(y, y + 4) == std::vector<float>{8, 24, 8, 33});
  s::matmul(x, w, nullptr, y, 2, 3, 2);
  CHECK(std::vector<float>(y, y + 4) == std::vector<float>{-2, 4, -2, 13});

  CHECK(s::dot(x, x + 3, 3) == 32.0f);
  float v[3] = {1, 1, 1};
  s::axpy(2.0f, x, v, 3);
  CHECK(std::vector<float>(v, v + 3) == std::vector<float>{3, 5, 7});
  s::add(v, x + 3, 3);
  CHECK(std::vector<float>(v, v + 3) == std::vector<float>{7, 10, 13});
}

TEST_CASE("scalar matmul matches double precision on random data") {
  for (size_t M : {1, 3}) {
    for (size_t K : {1, 17, 769}) {
      const size_t N = 13;
      const auto x = kt::random_floats(M * K, -1, 1, 9), w = kt::random_floats(N * K, -1, 1, 10);
      const auto b = kt::random_floats(N, -1, 1, 11);
      std::vector<float> y(M * N);
      s::matmul(x.data(), w.data(), b.data(), y.data(), M, K, N);
      for (size_t m = 0; m < M; ++m)
        for (size_t n = 0; n < N; ++n) {
          double exact = b[n], abs = std::fabs(b[n]);
          for (size_t k = 0; k < K; ++k) {
            exact += double(x[m * K + k]) * w[n * K + k];
            abs += std::fabs(double(x[m * K + k]) * w[n * K + k]);
          }
          CHECK(std::fabs(y[m * N + n] - exact) <= (K + 2) * kU * abs);
        }
    }
  }
}

TEST_CASE("scalar rmsnorm, glu, softcap and rope compute their definitions") {
  // rmsnorm: x / sqrt(mean(x^2) + eps) * gamma
  const float x[4] = {1.0f, -2.0f, 3.0f, -4.0f}, g[4] = {1.0f, 0.5f, 2.0f, 1.0f};
  float y[4];
  k::scalar::rmsnorm(x, g, y, 1, 4, 0.0f);
  const double rms = std::sqrt((1 + 4 + 9 + 16) / 4.0);
  for (int i = 0; i < 4; ++i) CHECK(y[i] == doctest::Approx(x[i] / rms * g[i]).epsilon(1e-6));
  k::scalar::rmsnorm(x, nullptr, y, 1, 4, 0.0f);
  for (int i = 0; i < 4; ++i) CHECK(y[i] == doctest::Approx(x[i] / rms).epsilon(1e-6));
  // glu: act(gate) * up, rows of [gate | up]
  const float in[4] = {1.0f, -2.0f, 3.0f, 0.5f};
  float out[2];
  k::scalar::glu(in, out, 1, 2, k::Gate::Silu);
  CHECK(out[0] == doctest::Approx(1.0 / (1 + std::exp(-1.0)) * 3.0).epsilon(1e-6));
  CHECK(out[1] == doctest::Approx(-2.0 / (1 + std::exp(2.0)) * 0.5).epsilon(1e-6));
  k::scalar::glu(in, out, 1, 2, k::Gate::GeluErf);
  CHECK(out[0] == doctest::Approx(0.5 * (1 + std::erf(1 / std::sqrt(2.0))) * 3.0).epsilon(1e-6));
  // softcap
  float z[2] = {30.0f, -1.0f};
  k::scalar::softcap(z, 2, 15.0f);
  CHECK(z[0] == doctest::Approx(15 * std::tanh(2.0)).epsilon(1e-6));
  CHECK(z[1] == doctest::Approx(15 * std::tanh(-1 / 15.0)).epsilon(1e-6));
  // rope: split halves rotate (x[i], x[i + rot/2]) by the angle; interleaved (x[2i], x[2i+1])
  const float c[2] = {std::cos(0.5f), std::cos(0.25f)}, s[2] = {std::sin(0.5f), std::sin(0.25f)};
  float h[5] = {1.0f, 2.0f, 3.0f, 4.0f, 9.0f};
  k::scalar::rope(h, 1, 5, 4, c, s, false);
  CHECK(h[0] == doctest::Approx(1 * c[0] - 3 * s[0]));
  CHECK(h[2] == doctest::Approx(3 * c[0] + 1 * s[0]));
  CHECK(h[1] == doctest::Approx(2 * c[1] - 4 * s[1]));
  CHECK(h[3] == doctest::Approx(4 * c[1] + 2 * s[1]));
  CHECK(h[4] == 9.0f);
  float m[4] = {1.0f, 2.0f, 3.0f, 4.0f};
  k::scalar::rope(m, 1, 4, 4, c, s, true);
  CHECK(m[0] == doctest::Approx(1 * c[0] - 2 * s[0]));
  CHECK(m[1] == doctest::Approx(2 * c[0] + 1 * s[0]));
  CHECK(m[2] == doctest::Approx(3 * c[1] - 4 * s[1]));
}
