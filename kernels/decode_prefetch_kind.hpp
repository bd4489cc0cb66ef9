#pragma once
// Which prefetch instruction the decode kernels stream their weights with
// (decode_prefetch.hpp says why it depends on the CPU). Chosen once per
// process in dispatch.cpp: MMGPT_DECODE_PREFETCH=nta|t0 if set, else by the
// CPU's vendor.
#include <string>
#include <string_view>

namespace mmgpt::kernels {

enum class DecodePrefetch {
    Nta,  // PREFETCHNTA (Arm: PRFM PLDL1STRM): AMD, Arm and other non-x86 CPUs
    T0,   // PREFETCHT0 (Arm: PRFM PLDL1KEEP): Intel and other x86 CPUs
};

DecodePrefetch decode_prefetch();
// "nta" or "t0".
std::string_view decode_prefetch_name();
// The default for a CPUID vendor string ("AuthenticAMD", "GenuineIntel", ...;
// empty where there is none, as on Arm). Exposed for the tests.
DecodePrefetch decode_prefetch_for_vendor(std::string_view vendor);
// This CPU's CPUID vendor string; empty off x86.
std::string cpu_vendor();
// Forces a hint (for tests and benchmarks): "nta" or "t0"; false for any
// other name, which changes nothing.
bool force_decode_prefetch(std::string_view name);

}  // namespace mmgpt::kernels
