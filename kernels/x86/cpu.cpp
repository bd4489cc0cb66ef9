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

namespace {

// CPUID leaf 7 EDX: AMX-BF16 bit 22, AMX-TILE bit 24, AMX-INT8 bit 25; the
// tile state usable: XCR0 bits 17 (XTILECFG) and 18 (XTILEDATA), read with
// XGETBV where CPUID leaf 1 reports OSXSAVE (ECX bit 27); and the
// process's permission (core/platform.hpp).
struct Amx {
  bool int8 = false, bf16 = false;
};
Amx detect_amx() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return {};
  const bool tile = (edx & (1u << 24)) != 0, int8 = (edx & (1u << 25)) != 0, bf16 = (edx & (1u << 22)) != 0;
  if (!tile || !(int8 || bf16)) return {};
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0 || (ecx & (1u << 27)) == 0) return {};
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  constexpr unsigned kTileState = (1u << 17) | (1u << 18);
  if ((lo & kTileState) != kTileState) return {};
  if (!platform::x86_request_amx_tiles()) return {};
  return {int8, bf16};
}
const Amx& amx() {
  static const Amx a = detect_amx();
  return a;
}

}  // namespace

bool has_amx_int8() { return amx().int8; }
bool has_amx_bf16() { return amx().bf16; }

std::string vendor() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(0, &eax, &ebx, &ecx, &edx) == 0) return {};
  char v[12];
  std::memcpy(v, &ebx, 4), std::memcpy(v + 4, &edx, 4), std::memcpy(v + 8, &ecx, 4);
  return std::string(v, sizeof v);
}

}  // namespace mmgpt::kernels::detail::x86
