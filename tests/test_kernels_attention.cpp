// attention_row / attention_heads / attention_queries: every SIMD instantiation and the scalar
// reference against an exact (double precision) evaluation, on awkward head
// sizes (not multiples of any vector width) and key counts (around W and 8W);
// a 16-bit cache against the f32 kernel on the widened rows; and heads read
// from the KV cache's blocks against the same heads' rows one after another;
// a prefill's queries in one call against each query alone.
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
#include <stdexcept>
#include <string_view>
#include <vector>

#include "core/half.hpp"
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
  const size_t hds[] = {1, 3, 4, 7, 8, 15, 16, 17, 32, 33, 64, 65, 80, 128};
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
  const size_t hds[] = {1, 3, 8, 15, 16, 17, 32, 33, 64, 80};
  const size_t ns[] = {1, 2, 7, 8, 9, 16, 17, 33, 129};
  auto run_all = [&](bool scalar) {
    uint32_t seed = 77;
    for (mmgpt::WeightType t : {mmgpt::WeightType::BF16, mmgpt::WeightType::F16})
      for (size_t hd : hds)
        for (size_t n : ns) {
          CAPTURE(hd);
          CAPTURE(n);
          CAPTURE(t == mmgpt::WeightType::BF16 ? "bf16" : "f16");
          const auto q = kt::random_floats(hd, -2, 2, seed += 3);
          const auto kf = kt::random_floats(n * hd, -2, 2, seed + 1), vf = kt::random_floats(n * hd, -1, 1, seed + 2);
          std::vector<uint16_t> k16(n * hd), v16(n * hd);
          k::narrow(kf.data(), kf.size(), t, k16.data());
          k::narrow(vf.data(), vf.size(), t, v16.data());
          std::vector<float> kw(n * hd), vw(n * hd);
          auto widen = [t](uint16_t e) {
            return t == mmgpt::WeightType::BF16 ? mmgpt::bf16_to_f32(e) : mmgpt::f16_to_f32(e);
          };
          for (size_t i = 0; i < n * hd; ++i) kw[i] = widen(k16[i]), vw[i] = widen(v16[i]);
          const float scale = 1.0f / std::sqrt(float(hd));
          std::vector<float> s1(n), s2(n), o1(hd), o2(hd);
          if (scalar) {
            (t == mmgpt::WeightType::BF16 ? k::scalar::attention_row_bf16 : k::scalar::attention_row_f16)(
                q.data(), k16.data(), v16.data(), n, hd, scale, s1.data(), o1.data());
            k::scalar::attention_row(q.data(), kw.data(), vw.data(), n, hd, scale, s2.data(), o2.data());
          } else {
            k::attention_heads(q.data(), k16.data(), v16.data(), t, n, 1, hd, k::contiguous_rows(n), scale, s1.data(),
                               o1.data());
            k::attention_row(q.data(), kw.data(), vw.data(), n, hd, scale, s2.data(), o2.data());
          }
          CHECK(std::memcmp(o1.data(), o2.data(), hd * sizeof(float)) == 0);
          CHECK(std::memcmp(s1.data(), s2.data(), n * sizeof(float)) == 0);
        }
  };
  run_all(true);
  kt::for_each_simd_isa([&](std::string_view) { run_all(false); });
}

