// Block-quantized weights (q8_0, q4_0) and the 8-bit activation blocks they
// multiply with (core/quant_layout.hpp, kernels/scalar/quant.cpp):
// - the byte layout, against the formula of docs/format.md written out again here;
// - quantizing then dequantizing a weight stays within the documented error
//   (q8_0: half a step, q4_0: half a step, one step at the clamped end);
// - every quantized kernel set the CPU runs (AVX-512 VNNI, AVX2, NEON with and
//   without the dot product) gives bit for bit the scalar reference's
//   quantized activations and products, on awkward shapes, with every epilogue;
//   so does the x86 sets' matmul (simd/quant_tile.hpp) over operations
//   emulated lane by lane (quant_tile_emulated.hpp), on any host;
// - the AMX tile kernels (simd/amx_tile.hpp) over emulated tiles
//   (amx_tile_emulated.hpp) on any host, and over the real ones where the CPU
//   has AMX-INT8, from a tile's rows up, also split over row blocks;
// - the scalar reference is the exact block sum it claims to be, and its error
//   against the f32 product is within the bound that quantizing both sides
//   implies;
// - the public matmul_packed (threaded, any thread count) equals the reference.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <tbb/global_control.h>

#include "core/half.hpp"
#include "kernels/registry.hpp"
#include "kernels_testing.hpp"
#include "amx_tile_emulated.hpp"
#include "quant_tile_emulated.hpp"

namespace k = mmgpt::kernels;
namespace kd = mmgpt::kernels::detail;
using k::Activation;
using k::DecodePrefetch;
using k::Epilogue;
using mmgpt::WeightType;

namespace {

const char* type_name(WeightType t) { return t == WeightType::Q8_0 ? "q8_0" : "q4_0"; }

// Weights with a few blocks of special shape: all zero, one spike, constant.
std::vector<float> awkward_weights(size_t N, size_t K, uint32_t seed) {
  std::vector<float> w = kt::random_floats(N * K, -1.0f, 1.0f, seed);
  if (N * K > 40) {
    std::fill(w.begin(), w.begin() + std::min<size_t>(K, 32), 0.0f);  // a zero block (or row)
    w[N * K / 2] = 7.5f;                                              // a spike
  }
  if (N > 2) std::fill(w.begin() + 2 * K, w.begin() + 3 * K, -0.25f);  // a constant row
  return w;
}

struct Quantized {
  std::vector<int8_t> q;
  std::vector<float> scale;
  std::vector<int32_t> sum;
  mmgpt::QuantizedRows rows() const { return {q.data(), scale.data(), sum.data(), scale.size() / rows_count}; }
  size_t rows_count = 1;
};

Quantized quantize_with(const kd::QuantKernels& qk, const std::vector<float>& x, size_t M, size_t K) {
  const size_t Kb = mmgpt::quant_blocks(K);
  Quantized r;
  r.q.assign(M * Kb * mmgpt::kQuantBlock, 99);
  r.scale.assign(M * Kb, -1.0f);
  r.sum.assign(M * Kb, -1);
  r.rows_count = M;
  qk.quantize_rows(x.data(), M, K, r.q.data(), r.scale.data(), r.sum.data());
  return r;
}

// The sets this CPU runs, then the x86 tiles over emulated operations.
std::vector<const kd::QuantKernels*> quant_sets() {
  auto sets = kd::runnable_quant_kernels();
  for (const kd::QuantKernels* e : kd::emulated_quant_kernels()) sets.push_back(e);
  return sets;
}

// The AMX tile sets: emulated, and the CPU's where it has AMX-INT8.
std::vector<const kd::QuantKernels*> amx_sets() {
  std::vector<const kd::QuantKernels*> sets{&kd::emulated_amx_int8_kernels()};
  for (const kd::QuantKernels* q : kd::runnable_quant_kernels())
    if (std::string(q->matmul.name) == "amx-int8") sets.push_back(q);
  return sets;
}

const std::vector<size_t> kKs = {1, 3, 31, 32, 33, 64, 95, 100, 257, 768};
const std::vector<size_t> kNs = {1, 5, 15, 16, 17, 33, 50};
const std::vector<size_t> kMs = {1, 2, 3, 5, 7, 8, 13};

}  // namespace

