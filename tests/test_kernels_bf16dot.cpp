// The bf16 dot-product matmul (bf16 weights times activations rounded to
// bf16), in three arithmetics: VDPBF16PS's (kernels/scalar/bf16dot.cpp defines
// it, x86/avx512/bf16dot.cpp runs it where the CPU has AVX512_BF16), AMX
// TDPBF16PS's (scalar/bf16dot.cpp too; x86/avx512/amx.cpp runs it on tiles
// where the CPU has AMX-BF16, on FMAs on any AVX-512 VNNI CPU, and
// amx_tile_emulated.hpp on emulated tiles everywhere) and Arm BFDOT's
// (scalar/bf16dot_arm.cpp, arm/neon/bf16dot.cpp where the CPU has BF16; run
// here under qemu-aarch64 by scripts/test-aarch64.sh):
// - the rounding of x: nearest even, NaN stays NaN, f32 subnormals to zero;
// - each reference's step is its instruction's (VDPBF16PS: odd element of a
//   pair first, round to nearest; TDPBF16PS: an even and an odd chain per 16
//   pairs, then their sum; BFDOT: the pair summed first, round to odd; all
//   DAZ inputs, FTZ results), on cases built so that each rule shows;
//   every kernel set the CPU runs with that arithmetic gives the same (so the
//   instruction does too);
// - every set equals its reference bit for bit on awkward shapes, split panel
//   ranges and every epilogue (a fused GELU: the reference's sums through the
//   vector GELU the kernels fuse), also on data full of special values;
// - each reference against an exact evaluation, within its rounding bound;
// - the public matmul_packed: equal to the reference for 1, 2 and 5 threads,
//   and a row's result does not depend on M.
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <tbb/global_control.h>
#include <tbb/task_arena.h>

#include "core/half.hpp"
#include "kernels/parallel.hpp"
#include "amx_tile_emulated.hpp"
#include "kernels_testing.hpp"

namespace k = mmgpt::kernels;
namespace kd = mmgpt::kernels::detail;
using k::Activation;
using k::Epilogue;

namespace {

std::vector<uint16_t> round_rows(const std::vector<float>& x, size_t M, size_t K) {
  std::vector<uint16_t> r(M * kd::bf16dot_row_elems(K), 0xdead);
  kd::bf16dot_round_rows(x.data(), M, K, r.data());
  return r;
}

// Row-major W[N, K] to bf16 panel pairs.
std::vector<uint16_t> pack_bf16(const std::vector<float>& w, size_t N, size_t K) {
  std::vector<uint16_t> h(mmgpt::panel_floats(N, K));
  mmgpt::pack_half_panels(w.data(), N, K, mmgpt::WeightType::BF16, h.data());
  return h;
}

// Equal bits, or both NaN (the payload of a NaN result is not specified).
bool same(float a, float b) {
  return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b) || (std::isnan(a) && std::isnan(b));
}

size_t count_differ(const std::vector<float>& a, const std::vector<float>& b) {
  size_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += !same(a[i], b[i]);
  return n;
}

// Values spread over the whole bf16 range: random bits with a few exponents
// made common (tiny: products and sums underflow; huge: overflow), and some
// zeros, infinities and NaNs.
std::vector<float> special_floats(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<float> v(n);
  for (auto& f : v) {
    uint32_t u = gen();
    switch (gen() % 8) {
      case 0: u = (u & 0x807fffffu) | ((gen() % 4) << 23); break;        // subnormal or near the bottom
      case 1: u = (u & 0x807fffffu) | ((60 + gen() % 8) << 23); break;   // about 2^-64: products underflow
      case 2: u = (u & 0x807fffffu) | ((250 + gen() % 4) << 23); break;  // huge: products overflow
      case 3: u &= 0x80000000u; break;                                   // signed zero
      case 4: u = (gen() % 16 == 0) ? (u | 0x7f800000u) : (u & 0x807fffffu) | (127u << 23); break;
      default: u = (u & 0x807fffffu) | ((110 + gen() % 30) << 23); break;  // ordinary
    }
    f = std::bit_cast<float>(u);
  }
  return v;
}

