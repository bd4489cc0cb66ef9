#pragma once
// Helpers shared by the tests/test_kernels_*.cpp executables: deterministic
// data, ulp arithmetic, and a loop over every SIMD instantiation the CPU runs.
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <doctest/doctest.h>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "decode_prefetch_guard.hpp"
#include "kernels/kernels.hpp"
#include "kernels/registry.hpp"

namespace kt {

#if defined(__x86_64__)
// F16C (CPUID leaf 1, ECX bit 29), read directly: clang 14, which builds the
// sanitizer and fuzz trees, has no "f16c" for __builtin_cpu_supports.
inline bool cpu_has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}
#endif

// y[M, N] = x[M, K] W^T (+ b) for a row-major W [N, K]: W packed into the
// panels the engine multiplies by (panel_layout.hpp), then matmul_packed.
inline void matmul_rowmajor(const float* x, const float* w, const float* b, float* y, size_t M, size_t K, size_t N) {
  std::vector<float> wp(mmgpt::panel_floats(N, K));
  if (K > 0) mmgpt::pack_panels(w, N, K, wp.data());
  mmgpt::kernels::matmul_packed(x, wp.data(), b, y, M, K, N);
}

// Unit roundoff of float: every correctly rounded operation has relative
// error at most u.
inline constexpr double kU = 0x1p-24;

// The sizes the SIMD paths are exercised on: around every vector width
// (4 for NEON, 8 for AVX2, 16 for AVX-512) and their unrolled multiples.
inline const std::vector<size_t> kSizes = {1,  2,  3,  4,  5,  7,   8,   9,   15,  16,   17,  31,
                                           32, 33, 63, 64, 65, 127, 128, 257, 769, 1000, 3073};

// Distance between |v| and the next float up; the size of one ulp at v.
inline double ulp(double v) {
  const float f = static_cast<float>(std::fabs(v));
  if (!std::isfinite(f)) return std::numeric_limits<double>::infinity();
  return static_cast<double>(std::nextafter(f, std::numeric_limits<float>::infinity())) - f;
}