TEST_CASE("q8_0 / q4_0 byte layout: where docs/format.md says each quant and scale is") {
  const size_t N = 19, K = 70;  // two panels, three blocks (the last one partial): two units, the second half empty
  std::vector<float> w(N * K);
  for (size_t n = 0; n < N; ++n)
    for (size_t kk = 0; kk < K; ++kk) w[n * K + kk] = static_cast<float>(int((n * 7 + kk * 3) % 15) - 7);
  for (WeightType t : {WeightType::Q8_0, WeightType::Q4_0}) {
    CAPTURE(std::string(type_name(t)));
    const size_t Kb = 3;
    const size_t B = t == WeightType::Q8_0 ? 512 : 256;  // quants of one block
    const size_t U = 2 * B + 64;                         // a unit: two blocks' quants, then their scales
    const size_t panel = 2 * U;                          // ceil(3 / 2) units
    REQUIRE(mmgpt::packed_weight_bytes(t, N, K) == 2 * panel);
    std::vector<uint8_t> p(mmgpt::packed_weight_bytes(t, N, K));
    mmgpt::quantize_panels(w.data(), N, K, t, p.data());
    for (size_t n = 0; n < 32; ++n)
      for (size_t kk = 0; kk < Kb * 32; ++kk) {
        const size_t pn = n / 16, j = n % 16, b = kk / 32, r = kk % 32;
        const size_t unit = pn * panel + (b / 2) * U;
        uint16_t bits;
        std::memcpy(&bits, &p[unit + 2 * B + (b % 2) * 32 + j * 2], 2);
        const float d = mmgpt::f16_to_f32(bits);
        int q;
        if (t == WeightType::Q8_0) {
          q = static_cast<int8_t>(p[unit + (b % 2) * B + (r / 4) * 64 + j * 4 + r % 4]);
        } else {
          const uint8_t byte = p[unit + (b % 2) * B + (r / 8) * 64 + j * 4 + r % 4];
          q = ((r % 8) < 4 ? (byte & 15) : (byte >> 4)) - 8;
        }
        const float want = n < N && kk < K ? w[n * K + kk] : 0.0f;
        CAPTURE(n);
        CAPTURE(kk);
        // Within half a step; q4_0 one step where +8 steps clamps to +7.
        CHECK(std::fabs(d * q - want) <= std::fabs(d) * (t == WeightType::Q8_0 ? 0.5 : 1.0) + 1e-6);
        if (n >= N || kk >= K) CHECK(d * q == 0.0f);
      }
    // The missing fourth block of the second unit: zero weights (nibble 8 for q4_0) and zero scales.
    for (size_t pn = 0; pn < 2; ++pn) {
      for (size_t i = 0; i < B; ++i) CHECK(p[pn * panel + U + B + i] == (t == WeightType::Q8_0 ? 0x00 : 0x88));
      for (size_t i = 0; i < 32; ++i) CHECK(p[pn * panel + U + 2 * B + 32 + i] == 0);
    }
  }
}

TEST_CASE("quantize then dequantize: within half a step (q4_0: one step where it clamps)") {
  for (WeightType t : {WeightType::Q8_0, WeightType::Q4_0})
    for (size_t K : kKs)
      for (size_t N : {size_t{1}, size_t{17}}) {
        CAPTURE(std::string(type_name(t)));
        CAPTURE(K);
        CAPTURE(N);
        const auto w = awkward_weights(N, K, static_cast<uint32_t>(K * 31 + N));
        std::vector<uint8_t> p(mmgpt::packed_weight_bytes(t, N, K));
        mmgpt::quantize_panels(w.data(), N, K, t, p.data());
        std::vector<float> row(K);
        for (size_t n = 0; n < N; ++n) {
          mmgpt::dequantize_panel_row(p.data(), t, K, n, row.data());
          for (size_t b = 0; b * 32 < K; ++b) {
            const size_t k0 = b * 32, k1 = std::min(K, k0 + 32);
            double amax = 0;
            for (size_t kk = k0; kk < k1; ++kk) amax = std::max(amax, double(std::fabs(w[n * K + kk])));
            // The step d, as stored in f16 (relative rounding <= 2^-11).
            const double step = (t == WeightType::Q8_0 ? amax / 127 : amax / 8) * (1 + 0x1p-10);
            const double bound = (t == WeightType::Q8_0 ? 0.5 : 1.0) * step + 1e-7;
            for (size_t kk = k0; kk < k1; ++kk) {
              const double err = std::fabs(double(row[kk]) - w[n * K + kk]);
              if (err > bound) {
                CAPTURE(kk);
                CHECK(err <= bound);
              }
              // The block's extreme value is represented exactly up to the f16 scale.
              if (std::fabs(w[n * K + kk]) == amax && amax > 0)
                CHECK(std::fabs(double(row[kk]) - w[n * K + kk]) <= amax * 0x1p-10);
            }
          }
        }
      }
}