// Heads in the KV cache's blocks (kernels::KVBlocks: block b's rows of head h
// at b * block_stride + h * head_stride): each head's output and
// probabilities are bit for bit those of the same path over its rows copied
// one after another (whatever the block size, the number of heads in the
// call, or where the head sits among them). The cache's unused rows hold NaN,
// so a read past position n would show.
TEST_CASE("attention_heads over blocks of positions: each head bit for bit its rows read one after another") {
  const size_t hds[] = {1, 7, 16, 17, 32, 64, 80};
  const size_t ns[] = {1, 9, 16, 33, 64, 65, 129, 300};
  const size_t blocks[] = {16, 32, 64};
  const size_t heads_counts[] = {1, 3, 12};
  auto run_all = [&] {
    uint32_t seed = 500;
    for (mmgpt::WeightType t : {mmgpt::WeightType::F32, mmgpt::WeightType::BF16, mmgpt::WeightType::F16})
      for (size_t hd : hds)
        for (size_t n : ns)
          for (size_t block : blocks)
            for (size_t heads : heads_counts) {
              if (heads * hd * n > 40000 && block != 64) continue;  // keep the test quick
              CAPTURE(hd);
              CAPTURE(n);
              CAPTURE(block);
              CAPTURE(heads);
              CAPTURE(static_cast<int>(t));
              const size_t nb = (n + block - 1) / block + 1;  // one block more than n needs
              const k::KVBlocks at{block, block * hd, heads * block * hd};
              const size_t cells = nb * at.block_stride;
              const auto q = kt::random_floats(heads * hd, -2, 2, seed += 3);
              std::vector<float> kf(cells, std::numeric_limits<float>::quiet_NaN()), vf = kf;
              const auto kr = kt::random_floats(heads * n * hd, -2, 2, seed + 1);
              const auto vr = kt::random_floats(heads * n * hd, -1, 1, seed + 2);
              for (size_t h = 0; h < heads; ++h)
                for (size_t j = 0; j < n; ++j) {
                  const size_t at_row = (j / block) * at.block_stride + h * at.head_stride + (j % block) * hd;
                  std::copy_n(kr.begin() + (h * n + j) * hd, hd, kf.begin() + at_row);
                  std::copy_n(vr.begin() + (h * n + j) * hd, hd, vf.begin() + at_row);
                }
              // The same element type for both sides: narrowed copies where 16-bit.
              std::vector<uint16_t> kb(cells), vb(cells), krb(kr.size()), vrb(vr.size());
              const void *kp = kf.data(), *vp = vf.data(), *krp = kr.data(), *vrp = vr.data();
              size_t elem = sizeof(float);
              if (t != mmgpt::WeightType::F32) {
                k::narrow(kf.data(), cells, t, kb.data());
                k::narrow(vf.data(), cells, t, vb.data());
                k::narrow(kr.data(), kr.size(), t, krb.data());
                k::narrow(vr.data(), vr.size(), t, vrb.data());
                kp = kb.data(), vp = vb.data(), krp = krb.data(), vrp = vrb.data();
                elem = sizeof(uint16_t);
              }
              const float scale = 1.0f / std::sqrt(float(hd));
              std::vector<float> s(heads * n), out(heads * hd);
              k::attention_heads(q.data(), kp, vp, t, n, heads, hd, at, scale, s.data(), out.data());
              for (size_t h = 0; h < heads; ++h) {
                CAPTURE(h);
                std::vector<float> s1(n), o1(hd);
                const auto* kh = static_cast<const char*>(krp) + h * n * hd * elem;
                const auto* vh = static_cast<const char*>(vrp) + h * n * hd * elem;
                k::attention_heads(q.data() + h * hd, kh, vh, t, n, 1, hd, k::contiguous_rows(n), scale, s1.data(),
                                   o1.data());
                CHECK(std::memcmp(out.data() + h * hd, o1.data(), hd * sizeof(float)) == 0);
                CHECK(std::memcmp(s.data() + h * n, s1.data(), n * sizeof(float)) == 0);
              }
            }
  };
  {
    kt::IsaGuard guard;
    REQUIRE(k::force_isa("scalar"));  // the scalar set's entry (gathers each head's rows)
    run_all();
  }
  kt::for_each_simd_isa([&](std::string_view) { run_all(); });
}

