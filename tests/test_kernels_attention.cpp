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
#include <cstring>
#include <iterator>
#include <limits>
#include <string_view>
#include <vector>

#include "formats/half.hpp"
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

// A 16-bit KV cache (bf16 / f16 rows): every path widens exactly as it loads,
// so its result is bit for bit what the same path's f32 row gives on the
// widened keys and values (and the scalar reference is that by definition).
TEST_CASE("attention_row over bf16 / f16 keys and values: bit for bit the f32 row on the widened values") {
    const size_t hds[] = {1, 3, 8, 15, 16, 17, 33, 64, 80};
    const size_t ns[] = {1, 2, 7, 8, 9, 16, 17, 33, 129};
    auto run_all = [&](bool scalar) {
        uint32_t seed = 77;
        for (k::WeightType t : {k::WeightType::BF16, k::WeightType::F16})
            for (size_t hd : hds)
                for (size_t n : ns) {
                    CAPTURE(hd);
                    CAPTURE(n);
                    CAPTURE(t == k::WeightType::BF16 ? "bf16" : "f16");
                    const auto q = kt::random_floats(hd, -2, 2, seed += 3);
                    const auto kf = kt::random_floats(n * hd, -2, 2, seed + 1), vf = kt::random_floats(n * hd, -1, 1, seed + 2);
                    std::vector<uint16_t> k16(n * hd), v16(n * hd);
                    k::narrow(kf.data(), kf.size(), t, k16.data());
                    k::narrow(vf.data(), vf.size(), t, v16.data());
                    std::vector<float> kw(n * hd), vw(n * hd);
                    auto widen = [t](uint16_t e) { return t == k::WeightType::BF16 ? mmgpt::bf16_to_f32(e) : mmgpt::f16_to_f32(e); };
                    for (size_t i = 0; i < n * hd; ++i) kw[i] = widen(k16[i]), vw[i] = widen(v16[i]);
                    const float scale = 1.0f / std::sqrt(float(hd));
                    std::vector<float> s1(n), s2(n), o1(hd), o2(hd);
                    if (scalar) {
                        (t == k::WeightType::BF16 ? k::scalar::attention_row_bf16 : k::scalar::attention_row_f16)(
                            q.data(), k16.data(), v16.data(), n, hd, scale, s1.data(), o1.data());
                        k::scalar::attention_row(q.data(), kw.data(), vw.data(), n, hd, scale, s2.data(), o2.data());
                    } else {
                        k::attention_row(q.data(), k16.data(), v16.data(), t, n, hd, scale, s1.data(), o1.data());
                        k::attention_row(q.data(), kw.data(), vw.data(), n, hd, scale, s2.data(), o2.data());
                    }
                    CHECK(std::memcmp(o1.data(), o2.data(), hd * sizeof(float)) == 0);
                    CHECK(std::memcmp(s1.data(), s2.data(), n * sizeof(float)) == 0);
                }
    };
    run_all(true);
    kt::for_each_simd_isa([&](std::string_view) { run_all(false); });
}

// next_k (the keys of the row the caller runs next) only steers prefetches:
// every path gives the same bits with it as without, whether it names other
// keys, the row's own keys, or keys shorter than the row's (its prefetches
// past them never fault).
TEST_CASE("attention_row: naming the next row's keys changes no bit") {
    const size_t hds[] = {1, 7, 16, 17, 64, 80};
    const size_t ns[] = {1, 9, 16, 33, 129, 300};
    kt::for_each_simd_isa([&](std::string_view) {
        uint32_t seed = 500;
        for (k::WeightType t : {k::WeightType::F32, k::WeightType::BF16, k::WeightType::F16})
            for (size_t hd : hds)
                for (size_t n : ns) {
                    CAPTURE(hd);
                    CAPTURE(n);
                    CAPTURE(static_cast<int>(t));
                    const auto q = kt::random_floats(hd, -2, 2, seed += 3);
                    const auto kf = kt::random_floats(n * hd, -2, 2, seed + 1), vf = kt::random_floats(n * hd, -1, 1, seed + 2);
                    const auto other = kt::random_floats(3, -1, 1, seed + 4);
                    std::vector<uint16_t> k16(n * hd), v16(n * hd);
                    const void* kp = kf.data();
                    const void* vp = vf.data();
                    if (t != k::WeightType::F32) {
                        k::narrow(kf.data(), kf.size(), t, k16.data());
                        k::narrow(vf.data(), vf.size(), t, v16.data());
                        kp = k16.data(), vp = v16.data();
                    }
                    const float scale = 1.0f / std::sqrt(float(hd));
                    std::vector<float> s0(n), o0(hd);
                    k::attention_row(q.data(), kp, vp, t, n, hd, scale, s0.data(), o0.data());
                    for (const void* next : {static_cast<const void*>(other.data()), kp}) {
                        std::vector<float> s1(n), o1(hd);
                        k::attention_row(q.data(), kp, vp, t, n, hd, scale, s1.data(), o1.data(), next);
                        CHECK(std::memcmp(o0.data(), o1.data(), hd * sizeof(float)) == 0);
                        CHECK(std::memcmp(s0.data(), s1.data(), n * sizeof(float)) == 0);
                    }
                }
    });
}

// narrow (the KV cache's rounding): every path gives the scalar conversions'
// bits, on every length (vector tails) and on the special values.
TEST_CASE("narrow to f16 / bf16: every path equals the scalar rounding, specials included") {
    std::vector<float> x = kt::random_floats(1000, -70000.0f, 70000.0f, 5);
    const float specials[] = {0.0f, -0.0f, 1.0f, 65504.0f, 65520.0f, 1e-8f, 6e-8f, 3e-5f, 1e30f,
                              std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                              std::numeric_limits<float>::quiet_NaN(), 1.00048828125f, 1.0009765625f, 2.9802322e-8f};
    for (size_t i = 0; i < std::size(specials); ++i) x[i * 37 % x.size()] = specials[i];
    for (size_t i = 0; i < 200; ++i) x[500 + i] = kt::random_floats(1, -1e-4f, 1e-4f, 900 + i)[0];  // f16 subnormals
    std::vector<uint16_t> want_f16(x.size()), want_bf16(x.size());
    for (size_t i = 0; i < x.size(); ++i) want_f16[i] = mmgpt::f32_to_f16(x[i]), want_bf16[i] = mmgpt::f32_to_bf16(x[i]);
    auto check_all = [&] {
        for (size_t n : kt::kSizes) {
            if (n > x.size()) continue;
            CAPTURE(n);
            std::vector<uint16_t> got(n);
            k::narrow(x.data(), n, k::WeightType::F16, got.data());
            CHECK(std::equal(got.begin(), got.end(), want_f16.begin()));
            k::narrow(x.data(), n, k::WeightType::BF16, got.data());
            CHECK(std::equal(got.begin(), got.end(), want_bf16.begin()));
        }
    };
    check_all();
    kt::for_each_simd_isa([&](std::string_view) { check_all(); });
}