TEST_CASE("activation blocks: the reference's definition, and every kernel set bit for bit") {
  const auto sets = kd::runnable_quant_kernels();
  for (const kd::QuantKernels* qk : sets) MESSAGE("quantized kernels runnable here: " << std::string(qk->matmul.name));
  for (size_t K : kKs)
    for (size_t M : {size_t{1}, size_t{3}, size_t{8}}) {
      CAPTURE(K);
      CAPTURE(M);
      auto x = kt::random_floats(M * K, -3.0f, 3.0f, static_cast<uint32_t>(M * 1000 + K));
      if (K >= 32) std::fill(x.begin(), x.begin() + 32, 0.0f);  // a zero block
      const Quantized ref = quantize_with(kd::scalar_quant_kernels(), x, M, K);
      const size_t Kb = mmgpt::quant_blocks(K);
      // The definition (quant_layout.hpp), re-derived.
      for (size_t m = 0; m < M; ++m)
        for (size_t b = 0; b < Kb; ++b) {
          const size_t k0 = b * 32, k1 = std::min(K, k0 + 32);
          float amax = 0;
          for (size_t kk = k0; kk < k1; ++kk) amax = std::max(amax, std::fabs(x[m * K + kk]));
          CHECK(ref.scale[m * Kb + b] == amax / 127.0f);
          int32_t s = 0;
          for (size_t r = 0; r < 32; ++r) {
            const size_t kk = k0 + r;
            const int want = kk < k1 && amax > 0 ? int(std::nearbyint(x[m * K + kk] * (127.0f / amax))) : 0;
            CHECK(ref.q[(m * Kb + b) * 32 + r] == want);
            s += want;
          }
          CHECK(ref.sum[m * Kb + b] == s);
        }
      for (const kd::QuantKernels* qk : sets) {
        CAPTURE(std::string(qk->matmul.name));
        const Quantized got = quantize_with(*qk, x, M, K);
        CHECK(got.q == ref.q);
        CHECK(std::memcmp(got.scale.data(), ref.scale.data(), ref.scale.size() * 4) == 0);
        CHECK(got.sum == ref.sum);
      }
    }
}

TEST_CASE("activation blocks: infinities and NaNs give a NaN scale, never an integer from NaN") {
  for (const kd::QuantKernels* qk : kd::runnable_quant_kernels()) {
    CAPTURE(std::string(qk->matmul.name));
    std::vector<float> x(64, 0.5f);
    x[3] = std::numeric_limits<float>::infinity();
    x[40] = std::numeric_limits<float>::quiet_NaN();
    const Quantized q = quantize_with(*qk, x, 1, 64);
    CHECK(std::isnan(q.scale[0]));
    CHECK(std::isnan(q.scale[1]));
    CHECK(q.sum[0] == 0);
    CHECK(q.sum[1] == 0);
    CHECK(std::all_of(q.q.begin(), q.q.end(), [](int8_t v) { return v == 0; }));
  }
}