// The sets the CPU runs, then the AMX tiles over emulated operations.
std::vector<const kd::MatmulKernels*> bf16_sets() {
  auto sets = kd::runnable_bf16dot_kernels();
  sets.push_back(&kd::emulated_amx_bf16_kernels());
  return sets;
}

const std::vector<size_t> kKs = {1, 2, 3, 31, 33, 95, 257, 768};
const std::vector<size_t> kNs = {1, 15, 16, 17, 50};

}  // namespace

TEST_CASE("x to bf16: nearest even, NaN stays NaN (quiet), infinities kept, f32 subnormals to a signed zero") {
  size_t bad = 0, checked = 0;
  std::vector<float> x;
  for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 4093) x.push_back(std::bit_cast<float>(uint32_t(u)));
  for (float f :
       {0.0f, -0.0f, 1.0f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
        std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::signaling_NaN(),
        std::numeric_limits<float>::denorm_min(), -std::numeric_limits<float>::denorm_min(),
        std::bit_cast<float>(0x007fffffu), std::bit_cast<float>(0x80800000u), 3.4028235e38f,
        std::bit_cast<float>(0x3f808000u), std::bit_cast<float>(0x3f818000u), std::bit_cast<float>(0x3f808001u)})
    x.push_back(f);
  const auto r = round_rows(x, 1, x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const uint32_t u = std::bit_cast<uint32_t>(x[i]);
    uint16_t want;
    if ((u & 0x7f800000u) == 0)
      want = uint16_t((u >> 16) & 0x8000u);  // zero, subnormal
    else if ((u & 0x7fffffffu) > 0x7f800000u)
      want = uint16_t((u >> 16) | 0x0040u);  // NaN, made quiet
    else
      want = mmgpt::f32_to_bf16(x[i]);  // RNE (test_kernels_half)
    bad += r[i] != want;
    ++checked;
  }
  CHECK(bad == 0);
  MESSAGE(checked << " values rounded");
  // Named cases (the last values of x).
  const size_t e = x.size();
  CHECK(r[e - 4] == 0x7f80);  // the largest float rounds up to infinity
  CHECK(r[e - 3] == 0x3f80);  // 1 + 2^-8 is a tie: to even (down)
  CHECK(r[e - 2] == 0x3f82);  // 1 + 3 * 2^-8 is a tie: to even (up)
  CHECK(r[e - 1] == 0x3f81);  // just past the tie: up
  CHECK(r[e - 7] == 0x8000);  // -denorm_min: -0
  CHECK(r[e - 6] == 0x0000);  // the largest subnormal: 0 (not the smallest normal)
  CHECK(r[e - 9] == 0x7fe0);  // a signaling NaN: quiet
  // Rows of odd K get a zero after their last value.
  const std::vector<float> three{1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f};
  CHECK(round_rows(three, 2, 3) == std::vector<uint16_t>{0x3f80, 0x4000, 0x4040, 0, 0x4080, 0x40a0, 0x40c0, 0});
}

namespace {

// A one-row, one-output product built so that one rule of an arithmetic shows.
struct StepCase {
  const char* what;
  std::vector<float> x, w;
  float want;
};

// Every runnable set with `ref`'s arithmetic (ref included) gives each case's value.
void check_step_cases(const std::vector<StepCase>& cases, const kd::MatmulKernels& ref) {
  for (const StepCase& c : cases) {
    CAPTURE(std::string(c.what));
    const size_t K = c.x.size();
    const auto xr = round_rows(c.x, 1, K);
    const auto wp = pack_bf16(c.w, 1, K);
    for (const kd::MatmulKernels* set : bf16_sets()) {
      if (&kt::bf16dot_reference_of(*set) != &ref) continue;
      CAPTURE(std::string(set->name));
      float y = 99.0f;
      kt::bf16dot_panels(*set, xr.data(), wp.data(), nullptr, &y, 1, K, 1, 0, 1, {});
      CHECK(same(y, c.want));
    }
  }
}

// Cases where both arithmetics give the same: infinities, NaNs, x's rounding.
std::vector<StepCase> both_arithmetics() {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  return {
      {"inf times zero", {inf}, {0.0f}, nan},
      {"inf minus inf", {inf, 1.0f}, {1.0f, -inf}, nan},
      {"inf", {-inf, 2.0f}, {3.0f, 1.0f}, -inf},
      {"NaN in x", {nan, 1.0f, 1.0f}, {1.0f, 1.0f, 1.0f}, nan},
      {"NaN in w", {1.0f, 1.0f, 1.0f}, {1.0f, 1.0f, nan}, nan},
      {"x rounded to bf16 first", {1.0f + 0x1p-8f + 0x1p-20f}, {1.0f}, 1.0f + 0x1p-7f},
  };
}

}  // namespace