inline std::vector<float> random_floats(size_t n, float lo, float hi, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

// Small integers: every product and partial sum of a few thousand of them is
// exact in float, so any summation order must give the bit-identical result.
// A SIMD path that drops or repeats an element cannot hide in a tolerance.
inline std::vector<float> random_ints(size_t n, int lo, int hi, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(dist(gen));
  return v;
}

// Restores the instantiation in use when a test that forces one ends.
struct IsaGuard {
  std::string saved{mmgpt::kernels::isa_name()};
  bool saved_bf16dot = mmgpt::kernels::bf16_isa_name() != "f32";
  ~IsaGuard() { mmgpt::kernels::force_isa(saved, saved_bf16dot); }
};

// Runs body() once for every SIMD instantiation this CPU can run, with it
// forced, and logs which ran and which were skipped. Returns how many ran.
template <class F>
int for_each_simd_isa(F body) {
  IsaGuard guard;
  int ran = 0;
  for (std::string_view name : {"avx512", "avx2", "neon"}) {
    if (!mmgpt::kernels::force_isa(name)) {
      MESSAGE("skipping ISA " << name << ": not supported by this CPU/build");
      continue;
    }
    MESSAGE("testing ISA " << name);
    CAPTURE(name);
    REQUIRE(mmgpt::kernels::isa_name() == name);
    body(name);
    ++ran;
  }
  return ran;
}

// The bf16 dot-product kernels matmul_packed runs bf16 weights on in the set
// in use (activations rounded to bf16), or null where it widens them.
inline const mmgpt::kernels::detail::MatmulKernels* active_bf16dot() {
  namespace kd = mmgpt::kernels::detail;
  const kd::MatmulKernels* k = kd::active_set().matmul[static_cast<size_t>(mmgpt::WeightType::BF16)];
  return k->x == kd::XForm::Bf16Rows ? k : nullptr;
}
inline bool bf16dot_active() { return active_bf16dot() != nullptr; }

// The scalar set that defines `set`'s results (itself for a reference).
inline const mmgpt::kernels::detail::MatmulKernels& bf16dot_reference_of(
    const mmgpt::kernels::detail::MatmulKernels& set) {
  return set.reference ? *set.reference : set;
}

// A bf16 dot-product set's panels [p0, p1) over x already rounded to bf16 rows.
inline void bf16dot_panels(const mmgpt::kernels::detail::MatmulKernels& set, const uint16_t* xr, const uint16_t* wp,
                           const float* bias, float* y, size_t M, size_t K, size_t N, size_t p0, size_t p1,
                           mmgpt::kernels::Epilogue e) {
  mmgpt::kernels::detail::PreparedX x;
  x.bf16 = xr;
  set.panels[static_cast<size_t>(mmgpt::WeightType::BF16)](x, wp, bias, y, M, K, N, p0, p1, e);
}

// A quantized set's panels [p0, p1) of weight type t over x in q8 blocks.
inline void quant_panels(const mmgpt::kernels::detail::QuantKernels& set, mmgpt::WeightType t,
                         const mmgpt::QuantizedRows& xq, const uint8_t* wp, const float* bias, float* y, size_t M,
                         size_t K, size_t N, size_t p0, size_t p1, mmgpt::kernels::Epilogue e) {
  mmgpt::kernels::detail::PreparedX x;
  x.q8 = xq;
  set.matmul.panels[static_cast<size_t>(t)](x, wp, bias, y, M, K, N, p0, p1, e);
}

// A quantized set's kernel for weight type t, called as a typed kernel.
inline auto quant_gemm(const mmgpt::kernels::detail::QuantKernels& set, mmgpt::WeightType t) {
  return [&set, t](const mmgpt::QuantizedRows& xq, const uint8_t* wp, const float* bias, float* y, size_t M, size_t K,
                   size_t N, size_t p0, size_t p1,
                   mmgpt::kernels::Epilogue e) { quant_panels(set, t, xq, wp, bias, y, M, K, N, p0, p1, e); };
}

// The active set's f32 panel kernels (f32, and bf16 / f16 widened to f32),
// panels [p0, p1) of weight type t.
inline void widening_panels(mmgpt::WeightType t, const float* x, const void* wp, const float* bias, float* y, size_t M,
                            size_t K, size_t N, size_t p0, size_t p1, mmgpt::kernels::Epilogue e) {
  namespace kd = mmgpt::kernels::detail;
  kd::PreparedX px;
  px.f32 = x;
  const kd::MatmulKernels& wide = *kd::active_set().matmul[static_cast<size_t>(mmgpt::WeightType::F32)];
  wide.panels[static_cast<size_t>(t)](px, wp, bias, y, M, K, N, p0, p1, e);
}

// What matmul_packed computes for bf16 weights (packed panels wp) when
// bf16dot_active(): the sums of the reference of the set in use (or of `ref`:
// kernels/scalar/bf16dot.cpp, scalar/bf16dot_arm.cpp) with the bias, then the
// active instantiation's vector GELU (the one the kernels fuse, as
// kernels::gelu_*) and the residual add, so bit for bit.
inline std::vector<float> bf16dot_expected(const float* x, const uint16_t* wp, const float* bias, std::vector<float> y,
                                           size_t M, size_t K, size_t N, mmgpt::kernels::Epilogue e,
                                           const mmgpt::kernels::detail::MatmulKernels* ref = nullptr) {
  namespace k = mmgpt::kernels;
  namespace kd = mmgpt::kernels::detail;
  if (ref == nullptr) {
    const kd::MatmulKernels* active = active_bf16dot();
    ref = active ? &bf16dot_reference_of(*active) : &kd::scalar_bf16dot_kernels();
  }
  std::vector<uint16_t> xr(M * kd::bf16dot_row_elems(K));
  kd::bf16dot_round_rows(x, M, K, xr.data());
  std::vector<float> v(M * N);
  bf16dot_panels(*ref, xr.data(), wp, bias, v.data(), M, K, N, 0, mmgpt::panel_count(N), {});
  if (e.act == k::Activation::GeluErf) k::gelu_erf(v.data(), v.size());
  if (e.act == k::Activation::GeluTanh) k::gelu_tanh(v.data(), v.size());
  if (e.act == k::Activation::ReluSquared) k::scalar::relu_squared(v.data(), v.size());  // exact everywhere
  for (size_t i = 0; i < v.size(); ++i) y[i] = e.accumulate ? y[i] + v[i] : v[i];
  return y;
}

}  // namespace kt