TEST_CASE("a NaN or infinite activation makes that row's products NaN in every set, the other rows unchanged") {
  const size_t M = 5, K = 96, N = 37;  // M = 5: the prefill tile and a row left over
  for (WeightType t : {WeightType::Q8_0, WeightType::Q4_0}) {
    CAPTURE(std::string(type_name(t)));
    const auto w = awkward_weights(N, K, 21);
    std::vector<uint8_t> p(mmgpt::packed_weight_bytes(t, N, K));
    mmgpt::quantize_panels(w.data(), N, K, t, p.data());
    auto x = kt::random_floats(M * K, -2.0f, 2.0f, 22);
    x[1 * K + 40] = std::numeric_limits<float>::infinity();
    x[4 * K + 95] = std::numeric_limits<float>::quiet_NaN();
    const Quantized ref_q = quantize_with(kd::scalar_quant_kernels(), x, M, K);
    auto ref = kt::quant_gemm(kd::scalar_quant_kernels(), t);
    std::vector<float> want(M * N);
    ref(ref_q.rows(), p.data(), nullptr, want.data(), M, K, N, 0, mmgpt::panel_count(N), {});
    for (const kd::QuantKernels* qk : quant_sets()) {
      CAPTURE(std::string(qk->matmul.name));
      const Quantized xq = quantize_with(*qk, x, M, K);
      auto gemm = kt::quant_gemm(*qk, t);
      for (size_t rows : {size_t{1}, M}) {  // decode (row 0 alone) and prefill
        CAPTURE(rows);
        std::vector<float> got(M * N, 0.0f);
        gemm(xq.rows(), p.data(), nullptr, got.data(), rows, K, N, 0, mmgpt::panel_count(N), {});
        for (size_t m = 0; m < rows; ++m)
          for (size_t n = 0; n < N; ++n) {
            const float g = got[m * N + n], r = want[m * N + n];
            if (m == 1 || m == 4) {
              CHECK(std::isnan(g));
              CHECK(std::isnan(r));
            } else if (std::memcmp(&g, &r, 4) != 0) {
              CAPTURE(m);
              CAPTURE(n);
              CHECK(g == r);
            }
          }
      }
    }
  }
}

TEST_CASE("the scalar reference is the exact block sum, within the quantization bound of the f32 product") {
  for (WeightType t : {WeightType::Q8_0, WeightType::Q4_0})
    for (size_t K : {size_t{1}, size_t{33}, size_t{100}, size_t{768}}) {
      CAPTURE(std::string(type_name(t)));
      CAPTURE(K);
      const size_t M = 3, N = 21;
      const auto w = awkward_weights(N, K, 5);
      const auto x = kt::random_floats(M * K, -2.0f, 2.0f, 6);
      std::vector<uint8_t> p(mmgpt::packed_weight_bytes(t, N, K));
      mmgpt::quantize_panels(w.data(), N, K, t, p.data());
      const Quantized xq = quantize_with(kd::scalar_quant_kernels(), x, M, K);
      std::vector<float> y(M * N);
      (t == WeightType::Q8_0 ? k::scalar::gemm_panels_q8_0 : k::scalar::gemm_panels_q4_0)(
          xq.rows(), p.data(), nullptr, y.data(), M, K, N, 0, mmgpt::panel_count(N), {});
      const size_t Kb = mmgpt::quant_blocks(K);
      std::vector<float> wrow(K);
      for (size_t n = 0; n < N; ++n) {
        mmgpt::dequantize_panel_row(p.data(), t, K, n, wrow.data());
        for (size_t m = 0; m < M; ++m) {
          // Exact value of the quantized product, and the f32 product.
          double exact = 0, f32 = 0, bound = 0;
          for (size_t kk = 0; kk < K; ++kk) {
            const double dx = xq.scale[m * Kb + kk / 32];
            const double xhat = dx * xq.q[m * Kb * 32 + kk];
            exact += xhat * wrow[kk];
            f32 += double(x[m * K + kk]) * w[n * K + kk];
            // |x w - x^ w^| <= |x| |w - w^| + |w^| |x - x^|
            bound +=
                std::fabs(x[m * K + kk]) * std::fabs(double(w[n * K + kk]) - wrow[kk]) + std::fabs(wrow[kk]) * 0.5 * dx;
          }
          const double got = y[m * N + n];
          CAPTURE(n);
          CAPTURE(m);
          // Float rounding of the per-block scaling and the running sum.
          double abs_sum = 0;
          for (size_t kk = 0; kk < K; ++kk)
            abs_sum += std::fabs(xq.scale[m * Kb + kk / 32] * xq.q[m * Kb * 32 + kk] * double(wrow[kk]));
          CHECK(std::fabs(got - exact) <= (Kb + 2) * 2 * kt::kU * abs_sum + 1e-30);
          CHECK(std::fabs(got - f32) <= bound * 1.001 + (Kb + 2) * 2 * kt::kU * abs_sum + 1e-30);
        }
      }
    }
}

