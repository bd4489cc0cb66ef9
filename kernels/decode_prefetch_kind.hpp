#pragma once
// Which prefetch instruction the decode kernels stream their weights with
// (decode_prefetch.hpp says why it depends on the CPU and on the moment).
// MMGPT_DECODE_PREFETCH=nta|t0|none fixes it for the process; unset (or
// "auto") the CPU vendor's hint is the start, and the engine may switch
// between it and none while it decodes, by timing the steps
// (engine/decode_prefetch_tuner.hpp). Read once, in dispatch.cpp.
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
// Whether the hint is left to the engine's step timing ("auto"), rather than
// fixed by MMGPT_DECODE_PREFETCH or force_decode_prefetch.
bool decode_prefetch_auto();
// "auto", or the fixed hint's name.
std::string_view decode_prefetch_setting();
// Sets the setting: "nta", "t0" or "none" fix the hint; "auto" starts again
// from the vendor's hint and lets the engine switch. False for any other
// name, which changes nothing. For tests, benchmarks and the tuner's owner.
bool force_decode_prefetch(std::string_view name);
// The hint for the next decode calls, the setting unchanged (the engine's
// tuner, while the setting is "auto"; a no-op when it is fixed).
void use_decode_prefetch(DecodePrefetch h);

}  // namespace mmgpt::kernels