TEST_CASE("the reference's step is VDPBF16PS's as the SDM defines it, and every kernel set agrees") {
  const float inf = std::numeric_limits<float>::infinity();
  check_step_cases(
      {
          // Pairs (k0, k1), (k2, k3) are summed k1, k0, k3, k2: 2^24, then + 1 (a tie: stays 2^24),
          // then - 2^24 (0), then + 1. In index order it would be 0.
          {"odd element of a pair first", {1.0f, 4096.0f, 1.0f, -4096.0f}, {1.0f, 4096.0f, 1.0f, 4096.0f}, 1.0f},
          // A subnormal bf16 weight (2^-133) reads as zero, though its product with 2^100 is normal.
          {"DAZ on the weights", {0x1p100f}, {std::bit_cast<float>(0x00010000u)}, 0.0f},
          // 2^-70 * -2^-70 = -2^-140 is subnormal: flushed to -0 (its sign kept).
          {"FTZ on a result, sign kept", {-0x1p-70f}, {0x1p-70f}, -0.0f},
          // The same -0, then the zero pad pair: -0 + 0 * 0 = +0, and + 0 * 1.
          {"FTZ then zero products", {-0x1p-70f, 0.0f, 0.0f}, {0x1p-70f, 1.0f, 1.0f}, 0.0f},
          // 1.5 * 2^-126 (normal), then - 2^-126: 2^-127 is subnormal, flushed to +0.
          {"FTZ of a sum", {-0x1p-63f, 0x1.8p-63f}, {0x1p-63f, 0x1p-63f}, 0.0f},
          {"overflow to infinity", {0x1p100f, 0x1p100f}, {0x1p100f, 0x1p100f}, inf},
      },
      kd::scalar_bf16dot_kernels());
  check_step_cases(both_arithmetics(), kd::scalar_bf16dot_kernels());
}

TEST_CASE("the TDPBF16PS reference's arithmetic is AMX's as the SDM defines it, and every kernel set agrees") {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> chunk_x(34, 0.0f), chunk_w(34, 0.0f);
  // Pair 0's even product 2^24 in the first chunk of 16 pairs; pair 16 (the
  // second chunk) sums 1 + 1 = 2 on its own, so 2^24 + 2. In one chunk the
  // even chain would round 2^24 + 1 to 2^24 (a tie), and then + 1 again: 2^24.
  chunk_x[0] = chunk_w[0] = 4096.0f;
  chunk_x[32] = chunk_w[32] = chunk_x[33] = chunk_w[33] = 1.0f;
  check_step_cases(
      {
          // Products 1, 2^24, 1, -2^24: even chain 1 + 1 = 2, odd 2^24 - 2^24 = 0: 2.
          // VDPBF16PS's single chain, odd first, gives 1; BFDOT's 3.
          {"an even and an odd chain", {1.0f, 4096.0f, 1.0f, -4096.0f}, {1.0f, 4096.0f, 1.0f, 4096.0f}, 2.0f},
          {"a chain per 16 pairs", chunk_x, chunk_w, 16777218.0f},
          // A subnormal bf16 weight (2^-133) reads as zero, though its product with 2^100 is normal.
          {"DAZ on the weights", {0x1p100f}, {std::bit_cast<float>(0x00010000u)}, 0.0f},
          // -2^-140 in the even chain is flushed to -0; the odd chain adds 0 * 0 (the pad): -0 + +0 = +0.
          {"FTZ in a chain", {-0x1p-70f}, {0x1p-70f}, 0.0f},
          // Even 1.5 * 2^-126, odd -2^-126: their sum 2^-127 is subnormal, flushed to +0.
          {"FTZ of the chains' sum", {0x1.8p-63f, -0x1p-63f}, {0x1p-63f, 0x1p-63f}, 0.0f},
          {"overflow to infinity", {0x1p100f, 0x1p100f}, {0x1p100f, 0x1p100f}, inf},
      },
      kd::scalar_tdpbf16ps_kernels());
  check_step_cases(both_arithmetics(), kd::scalar_tdpbf16ps_kernels());
}