TEST_CASE(
    "every quantized kernel set equals the scalar reference bit for bit (a fused GELU within its bound), every shape") {
  const auto sets = quant_sets();
  const Epilogue epilogues[] = {
      {Activation::None, false},    {Activation::None, true},         {Activation::GeluTanh, false},
      {Activation::GeluErf, true}, {Activation::ReluSquared, false}, {Activation::ReluSquared, true}};
  int compared = 0;
  for (WeightType t : {WeightType::Q8_0, WeightType::Q4_0})
    for (size_t K : kKs)
      for (size_t N : kNs) {
        const auto w = awkward_weights(N, K, static_cast<uint32_t>(K + 7 * N));
        std::vector<uint8_t> p(mmgpt::packed_weight_bytes(t, N, K));
        mmgpt::quantize_panels(w.data(), N, K, t, p.data());
        const auto bias = kt::random_floats(N, -1.0f, 1.0f, 3);
        for (size_t M : kMs) {
          const auto x = kt::random_floats(M * K, -2.0f, 2.0f, static_cast<uint32_t>(M + K + N));
          const Quantized xq = quantize_with(kd::scalar_quant_kernels(), x, M, K);
          const auto y0 = kt::random_floats(M * N, -1.0f, 1.0f, 9);
          // The pre-activation sums (with the bias): bound the GELU cases.
          std::vector<float> pre(M * N);
          kt::quant_gemm(kd::scalar_quant_kernels(), t)(xq.rows(), p.data(), bias.data(), pre.data(), M, K, N, 0,
                                                        mmgpt::panel_count(N), {});
          for (const Epilogue& e : epilogues) {
            const float* b = e.accumulate ? nullptr : bias.data();
            std::vector<float> want = y0;
            auto ref = kt::quant_gemm(kd::scalar_quant_kernels(), t);
            ref(xq.rows(), p.data(), b, want.data(), M, K, N, 0, mmgpt::panel_count(N), e);
            for (const kd::QuantKernels* qk : sets) {
              if (qk == &kd::scalar_quant_kernels()) continue;
              auto gemm = kt::quant_gemm(*qk, t);
              std::vector<float> got = y0;
              // Two panel ranges, as threads would split them.
              const size_t split = mmgpt::panel_count(N) / 2;
              gemm(xq.rows(), p.data(), b, got.data(), M, K, N, 0, split, e);
              gemm(xq.rows(), p.data(), b, got.data(), M, K, N, split, mmgpt::panel_count(N), e);
              ++compared;
              for (size_t i = 0; i < got.size(); ++i) {
                CAPTURE(std::string(qk->matmul.name));
                CAPTURE(std::string(type_name(t)));
                CAPTURE(M);
                CAPTURE(K);
                CAPTURE(N);
                CAPTURE(i);
                if (e.act == Activation::None || e.act == Activation::ReluSquared) {
                  // The sums (and ReLU squared of them) are the reference's bit for bit.
                  if (std::memcmp(&got[i], &want[i], 4) != 0) CHECK(got[i] == want[i]);
                } else {
                  // The kernels fuse their ISA's vector GELU, which test_kernels_simd.cpp
                  // bounds by 4 ulp + |x| 2^-22 of the scalar one; twice that here, plus
                  // an ulp of the residual add.
                  const double pre_b = e.accumulate ? pre[i] - bias[i % N] : pre[i];
                  const double tol =
                      8 * kt::ulp(want[i]) + std::fabs(pre_b) * 0x1p-21 + (e.accumulate ? kt::ulp(want[i]) : 0.0);
                  if (!(std::fabs(double(got[i]) - want[i]) <= tol)) CHECK(std::fabs(double(got[i]) - want[i]) <= tol);
                }
              }
            }
          }
        }
      }
  MESSAGE(compared << " SIMD products compared with the reference over " << sets.size() << " kernel sets");
}