// Grouped-query attention (KVBlocks rep and first): a call's query head h
// reads key/value head (first + h) / rep, and the SIMD sets run the query
// heads of one key/value head in tiles that load each row once. Each head's
// output and probabilities are bit for bit those of the head alone on its
// key/value head's rows, for every tile fill (1 .. 4 heads a key/value head,
// and more), calls that start inside a key/value head's query heads, head
// sizes of every remainder, positions that end inside a group of W keys and
// inside a block, 16-bit caches and a sliding window; and a head stride of 0
// (every head on the same rows). Unused rows hold NaN.
TEST_CASE("attention_heads with grouped-query heads: each head bit for bit the head alone") {
  const size_t hds[] = {1, 7, 16, 17, 64, 80};
  const size_t ns[] = {1, 15, 16, 17, 64, 65, 130};
  struct Grouping {
    size_t rep, first, heads;
  };
  const Grouping groupings[] = {{2, 0, 4}, {3, 0, 9}, {3, 2, 5}, {4, 1, 7}, {5, 0, 10}, {7, 3, 9}, {1, 0, 3}};
  const size_t kv_heads = 3;
  auto run_all = [&] {
    uint32_t seed = 1700;
    for (mmgpt::WeightType t : {mmgpt::WeightType::F32, mmgpt::WeightType::BF16, mmgpt::WeightType::F16})
      for (size_t hd : hds)
        for (size_t n : ns)
          for (const Grouping& gr : groupings)
            for (size_t stride_zero : {0, 1})
              for (size_t window : {size_t{0}, size_t{20}}) {
                if (t != mmgpt::WeightType::F32 && (gr.heads > 5 || window != 0 || stride_zero)) continue;  // quick
                CAPTURE(hd);
                CAPTURE(n);
                CAPTURE(gr.rep);
                CAPTURE(gr.first);
                CAPTURE(gr.heads);
                CAPTURE(stride_zero);
                CAPTURE(window);
                CAPTURE(static_cast<int>(t));
                const size_t block = 64, nb = (n + block - 1) / block + 1;
                k::KVBlocks at{block, stride_zero ? 0 : block * hd, kv_heads * block * hd};
                at.rep = gr.rep, at.first = gr.first;
                const size_t used = (gr.first + gr.heads - 1) / gr.rep + 1;  // key/value heads the call reads
                if (!stride_zero && used > kv_heads) continue;
                const size_t cells = nb * at.block_stride;
                const auto q = kt::random_floats(gr.heads * hd, -2, 2, seed += 3);
                std::vector<float> kf(cells, std::numeric_limits<float>::quiet_NaN()), vf = kf;
                const auto kr = kt::random_floats(kv_heads * n * hd, -2, 2, seed + 1);
                const auto vr = kt::random_floats(kv_heads * n * hd, -1, 1, seed + 2);
                for (size_t j = 0; j < kv_heads; ++j)
                  for (size_t i = 0; i < n; ++i) {
                    const size_t row = (i / block) * at.block_stride + j * block * hd + (i % block) * hd;
                    std::copy_n(kr.begin() + (j * n + i) * hd, hd, kf.begin() + row);
                    std::copy_n(vr.begin() + (j * n + i) * hd, hd, vf.begin() + row);
                  }
                std::vector<uint16_t> kb(cells), vb(cells);
                const void *kp = kf.data(), *vp = vf.data();
                size_t elem = sizeof(float);
                if (t != mmgpt::WeightType::F32) {
                  k::narrow(kf.data(), cells, t, kb.data());
                  k::narrow(vf.data(), cells, t, vb.data());
                  kp = kb.data(), vp = vb.data(), elem = sizeof(uint16_t);
                }
                const float scale = 1.0f / std::sqrt(float(hd));
                std::vector<float> s(gr.heads * n), out(gr.heads * hd, std::numeric_limits<float>::quiet_NaN());
                k::attention_heads(q.data(), kp, vp, t, n, gr.heads, hd, at, scale, s.data(), out.data(), window);
                for (size_t h = 0; h < gr.heads; ++h) {
                  CAPTURE(h);
                  // The head alone: one head (rep 1) from its key/value head's rows.
                  const size_t off = at.head_offset(h) * elem;
                  const k::KVBlocks one{block, 0, at.block_stride};
                  std::vector<float> s1(n), o1(hd);
                  k::attention_heads(q.data() + h * hd, static_cast<const char*>(kp) + off,
                                     static_cast<const char*>(vp) + off, t, n, 1, hd, one, scale, s1.data(), o1.data(),
                                     window);
                  CHECK(std::memcmp(out.data() + h * hd, o1.data(), hd * sizeof(float)) == 0);
                  CHECK(std::memcmp(s.data() + h * n, s1.data(), n * sizeof(float)) == 0);
                }
              }
  };
  {
    kt::IsaGuard guard;
    REQUIRE(k::force_isa("scalar"));
    run_all();
  }
  kt::for_each_simd_isa([&](std::string_view) { run_all(); });
}

