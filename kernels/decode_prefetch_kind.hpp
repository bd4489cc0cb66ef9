#pragma once
// Which prefetch instruction the decode kernels stream their weights with
// (decode_prefetch.hpp says why it depends on the CPU).
// MMGPT_DECODE_PREFETCH=nta|t0|none fixes it for the process; unset (or
// "auto") it is the CPU vendor's hint. Read once, in dispatch.cpp.
#include <string>
#include <string_view>

namespace mmgpt::kernels {

enum class DecodePrefetch {
  Nta,   // PREFETCHNTA (Arm: PRFM PLDL1STRM): AMD, Arm and other non-x86 CPUs
  T0,    // PREFETCHT0 (Arm: PRFM PLDL1KEEP): Intel and other x86 CPUs
  None,  // no software prefetch: the hardware prefetchers alone
};

// The hint the decode kernels use now.
DecodePrefetch decode_prefetch();
// "nta", "t0" or "none".
std::string_view decode_prefetch_name();
std::string_view decode_prefetch_name(DecodePrefetch h);
// The default for a CPUID vendor string ("AuthenticAMD", "GenuineIntel", ...;
// empty where there is none, as on Arm). Exposed for the tests.
DecodePrefetch decode_prefetch_for_vendor(std::string_view vendor);
// This CPU's CPUID vendor string; empty off x86.
std::string cpu_vendor();
// "auto" (the vendor's hint), or the name of a hint fixed by
// MMGPT_DECODE_PREFETCH or force_decode_prefetch.
std::string_view decode_prefetch_setting();
// The setting in words: "auto (nta, this CPU's default)", or a fixed hint's name.
std::string describe_decode_prefetch();
// Sets the setting: "nta", "t0" or "none" fix the hint; "auto" goes back to
// the vendor's hint. False for any other name, which changes nothing. For
// tests and benchmarks.
bool force_decode_prefetch(std::string_view name);

}  // namespace mmgpt::kernels
