// CPUID feature checks, compiled without ISA flags.
#include "kernels/x86/cpu.hpp"

#include <cpuid.h>

#include <cstring>
#include <optional>

#include "core/platform.hpp"

namespace mmgpt::kernels::detail::x86 {
namespace {

// F16C from CPUID leaf 1, ECX bit 29. Not through __builtin_cpu_supports:
// clang (14, the fuzz and sanitizer compiler) does not know the "f16c" name.
bool has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return false;
  return (ecx & bit_F16C) != 0;
}

}  // namespace

bool runs_avx2() {
  __builtin_cpu_init();  // safe to repeat; needed if we run before libgcc's constructor
  // F16C: the f16 weight kernels widen with VCVTPH2PS (every AVX2 CPU we know has it).
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
}

bool runs_avx512() {
  // Where the system enables AVX-512 state on first use, XCR0 says no until then.
  if (const std::optional<bool> enabled = platform::x86_avx512_enabled()) return runs_avx2() && *enabled;
  return runs_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
}

// AVX-512 VNNI: CPUID leaf 7, ECX bit 11 (the same for gcc and clang).
bool has_avx512vnni() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
  return (ecx & (1u << 11)) != 0;
}

// AVX512_BF16: CPUID leaf 7, subleaf 1, EAX bit 5 (clang 14 has no
// __builtin_cpu_supports name for it).
bool has_avx512bf16() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0 || eax < 1) return false;  // no subleaf 1
  if (__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) == 0) return false;
  return (eax & (1u << 5)) != 0;
}

std::string vendor() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(0, &eax, &ebx, &ecx, &edx) == 0) return {};
  char v[12];
  std::memcpy(v, &ebx, 4), std::memcpy(v + 4, &edx, 4), std::memcpy(v + 8, &ecx, 4);
  return std::string(v, sizeof v);
}

}  // namespace mmgpt::kernels::detail::x86