TEST_CASE(
    "decode (one row) over many panels: every set equals the reference bit for bit, whatever panel range it gets") {
  // The decode kernels stream one panel at a time on AVX-512 and AVX2 (two
  // with NEON's dot product), prefetching past the end of the panel and of
  // their range into the panels that follow: ranges that start and end
  // anywhere, over matrices of 13 and 17 panels, with K giving an odd number
  // of blocks (a unit's second block missing) and an even one. Under each
  // prefetch hint: each is its own instantiation.
  const auto sets = quant_sets();
  for (DecodePrefetch hint : {DecodePrefetch::Nta, DecodePrefetch::T0, DecodePrefetch::None}) {
    const kt::DecodePrefetchGuard fixed(k::decode_prefetch_name(hint));
    const Epilogue epilogues[] = {{Activation::None, false}, {Activation::None, true}};
    for (WeightType t : {WeightType::Q8_0, WeightType::Q4_0})
      for (size_t K : {size_t{32}, size_t{95}, size_t{768}})
        for (size_t N : {size_t{208}, size_t{261}}) {
          const auto w = awkward_weights(N, K, static_cast<uint32_t>(3 * K + N));
          std::vector<uint8_t> p(mmgpt::packed_weight_bytes(t, N, K));
          mmgpt::quantize_panels(w.data(), N, K, t, p.data());
          const auto x = kt::random_floats(K, -2.0f, 2.0f, static_cast<uint32_t>(K + N));
          const Quantized xq = quantize_with(kd::scalar_quant_kernels(), x, 1, K);
          const auto bias = kt::random_floats(N, -1.0f, 1.0f, 4);
          const auto y0 = kt::random_floats(N, -1.0f, 1.0f, 5);
          const size_t panels = mmgpt::panel_count(N);
          for (const Epilogue& e : epilogues) {
            const float* b = e.accumulate ? nullptr : bias.data();
            auto ref = kt::quant_gemm(kd::scalar_quant_kernels(), t);
            std::vector<float> want = y0;
            ref(xq.rows(), p.data(), b, want.data(), 1, K, N, 0, panels, e);
            for (const kd::QuantKernels* qk : sets) {
              auto gemm = kt::quant_gemm(*qk, t);
              for (size_t first : {size_t{0}, size_t{1}, size_t{3}, size_t{5}})
                for (size_t split : {size_t{4}, size_t{7}, size_t{8}, size_t{9}, size_t{12}}) {
                  // Three ranges covering the matrix: [0, first), [first, mid), [mid, panels).
                  const size_t mid = std::min(first + split, panels);
                  std::vector<float> got = y0;
                  gemm(xq.rows(), p.data(), b, got.data(), 1, K, N, 0, first, e);
                  gemm(xq.rows(), p.data(), b, got.data(), 1, K, N, first, mid, e);
                  gemm(xq.rows(), p.data(), b, got.data(), 1, K, N, mid, panels, e);
                  CAPTURE(std::string(qk->matmul.name));
                  CAPTURE(std::string(type_name(t)));
                  CAPTURE(K);
                  CAPTURE(N);
                  CAPTURE(first);
                  CAPTURE(split);
                  CAPTURE(std::string(k::decode_prefetch_name(hint)));
                  CHECK(std::memcmp(got.data(), want.data(), N * 4) == 0);
                }
            }
          }
        }
  }
}

TEST_CASE("decode of a row longer than 1024 blocks") {
  const size_t K = 1025 * 32 + 7, N = 33;  // 1026 blocks, the last partial
  for (DecodePrefetch hint : {DecodePrefetch::Nta, DecodePrefetch::None}) {
    const kt::DecodePrefetchGuard fixed(k::decode_prefetch_name(hint));
    for (WeightType t : {WeightType::Q8_0, WeightType::Q4_0}) {
      const auto w = awkward_weights(N, K, 11);
      std::vector<uint8_t> p(mmgpt::packed_weight_bytes(t, N, K));
      mmgpt::quantize_panels(w.data(), N, K, t, p.data());
      const auto x = kt::random_floats(K, -2.0f, 2.0f, 12);
      const Quantized xq = quantize_with(kd::scalar_quant_kernels(), x, 1, K);
      auto pick = [t](const kd::QuantKernels& qk) { return kt::quant_gemm(qk, t); };
      std::vector<float> want(N);
      pick(kd::scalar_quant_kernels())(xq.rows(), p.data(), nullptr, want.data(), 1, K, N, 0, mmgpt::panel_count(N),
                                       {});
      for (const kd::QuantKernels* qk : quant_sets()) {
        std::vector<float> got(N);
        pick (*qk)(xq.rows(), p.data(), nullptr, got.data(), 1, K, N, 0, mmgpt::panel_count(N), {});
        CAPTURE(std::string(qk->matmul.name));
        CAPTURE(std::string(type_name(t)));
        CAPTURE(std::string(k::decode_prefetch_name(hint)));
        CHECK(std::memcmp(got.data(), want.data(), N * 4) == 0);
      }
    }
  }
}

