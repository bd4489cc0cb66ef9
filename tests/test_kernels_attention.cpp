// attention_row: every SIMD instantiation and the scalar reference against
// an exact (double precision) evaluation, on awkward head sizes (not
// multiples of any vector width) and key counts (around W and 8W), and a
// check that a query's result does not depend on the rows around it.
//
// Bound: each score is a dot product of hd terms, off by at most
// (hd+1) u sum|q k| scale (any summation order); softmax turns a score error
// e into a relative probability error of about 2e, plus a few u of its own
// arithmetic; the weighted sum of n values adds (n+1) u sum p |v|.
#include <algorithm>
#include <cmath>
#include <string_view>
#include <vector>

#include "kernels_testing.hpp"

namespace k = mmgpt::kernels;
using kt::kU;

namespace {

void check_row(size_t n, size_t hd, uint32_t seed, bool scalar) {
    CAPTURE(n);
    CAPTURE(hd);
    const auto q = kt::random_floats(hd, -2, 2, seed), kk = kt::random_floats(n * hd, -2, 2, seed + 1);
    const auto v = kt::random_floats(n * hd, -1, 1, seed + 2);
    const float scale = 1.0f / std::sqrt(float(hd));
    // Exact reference.
    std::vector<double> p(n);
    double mx = -1e300, worst_score_err = 0;
    for (size_t j = 0; j < n; ++j) {
        double s = 0, a = 0;
        for (size_t d = 0; d < hd; ++d) s += double(q[d]) * kk[j * hd + d], a += std::fabs(double(q[d]) * kk[j * hd + d]);
        p[j] = s * scale;
        mx = std::max(mx, p[j]);
        worst_score_err = std::max(worst_score_err, (hd + 2) * kU * a * scale + kU * std::fabs(p[j]));
    }
    double total = 0;
    for (double& x : p) total += (x = std::exp(x - mx));
    for (double& x : p) x /= total;
    std::vector<float> s(n, -1.0f), out(hd, -1.0f);
    if (scalar)
        k::scalar::attention_row(q.data(), kk.data(), v.data(), n, hd, scale, s.data(), out.data());
    else
        k::attention_row(q.data(), kk.data(), v.data(), n, hd, scale, s.data(), out.data());
    size_t bad = 0;
    for (size_t d = 0; d < hd; ++d) {
        double exact = 0, mag = 0;
        for (size_t j = 0; j < n; ++j) exact += p[j] * v[j * hd + d], mag += p[j] * std::fabs(v[j * hd + d]);
        const double tol = mag * (4 * worst_score_err + (2 * n + 16) * kU) + 1e-30;
        if (!(std::fabs(out[d] - exact) <= tol)) ++bad;
    }
    CHECK(bad == 0);
    double psum = 0;
    for (float x : s) psum += x;
    CHECK(std::fabs(psum - 1.0) < (n + 8) * 4 * kU);  // scratch holds the probabilities
}

}  // namespace

TEST_CASE("attention_row: scalar reference and every SIMD path against exact arithmetic") {
    const size_t hds[] = {1, 3, 4, 7, 8, 15, 16, 17, 33, 64, 65, 80, 128};
    const size_t ns[] = {1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 33, 64, 127, 129};
    uint32_t seed = 1;
    for (size_t hd : hds)
        for (size_t n : ns) check_row(n, hd, seed += 3, true);
    kt::for_each_simd_isa([&](std::string_view) {
        uint32_t sd = 1000;
        for (size_t hd : hds)
            for (size_t n : ns) check_row(n, hd, sd += 3, false);
    });
}

TEST_CASE("attention_row: one dominant key gives its value; equal scores give the mean") {
    kt::for_each_simd_isa([&](std::string_view) {
        const size_t hd = 24, n = 19;
        std::vector<float> q(hd, 0.0f), kk(n * hd, 0.0f), v(n * hd), s(n), out(hd);
        for (size_t i = 0; i < v.size(); ++i) v[i] = float(i % 7) - 3.0f;
        k::attention_row(q.data(), kk.data(), v.data(), n, hd, 1.0f, s.data(), out.data());
        for (size_t d = 0; d < hd; ++d) {
            double mean = 0;
            for (size_t j = 0; j < n; ++j) mean += v[j * hd + d];
            CHECK(out[d] == doctest::Approx(mean / n).epsilon(1e-6));
        }
        q[0] = 100.0f;
        kk[11 * hd] = 1.0f;  // key 11 scores 100, the rest 0: softmax weight 1 - 18 e^-100
        k::attention_row(q.data(), kk.data(), v.data(), n, hd, 1.0f, s.data(), out.data());
        for (size_t d = 0; d < hd; ++d) CHECK(out[d] == v[11 * hd + d]);
    });
}
