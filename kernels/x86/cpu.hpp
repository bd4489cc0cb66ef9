#pragma once
// What an x86-64 CPU runs, from CPUID (internal to kernels/x86).
#include <string>

namespace mmgpt::kernels::detail::x86 {

bool runs_avx2();       // AVX2 + FMA + F16C
bool runs_avx512();     // the above + AVX-512 F, BW, DQ, VL
bool has_avx512vnni();  // VPDPBUSD
bool has_avx512bf16();  // VDPBF16PS, VCVTNE2PS2BF16
// AMX: the CPU has the tiles and TDPBSSD (int8) / TDPBF16PS (bf16), the OS
// saves the tile state (XCR0 XTILECFG and XTILEDATA) and grants it to this
// process (Linux's arch_prctl opt-in, asked once). False elsewhere.
bool has_amx_int8();
bool has_amx_bf16();
std::string vendor();   // "GenuineIntel", "AuthenticAMD", ...

}  // namespace mmgpt::kernels::detail::x86