TEST_CASE("AMX tiles: every shape from a tile's rows up equals the reference bit for bit, every epilogue") {
  // Products of 16 rows and more run on tiles of 16 rows, their last M % 16
  // rows on the vector kernels; K of any number of blocks (one, odd, the last
  // partial); N of any number of panels (the last partial); two panel ranges.
  const auto sets = amx_sets();
  for (const kd::QuantKernels* s : sets) MESSAGE("AMX-INT8 kernels compared here: " << std::string(s->matmul.name));
  const Epilogue epilogues[] = {
      {Activation::None, false}, {Activation::None, true}, {Activation::GeluTanh, false}, {Activation::ReluSquared, true}};
  int compared = 0;
  for (WeightType t : {WeightType::Q8_0, WeightType::Q4_0})
    for (size_t K : {size_t{1}, size_t{32}, size_t{33}, size_t{95}, size_t{257}, size_t{768}})
      for (size_t N : {size_t{1}, size_t{16}, size_t{17}, size_t{50}}) {
        const auto w = awkward_weights(N, K, static_cast<uint32_t>(K + 5 * N));
        std::vector<uint8_t> p(mmgpt::packed_weight_bytes(t, N, K));
        mmgpt::quantize_panels(w.data(), N, K, t, p.data());
        const auto bias = kt::random_floats(N, -1.0f, 1.0f, 3);
        for (size_t M : {size_t{15}, size_t{16}, size_t{17}, size_t{32}, size_t{45}, size_t{70}}) {
          const auto x = kt::random_floats(M * K, -2.0f, 2.0f, static_cast<uint32_t>(M * 3 + K + N));
          const Quantized xq = quantize_with(kd::scalar_quant_kernels(), x, M, K);
          const auto y0 = kt::random_floats(M * N, -1.0f, 1.0f, 9);
          std::vector<float> pre(M * N);
          kt::quant_gemm(kd::scalar_quant_kernels(), t)(xq.rows(), p.data(), bias.data(), pre.data(), M, K, N, 0,
                                                        mmgpt::panel_count(N), {});
          for (const Epilogue& e : epilogues) {
            const float* b = e.accumulate ? nullptr : bias.data();
            std::vector<float> want = y0;
            kt::quant_gemm(kd::scalar_quant_kernels(), t)(xq.rows(), p.data(), b, want.data(), M, K, N, 0,
                                                          mmgpt::panel_count(N), e);
            for (const kd::QuantKernels* qk : sets) {
              auto gemm = kt::quant_gemm(*qk, t);
              std::vector<float> got = y0;
              const size_t split = mmgpt::panel_count(N) / 2;
              gemm(xq.rows(), p.data(), b, got.data(), M, K, N, 0, split, e);
              gemm(xq.rows(), p.data(), b, got.data(), M, K, N, split, mmgpt::panel_count(N), e);
              ++compared;
              size_t bad = 0;
              for (size_t i = 0; i < got.size(); ++i) {
                if (e.act == Activation::GeluTanh) {  // the fused vector GELU, as above
                  const double tol = 8 * kt::ulp(want[i]) + std::fabs(double(pre[i])) * 0x1p-21;
                  bad += !(std::fabs(double(got[i]) - want[i]) <= tol);
                } else {
                  bad += std::memcmp(&got[i], &want[i], 4) != 0;
                }
              }
              CAPTURE(std::string(qk->matmul.name));
              CAPTURE(std::string(type_name(t)));
              CAPTURE(M);
              CAPTURE(K);
              CAPTURE(N);
              CAPTURE(int(e.act));
              CHECK(bad == 0);
            }
          }
        }
      }
  MESSAGE(compared << " AMX products compared with the reference");
}