TEST_CASE("AMX-BF16 tiles: every shape from a tile's rows up equals the TDPBF16PS reference bit for bit") {
  // Tiles of 16 rows where K is a multiple of 32 (their chunk), the last
  // M % 16 rows and other K on FMAs; two panel ranges, one starting at an
  // odd panel (a pair split between threads); random and special values.
  std::vector<const kd::MatmulKernels*> sets;
  for (const kd::MatmulKernels* s : bf16_sets())
    if (&kt::bf16dot_reference_of(*s) == &kd::scalar_tdpbf16ps_kernels() && s->reference) sets.push_back(s);
  for (const kd::MatmulKernels* s : sets) MESSAGE("TDPBF16PS-arithmetic kernels compared here: " << std::string(s->name));
  // GELU: the reference's sums through the vector GELU the kernels fuse (bf16dot_expected), so bit for bit too.
  const Epilogue epilogues[] = {
      {Activation::None, false}, {Activation::None, true}, {Activation::ReluSquared, false}, {Activation::GeluTanh, true}};
  size_t compared = 0;
  for (bool special : {false, true})
    for (size_t K : {size_t{31}, size_t{32}, size_t{64}, size_t{96}, size_t{768}})
      for (size_t N : {size_t{1}, size_t{17}, size_t{50}}) {
        const uint32_t seed = static_cast<uint32_t>(K * 7 + N + special);
        const auto w = special ? special_floats(N * K, seed) : kt::random_floats(N * K, -1.0f, 1.0f, seed);
        const auto wp = pack_bf16(w, N, K);
        const auto bias = kt::random_floats(N, -1.0f, 1.0f, seed + 1);
        for (size_t M : {size_t{16}, size_t{17}, size_t{32}, size_t{47}, size_t{80}}) {
          const auto x =
              special ? special_floats(M * K, seed + 2 + M) : kt::random_floats(M * K, -2.0f, 2.0f, seed + 2 + M);
          const auto xr = round_rows(x, M, K);
          const auto y0 = kt::random_floats(M * N, -1.0f, 1.0f, seed + 3);
          for (const Epilogue& e : epilogues) {
            const float* b = e.accumulate ? nullptr : bias.data();
            const auto want = kt::bf16dot_expected(x.data(), wp.data(), b, y0, M, K, N, e, &kd::scalar_tdpbf16ps_kernels());
            for (const kd::MatmulKernels* set : sets) {
              std::vector<float> got = y0;
              const size_t split = mmgpt::panel_count(N) > 2 ? 1 : 0;
              kt::bf16dot_panels(*set, xr.data(), wp.data(), b, got.data(), M, K, N, 0, split, e);
              kt::bf16dot_panels(*set, xr.data(), wp.data(), b, got.data(), M, K, N, split, mmgpt::panel_count(N), e);
              ++compared;
              CAPTURE(std::string(set->name));
              CAPTURE(special);
              CAPTURE(M);
              CAPTURE(K);
              CAPTURE(N);
              CAPTURE(int(e.act));
              CHECK(count_differ(got, want) == 0);
            }
          }
        }
      }
  MESSAGE(compared << " products compared");
}

TEST_CASE("the AMX-BF16 probe tells TDPBF16PS's arithmetic from the other orders of rounding") {
  CHECK(kd::amx_tile::bf16_agrees(kd::emulated_amx_bf16_kernels()));
  CHECK(kd::amx_tile::bf16_agrees(kd::scalar_tdpbf16ps_kernels()));
  for (const kd::MatmulKernels* s : kd::runnable_bf16dot_kernels())
    if (&kt::bf16dot_reference_of(*s) == &kd::scalar_tdpbf16ps_kernels()) {
      CAPTURE(std::string(s->name));
      CHECK(kd::amx_tile::bf16_agrees(*s));
    }
  CHECK_FALSE(kd::amx_tile::bf16_agrees(kd::scalar_bf16dot_kernels()));      // one chain, odd element first
  CHECK_FALSE(kd::amx_tile::bf16_agrees(kd::scalar_arm_bf16dot_kernels()));  // each pair summed first
}