// A prefill's queries in one call (query i over the first n + i positions):
// each query's output and probabilities bit for bit attention_heads of that
// query alone, for tiles of every fill (queries not a multiple of the tile),
// positions that start and end inside a group of W keys and inside a block,
// and head sizes of every remainder. Unused rows of the cache hold NaN, and
// the outputs start as NaN, so a read past a query's positions or a missed
// write would show.
TEST_CASE("attention_queries: each query bit for bit attention_heads of it alone") {
  const size_t hds[] = {1, 7, 16, 17, 64, 80};
  const size_t ns[] = {0, 1, 5, 16, 17, 63, 130};
  const size_t query_counts[] = {1, 2, 3, 4, 5, 9, 19};
  const size_t blocks[] = {16, 64};
  const size_t heads_counts[] = {1, 3};
  auto run_all = [&] {
    uint32_t seed = 900;
    for (mmgpt::WeightType t : {mmgpt::WeightType::F32, mmgpt::WeightType::BF16, mmgpt::WeightType::F16})
      for (size_t hd : hds)
        for (size_t n : ns)
          for (size_t queries : query_counts)
            for (size_t block : blocks)
              for (size_t heads : heads_counts) {
                if (t != mmgpt::WeightType::F32 && (heads > 1 || block != 64)) continue;  // keep the test quick
                CAPTURE(hd);
                CAPTURE(n);
                CAPTURE(queries);
                CAPTURE(block);
                CAPTURE(heads);
                CAPTURE(static_cast<int>(t));
                const size_t positions = n + queries - 1, nb = positions / block + 1;
                const k::KVBlocks at{block, block * hd, heads * block * hd};
                const size_t cells = nb * at.block_stride;
                std::vector<float> kf(cells, std::numeric_limits<float>::quiet_NaN()), vf = kf;
                const auto kr = kt::random_floats(cells, -2, 2, seed += 3),
                           vr = kt::random_floats(cells, -1, 1, seed + 1);
                for (size_t h = 0; h < heads; ++h)
                  for (size_t j = 0; j < positions; ++j) {
                    const size_t row = (j / block) * at.block_stride + h * at.head_stride + (j % block) * hd;
                    std::copy_n(kr.begin() + row, hd, kf.begin() + row);
                    std::copy_n(vr.begin() + row, hd, vf.begin() + row);
                  }
                std::vector<uint16_t> kb(cells), vb(cells);
                const void *kp = kf.data(), *vp = vf.data();
                if (t != mmgpt::WeightType::F32) {
                  k::narrow(kf.data(), cells, t, kb.data());
                  k::narrow(vf.data(), cells, t, vb.data());
                  kp = kb.data(), vp = vb.data();
                }
                const size_t q_stride = heads * hd + 3, out_stride = heads * hd + 5;  // rows wider than the heads
                const auto q = kt::random_floats(queries * q_stride, -2, 2, seed + 2);
                const float scale = 1.0f / std::sqrt(float(hd));
                std::vector<float> s(queries * heads * positions, std::numeric_limits<float>::quiet_NaN());
                std::vector<float> out(queries * out_stride, std::numeric_limits<float>::quiet_NaN());
                k::attention_queries(q.data(), q_stride, kp, vp, t, n, queries, heads, hd, at, scale, s.data(),
                                     out.data(), out_stride);
                for (size_t i = 0; i < queries; ++i) {
                  CAPTURE(i);
                  std::vector<float> s1(heads * (n + i)), o1(heads * hd);
                  k::attention_heads(q.data() + i * q_stride, kp, vp, t, n + i, heads, hd, at, scale, s1.data(),
                                     o1.data());
                  CHECK(std::memcmp(out.data() + i * out_stride, o1.data(), heads * hd * sizeof(float)) == 0);
                  for (size_t h = 0; h < heads && n + i > 0; ++h)  // (memcmp of an empty vector's null: UB)
                    CHECK(std::memcmp(s.data() + (i * heads + h) * positions, s1.data() + h * (n + i),
                                      (n + i) * sizeof(float)) == 0);
                }
              }
  };
  {
    kt::IsaGuard guard;
    REQUIRE(k::force_isa("scalar"));
    run_all();
  }
  kt::for_each_simd_isa([&](std::string_view) { run_all(); });
}