TEST_CASE("AMX tiles: rows in several row blocks, and a NaN row, equal the reference") {
  // K = 3072 holds 160 rows in a row block (amx_tile.hpp's budget): 350 rows
  // are three blocks, the last partial, then 14 rows on the vector kernels.
  const size_t M = 350, K = 3072, N = 17;
  for (WeightType t : {WeightType::Q8_0, WeightType::Q4_0}) {
    const auto w = awkward_weights(N, K, 21);
    std::vector<uint8_t> p(mmgpt::packed_weight_bytes(t, N, K));
    mmgpt::quantize_panels(w.data(), N, K, t, p.data());
    auto x = kt::random_floats(M * K, -2.0f, 2.0f, 22);
    x[40 * K + 100] = std::numeric_limits<float>::quiet_NaN();  // row 40: NaN sums; the others untouched
    const Quantized xq = quantize_with(kd::scalar_quant_kernels(), x, M, K);
    std::vector<float> want(M * N);
    kt::quant_gemm(kd::scalar_quant_kernels(), t)(xq.rows(), p.data(), nullptr, want.data(), M, K, N, 0,
                                                  mmgpt::panel_count(N), {});
    for (const kd::QuantKernels* qk : amx_sets()) {
      std::vector<float> got(M * N);
      kt::quant_gemm(*qk, t)(xq.rows(), p.data(), nullptr, got.data(), M, K, N, 0, mmgpt::panel_count(N), {});
      CAPTURE(std::string(qk->matmul.name));
      CAPTURE(std::string(type_name(t)));
      size_t bad = 0;
      for (size_t i = 0; i < got.size(); ++i)
        bad += i / N == 40 ? !std::isnan(got[i]) : std::memcmp(&got[i], &want[i], 4) != 0;
      CHECK(bad == 0);
    }
  }
}

namespace {
// The reference with one output of a q8_0 product moved by an ulp: a kernel the probe must refuse.
void off_by_an_ulp(const kd::PreparedX& x, const void* w, const float* bias, float* y, size_t M, size_t K, size_t N,
                   size_t p0, size_t p1, Epilogue e) {
  kd::scalar_quant_kernels().matmul.panels[static_cast<size_t>(WeightType::Q8_0)](x, w, bias, y, M, K, N, p0, p1, e);
  if (M > 20 && p0 == 0) y[20 * N + 3] = std::nextafter(y[20 * N + 3], 1e30f);
}
}  // namespace

TEST_CASE("the AMX-INT8 probe passes the tiles' bits and refuses any other") {
  CHECK(kd::amx_tile::int8_agrees(kd::emulated_amx_int8_kernels().matmul));
  for (const kd::QuantKernels* q : amx_sets()) {
    CAPTURE(std::string(q->matmul.name));
    CHECK(kd::amx_tile::int8_agrees(q->matmul));  // where the CPU has AMX-INT8, its tiles too
  }
  kd::MatmulKernels wrong = kd::scalar_quant_kernels().matmul;
  wrong.panels[static_cast<size_t>(WeightType::Q8_0)] = &off_by_an_ulp;
  CHECK_FALSE(kd::amx_tile::int8_agrees(wrong));
}

TEST_CASE("matmul_packed with quantized weights: threaded, any thread count, equals the reference") {
  for (WeightType t : {WeightType::Q8_0, WeightType::Q4_0})
    for (size_t M : {size_t{1}, size_t{4}, size_t{37}}) {
      const size_t K = 200, N = 300;
      CAPTURE(std::string(type_name(t)));
      CAPTURE(M);
      const auto w = awkward_weights(N, K, 11);
      std::vector<uint8_t> p(mmgpt::packed_weight_bytes(t, N, K));
      mmgpt::quantize_panels(w.data(), N, K, t, p.data());
      const auto x = kt::random_floats(M * K, -2.0f, 2.0f, 12);
      const auto bias = kt::random_floats(N, -1.0f, 1.0f, 13);
      std::vector<float> want(M * N);
      k::scalar::matmul_packed(x.data(), p.data(), t, bias.data(), want.data(), M, K, N);
      for (int threads : {1, 2, 5}) {
        tbb::global_control c(tbb::global_control::max_allowed_parallelism, threads);
        std::vector<float> got(M * N);
        k::matmul_packed(x.data(), p.data(), t, bias.data(), got.data(), M, K, N);
        CAPTURE(threads);
        CHECK(std::memcmp(got.data(), want.data(), got.size() * 4) == 0);
      }
    }
}