TEST_CASE("AMX-BF16: used only where TDPBF16PS gives its reference's bits") {
  // Where the CPU has AMX-BF16, a probe product (x86/avx512/amx.cpp) decides
  // whether the tiles are used: the SDM's description of TDPBF16PS's
  // roundings has not been checked on hardware by this project. Either way
  // the kernels in use give their reference's bits (the cases above); this
  // says which way this CPU went.
  const std::string amx = k::describe_amx();
  MESSAGE("AMX tiles: " << amx);
  WARN_MESSAGE(amx.find("does not give its reference's bits") == std::string::npos,
               "TDPBF16PS differs from the SDM's arithmetic on this CPU: bf16 stays off the tiles");
}

TEST_CASE("the Arm reference's step is BFDOT's as the Arm ARM defines it, and every kernel set agrees") {
  const float inf = std::numeric_limits<float>::infinity();
  check_step_cases(
      {
          // 1 + 2^24 is summed first (pair 0): not a float, rounded to odd: 2^24 + 2; then
          // + (1 - 2^24) (pair 1, exact) gives 3. VDPBF16PS gives 1 (the SDM case above).
          {"pair summed first, rounded to odd", {1.0f, 4096.0f, 1.0f, -4096.0f}, {1.0f, 4096.0f, 1.0f, 4096.0f}, 3.0f},
          // 1 + 2^-25 lies a quarter of an ulp above 1: to nearest 1, to odd 1 + 2^-23.
          {"round to odd, not to nearest", {1.0f, 0x1p-25f}, {1.0f, 1.0f}, 1.0f + 0x1p-23f},
          // -(1 + 2^-25): truncated toward zero to -1, then made odd.
          {"round to odd, negative", {-1.0f, -0x1p-25f}, {1.0f, 1.0f}, -(1.0f + 0x1p-23f)},
          // Exact sums keep their value (1.5 is even in its last bit).
          {"exact sums unchanged", {1.0f, 0.5f}, {1.0f, 1.0f}, 1.5f},
          // A subnormal bf16 weight (2^-133) reads as zero, though its product with 2^100 is normal.
          {"DAZ on the weights", {0x1p100f}, {std::bit_cast<float>(0x00010000u)}, 0.0f},
          // 2^-70 * -2^-70 = -2^-140 is subnormal: flushed to -0, and -0 + +0 (the pad) is +0.
          {"FTZ on a product", {-0x1p-70f}, {0x1p-70f}, 0.0f},
          // 1.5 * 2^-126 - 2^-126 = 2^-127 (the pair's sum) is subnormal: +0.
          {"FTZ of a sum", {-0x1p-63f, 0x1.8p-63f}, {0x1p-63f, 0x1p-63f}, 0.0f},
          // 2^127 + 2^127 = 2^128 overflows: infinity, not the largest float.
          {"overflow to infinity", {0x1p100f, 0x1p100f}, {0x1p27f, 0x1p27f}, inf},
      },
      kd::scalar_arm_bf16dot_kernels());
  check_step_cases(both_arithmetics(), kd::scalar_arm_bf16dot_kernels());
}

