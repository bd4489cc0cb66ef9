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

#include "kernels/kernels.hpp"

namespace kt {

#if defined(__x86_64__)
// F16C (CPUID leaf 1, ECX bit 29), read directly: clang 14, which builds the
// sanitizer and fuzz trees, has no "f16c" for __builtin_cpu_supports.
inline bool cpu_has_f16c() {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}
#endif

// Unit roundoff of float: every correctly rounded operation has relative
// error at most u.
inline constexpr double kU = 0x1p-24;

// The sizes the SIMD paths are exercised on: around every vector width
// (4 for NEON, 8 for AVX2, 16 for AVX-512) and their unrolled multiples.
inline const std::vector<size_t> kSizes = {1,  2,  3,  4,  5,   7,   8,   9,   15,  16,   17,  31,
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
    ~IsaGuard() { mmgpt::kernels::force_isa(saved); }
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

}  // namespace kt