// A sliding window (nanochat's per-layer windows): query i sees only its last
// `window` positions. Each query's output is the exact (double) attention over
// those rows alone, the earlier positions get probability exactly 0, and a
// prefill's queries in one call are bit for bit each query alone, in the
// scalar reference and every SIMD set; windows shorter than, equal to and
// longer than the positions, inside and across blocks of the cache.
TEST_CASE("attention with a sliding window: the last `window` positions only") {
  const size_t hd = 17, heads = 2, block = 16;
  auto run_all = [&] {
    uint32_t seed = 4100;
    for (size_t n : {1, 9, 40, 70})
      for (size_t queries : {1, 5, 9})
        for (size_t window : {1, 3, 16, 33, 200}) {
          CAPTURE(n);
          CAPTURE(queries);
          CAPTURE(window);
          const size_t positions = n + queries - 1, nb = positions / block + 1;
          const k::KVBlocks at{block, block * hd, heads * block * hd};
          const size_t cells = nb * at.block_stride;
          const auto kf = kt::random_floats(cells, -2, 2, seed += 3), vf = kt::random_floats(cells, -1, 1, seed + 1);
          const size_t q_stride = heads * hd;
          const auto q = kt::random_floats(queries * q_stride, -2, 2, seed + 2);
          const float scale = 1.0f / std::sqrt(float(hd));
          std::vector<float> s(queries * heads * positions, -1.0f), out(queries * q_stride, -1.0f);
          k::attention_queries(q.data(), q_stride, kf.data(), vf.data(), mmgpt::WeightType::F32, n, queries, heads,
                               hd, at, scale, s.data(), out.data(), q_stride, window);
          for (size_t i = 0; i < queries; ++i) {
            CAPTURE(i);
            const size_t m = n + i, first = m > window ? m - window : 0;
            std::vector<float> s1(heads * m), o1(heads * hd);
            k::attention_heads(q.data() + i * q_stride, kf.data(), vf.data(), mmgpt::WeightType::F32, m, heads, hd, at,
                               scale, s1.data(), o1.data(), window);
            CHECK(std::memcmp(out.data() + i * q_stride, o1.data(), heads * hd * sizeof(float)) == 0);
            for (size_t h = 0; h < heads; ++h) {
              const float* p = s.data() + (i * heads + h) * positions;
              for (size_t j = 0; j < first; ++j) CHECK(p[j] == 0.0f);
              // The exact attention over rows first .. m-1.
              std::vector<double> e(m - first);
              double mx = -1e300, total = 0;
              for (size_t j = first; j < m; ++j) {
                const size_t row = (j / block) * at.block_stride + h * at.head_stride + (j % block) * hd;
                double dot = 0;
                for (size_t d = 0; d < hd; ++d) dot += double(q[i * q_stride + h * hd + d]) * kf[row + d];
                mx = std::max(mx, e[j - first] = dot * scale);
              }
              for (double& x : e) total += (x = std::exp(x - mx));
              for (size_t d = 0; d < hd; ++d) {
                double exact = 0;
                for (size_t j = first; j < m; ++j) {
                  const size_t row = (j / block) * at.block_stride + h * at.head_stride + (j % block) * hd;
                  exact += e[j - first] / total * vf[row + d];
                }
                CHECK(std::fabs(out[i * q_stride + h * hd + d] - exact) <= 1e-5);
              }
            }
          }
        }
  };
  {
    kt::IsaGuard guard;
    REQUIRE(k::force_isa("scalar"));
    run_all();
  }
  kt::for_each_simd_isa([&](std::string_view) { run_all(); });
}

TEST_CASE("attention_heads: a block that is not a positive multiple of 16 is refused") {
  std::vector<float> q(4), kv(64), s(2), out(4);
  CHECK_THROWS_AS(k::attention_heads(q.data(), kv.data(), kv.data(), mmgpt::WeightType::F32, 2, 1, 4, {8, 0, 0}, 1.0f,
                                     s.data(), out.data()),
                  std::invalid_argument);
  CHECK_THROWS_AS(k::attention_heads(q.data(), kv.data(), kv.data(), mmgpt::WeightType::F32, 2, 1, 4, {0, 0, 0}, 1.0f,
                                     s.data(), out.data()),
                  std::invalid_argument);
}

// narrow (the KV cache's rounding): every path gives the scalar conversions'
// bits, on every length (vector tails) and on the special values.
TEST_CASE("narrow to f16 / bf16: every path equals the scalar rounding, specials included") {
  std::vector<float> x = kt::random_floats(1000, -70000.0f, 70000.0f, 5);
  const float specials[] = {0.0f,
                            -0.0f,
                            1.0f,
                            65504.0f,
                            65520.0f,
                            1e-8f,
                            6e-8f,
                            3e-5f,
                            1e30f,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(),
                            1.00048828125f,
                            1.0009765625f,
                            2.9802322e-8f};
  for (size_t i = 0; i < std::size(specials); ++i) x[i * 37 % x.size()] = specials[i];
  for (size_t i = 0; i < 200; ++i) x[500 + i] = kt::random_floats(1, -1e-4f, 1e-4f, 900 + i)[0];  // f16 subnormals
  std::vector<uint16_t> want_f16(x.size()), want_bf16(x.size());
  for (size_t i = 0; i < x.size(); ++i) want_f16[i] = mmgpt::f32_to_f16(x[i]), want_bf16[i] = mmgpt::f32_to_bf16(x[i]);
  auto check_all = [&] {
    for (size_t n : kt::kSizes) {
      if (n > x.size()) continue;
      CAPTURE(n);
      std::vector<uint16_t> got(n);
      k::narrow(x.data(), n, mmgpt::WeightType::F16, got.data());
      CHECK(std::equal(got.begin(), got.end(), want_f16.begin()));
      k::narrow(x.data(), n, mmgpt::WeightType::BF16, got.data());
      CHECK(std::equal(got.begin(), got.end(), want_bf16.begin()));
    }
  };
  check_all();
  kt::for_each_simd_isa([&](std::string_view) { check_all(); });
}