TEST_CASE("every bf16 dot-product set equals the reference bit for bit, every shape and epilogue") {
  // (The emulated tiles take no tile below 16 rows: their cases are below.)
  const auto sets = kd::runnable_bf16dot_kernels();
  for (const kd::MatmulKernels* s : sets) MESSAGE("bf16 dot-product kernels runnable here: " << std::string(s->name));
  const Epilogue epilogues[] = {{Activation::None, false},     {Activation::None, true},
                                {Activation::GeluErf, false},  {Activation::GeluErf, true},
                                {Activation::GeluTanh, false}, {Activation::GeluTanh, true}};
  size_t compared = 0, differ = 0, gelu_far = 0;
  // Decode (M = 1) runs on FMAs when the thread budget is one and on
  // VDPBF16PS otherwise (x86/avx512/bf16dot.cpp): both must give the bits.
  auto sweep = [&] {
    for (bool special : {false, true})
      for (size_t K : kKs)
        for (size_t N : kNs) {
          const uint32_t seed = static_cast<uint32_t>(K * 131 + N + special * 7);
          const auto w = special ? special_floats(N * K, seed) : kt::random_floats(N * K, -1.0f, 1.0f, seed);
          const auto wp = pack_bf16(w, N, K);
          const auto bias = kt::random_floats(N, -1.0f, 1.0f, seed + 1);
          for (size_t M = 1; M <= 13; ++M) {
            const auto x =
                special ? special_floats(M * K, seed + 2 + M) : kt::random_floats(M * K, -2.0f, 2.0f, seed + 2 + M);
            const auto xr = round_rows(x, M, K);
            const auto y0 = kt::random_floats(M * N, -1.0f, 1.0f, seed + 3);
            for (const Epilogue& e : epilogues) {
              const float* b = (M + int(e.act)) % 2 ? bias.data() : nullptr;
              for (const kd::MatmulKernels* set : sets) {
                const kd::MatmulKernels& ref = kt::bf16dot_reference_of(*set);
                const auto want = kt::bf16dot_expected(x.data(), wp.data(), b, y0, M, K, N, e, &ref);
                std::vector<float> got = y0;
                // Two panel ranges, as threads would split them.
                const size_t split = mmgpt::panel_count(N) / 2;
                kt::bf16dot_panels(*set, xr.data(), wp.data(), b, got.data(), M, K, N, 0, split, e);
                kt::bf16dot_panels(*set, xr.data(), wp.data(), b, got.data(), M, K, N, split, mmgpt::panel_count(N), e);
                ++compared;
                if (set == &ref && e.act != Activation::None) {
                  // The reference's own GELU is the scalar one (std::erf / std::tanh):
                  // within test_kernels_simd.cpp's bound of the vector one, twice over.
                  if (special) continue;
                  const auto pre = kt::bf16dot_expected(x.data(), wp.data(), b, y0, M, K, N, {}, &ref);
                  for (size_t i = 0; i < got.size(); ++i) {
                    const double tol =
                        8 * kt::ulp(want[i]) + std::fabs(pre[i]) * 0x1p-21 + (e.accumulate ? kt::ulp(want[i]) : 0.0);
                    gelu_far += !(std::fabs(double(got[i]) - want[i]) <= tol);
                  }
                  continue;
                }
                const size_t d = count_differ(got, want);
                if (d != 0) {
                  CAPTURE(std::string(set->name));
                  CAPTURE(special);
                  CAPTURE(M);
                  CAPTURE(K);
                  CAPTURE(N);
                  CAPTURE(int(e.act));
                  CAPTURE(e.accumulate);
                  CHECK(d == 0);
                }
                differ += d;
              }
            }
          }
        }
  };
  for (int budget : {1, 2}) {
    CAPTURE(budget);
    tbb::global_control c(tbb::global_control::max_allowed_parallelism, budget);
    tbb::task_arena arena(budget);
    arena.execute([&] {
      REQUIRE(mmgpt::thread_budget() == size_t(budget));  // so both decode paths run
      sweep();
    });
  }
  CHECK(differ == 0);
  CHECK(gelu_far == 0);
  MESSAGE(compared << " products compared over " << sets.size() << " kernel sets");
}

TEST_CASE("each reference against the exact product of the rounded values, and of the unrounded x") {
  // Per rounding: to nearest at most u |result|, to odd under 2u |result|
  // (BFDOT rounds the pair's sum and the accumulation: two per pair).
  struct Ref {
    const kd::MatmulKernels* set;
    double per_k;  // bound on the roundings per k, in units of u sum |p|
  };
  // TDPBF16PS's chunked sum: a product passes at most 16 chain roundings, the
  // chains' sum and one per chunk after it, fewer than K + 1 in all.
  for (const Ref ref : {Ref{&kd::scalar_bf16dot_kernels(), 1.0}, Ref{&kd::scalar_tdpbf16ps_kernels(), 1.0},
                        Ref{&kd::scalar_arm_bf16dot_kernels(), 2.0}})
    for (size_t K : {size_t{1}, size_t{33}, size_t{257}, size_t{768}, size_t{3072}}) {
      CAPTURE(std::string(ref.set->name));
      CAPTURE(K);
      const size_t M = 3, N = 21;
      const auto x = kt::random_floats(M * K, -2.0f, 2.0f, 40), w = kt::random_floats(N * K, -1.0f, 1.0f, 41);
      const auto xr = round_rows(x, M, K);
      const auto wp = pack_bf16(w, N, K);
      std::vector<float> y(M * N);
      kt::bf16dot_panels(*ref.set, xr.data(), wp.data(), nullptr, y.data(), M, K, N, 0, mmgpt::panel_count(N), {});
      const size_t Kp = kd::bf16dot_row_elems(K);
      size_t bad = 0;
      for (size_t m = 0; m < M; ++m)
        for (size_t n = 0; n < N; ++n) {
          double exact = 0, mag = 0, unrounded = 0, umag = 0;
          for (size_t kk = 0; kk < K; ++kk) {
            const double wv = mmgpt::bf16_to_f32(wp[mmgpt::half_panel_index(N, K, n, kk)]);
            const double p = double(mmgpt::bf16_to_f32(xr[m * Kp + kk])) * wv;
            exact += p, mag += std::fabs(p);
            unrounded += double(x[m * K + kk]) * wv, umag += std::fabs(double(x[m * K + kk]) * wv);
          }
          // K roundings of partial sums each at most u |partial| <= u sum |p|, plus the flushes
          // (none here: every value is far from the bottom of the range).
          const double got = y[m * N + n];
          const double rounding = (double(K) + 1) * ref.per_k * kt::kU * mag + double(K) * 0x1p-126;
          bad += !(std::fabs(got - exact) <= rounding);
          // Rounding x to bf16 (8 significant bits): each |x - x^| <= 2^-8 |x|.
          bad += !(std::fabs(got - unrounded) <= 0x1p-8 * umag + rounding);
        }
      CHECK(bad == 0);
    }
}

TEST_CASE("matmul_packed with bf16 weights on the bf16 dot product: any thread count, any M, equals the reference") {
  kt::for_each_simd_isa([](std::string_view) {
    if (!kt::bf16dot_active()) {
      MESSAGE("no bf16 dot product in this instantiation: bf16 weights are widened to f32 (test_kernels_half)");
      return;
    }
    CHECK(k::bf16_isa_name() != "f32");
    for (size_t M : {size_t{1}, size_t{4}, size_t{37}, size_t{300}})
      for (size_t K : {size_t{201}, size_t{768}}) {
        const size_t N = 300;
        CAPTURE(M);
        CAPTURE(K);
        const auto w = kt::random_floats(N * K, -1.0f, 1.0f, 50), x = kt::random_floats(M * K, -2.0f, 2.0f, 51);
        const auto bias = kt::random_floats(N, -1.0f, 1.0f, 52);
        const auto wp = pack_bf16(w, N, K);
        const Epilogue e{Activation::GeluTanh, false};
        const auto want = kt::bf16dot_expected(x.data(), wp.data(), bias.data(), std::vector<float>(M * N), M, K, N, e);
        for (int threads : {1, 2, 5}) {
          CAPTURE(threads);
          tbb::global_control c(tbb::global_control::max_allowed_parallelism, threads);
          std::vector<float> got(M * N);
          k::matmul_packed(x.data(), wp.data(), mmgpt::WeightType::BF16, bias.data(), got.data(), M, K, N, e);
          CHECK(count_differ(got, want) == 0);
        }
        // One row at a time (decode) gives the rows of the whole product (prefill).
        size_t differ = 0;
        std::vector<float> one(N);
        for (size_t m = 0; m < M; m += 7) {
          k::matmul_packed(x.data() + m * K, wp.data(), mmgpt::WeightType::BF16, bias.data(), one.data(), 1, K, N, e);
          differ += count_differ(one, std::vector<float>(want.begin() + m * N, want.begin() + (m + 1) * N));
        }
        CHECK(differ == 0);
      }
  });
}
