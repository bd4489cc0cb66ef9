// Chooses the kernel instantiation once per process: the widest ISA the CPU
// runs, unless MMGPT_ISA names another one. This file is compiled without ISA
// flags and sees the instantiations only through their function tables.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#if defined(__x86_64__) || defined(_M_X64)
#include <cpuid.h>
#endif
#if defined(__aarch64__) && defined(__linux__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

#include "kernels/decode_prefetch_kind.hpp"
#include "kernels/isa_table.hpp"
#include "kernels/kernels.hpp"

namespace mmgpt::kernels::detail {
namespace {

// MMGPT_BF16DOT=0 keeps bf16 weights on the f32 kernels (widened, activations
// in f32) even where the bf16 dot product is available.
bool bf16dot_allowed() {
    const char* env = std::getenv("MMGPT_BF16DOT");
    return env == nullptr || std::string_view(env) != "0";
}

#if defined(__x86_64__) || defined(_M_X64)
// F16C from CPUID leaf 1, ECX bit 29. Not through __builtin_cpu_supports:
// clang (14, the fuzz and sanitizer compiler) does not know the "f16c" name.
bool cpu_has_f16c() {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return false;
    return (ecx & bit_F16C) != 0;
}
#endif

#if defined(__x86_64__) || defined(_M_X64)
// AVX-512 VNNI from CPUID leaf 7, ECX bit 11 (the same for gcc and clang).
bool cpu_has_avx512vnni() {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
    return (ecx & (1u << 11)) != 0;
}

// AVX512_BF16 from CPUID leaf 7, subleaf 1, EAX bit 5 (no __builtin_cpu_supports
// name for it in clang 14).
bool cpu_has_avx512bf16() {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0 || eax < 1) return false;  // no subleaf 1
    if (__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) == 0) return false;
    return (eax & (1u << 5)) != 0;
}

bool cpu_runs_avx2() {
    __builtin_cpu_init();  // safe to repeat; needed if we run before libgcc's constructor
    // F16C: the f16 weight kernels widen with VCVTPH2PS (every AVX2 CPU we know has it).
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
}

bool cpu_runs_avx512() {
    return cpu_runs_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
}
#endif

#if defined(__aarch64__)
// The Armv8.2 dot product (SDOT), from the kernel's hardware capabilities.
bool cpu_has_dotprod() {
#if defined(__linux__)
    return (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
#else
    return false;
#endif
}

// The BF16 extension (BFDOT), from the second word of hardware capabilities.
bool cpu_has_bf16() {
#if defined(__linux__) && defined(HWCAP2_BF16)
    return (getauxval(AT_HWCAP2) & HWCAP2_BF16) != 0;
#else
    return false;
#endif
}
#endif

IsaTable with_quant(IsaTable t, const QuantKernels& q, const Bf16DotKernels* bf16dot = nullptr) {
    t.quant = &q;
    t.bf16dot = bf16dot;
    return t;
}

// The table for `name` if it is built into this binary and the CPU can run
// it; nullptr otherwise. Each comes with the best quantized kernels the CPU
// runs at that level, AVX-512 and NEON with the bf16 dot product where the
// CPU has it (bf16dot false: the same table without it).
const IsaTable* runnable_table(std::string_view name, bool bf16dot = true) {
    if (name == "scalar") return &scalar_table();
#if defined(__x86_64__) || defined(_M_X64)
    if (name == "avx2") {
        if (!cpu_runs_avx2()) return nullptr;
        static const IsaTable t = with_quant(avx2_table(), avx2_quant_kernels());
        return &t;
    }
    if (name == "avx512") {
        if (!cpu_runs_avx512()) return nullptr;
        static const IsaTable widen =
            with_quant(avx512_table(), cpu_has_avx512vnni() ? avx512vnni_quant_kernels() : avx2_quant_kernels());
        static const IsaTable t = with_quant(
            widen, *widen.quant, cpu_has_avx512bf16() && bf16dot_allowed() ? &avx512bf16_bf16dot_kernels() : nullptr);
        return bf16dot ? &t : &widen;
    }
#endif
#if defined(__aarch64__)
    if (name == "neon") {  // Advanced SIMD is mandatory on AArch64
        static const IsaTable widen =
            with_quant(neon_table(), cpu_has_dotprod() ? neon_dotprod_quant_kernels() : neon_quant_kernels());
        static const IsaTable t = with_quant(
            widen, *widen.quant, cpu_has_bf16() && bf16dot_allowed() ? &neon_bf16_bf16dot_kernels() : nullptr);
        return bf16dot ? &t : &widen;
    }
#endif
    return nullptr;
}

const IsaTable* best_table() {
    for (std::string_view name : {"avx512", "avx2", "neon"})
        if (const IsaTable* t = runnable_table(name)) return t;
    return &scalar_table();
}

// MMGPT_ISA=scalar|avx2|avx512|neon forces an instantiation. One this CPU
// (or this build) cannot run is ignored with a warning rather than failing,
// so a script that sets it still works everywhere. (MMGPT_BF16DOT=0, read by
// bf16dot_allowed, keeps bf16 weights off the bf16 dot product.)
const IsaTable* initial_table() {
    const IsaTable* best = best_table();
    const char* env = std::getenv("MMGPT_ISA");
    if (env == nullptr || *env == '\0') return best;
    if (const IsaTable* t = runnable_table(env)) return t;
    std::fprintf(stderr, "mmgpt: warning: MMGPT_ISA=%s is not an instruction set this CPU and build can run "
                         "(scalar, avx2, avx512, neon); using %s\n", env, best->name);
    return best;
}

std::atomic<const IsaTable*>& current() {
    static std::atomic<const IsaTable*> table{initial_table()};
    return table;
}

std::string_view name_of(DecodePrefetch h) {
    switch (h) {
        case DecodePrefetch::T0: return "t0";
        case DecodePrefetch::None: return "none";
        case DecodePrefetch::Nta: break;
    }
    return "nta";
}

bool parse_decode_prefetch(std::string_view name, DecodePrefetch& out) {
    if (name == "nta") return out = DecodePrefetch::Nta, true;
    if (name == "t0") return out = DecodePrefetch::T0, true;
    if (name == "none") return out = DecodePrefetch::None, true;
    return false;
}

// The hint in use and whether the engine may move it (auto).
struct DecodePrefetchState {
    std::atomic<DecodePrefetch> hint;
    std::atomic<bool> tuned;
};

// MMGPT_DECODE_PREFETCH=nta|t0|none fixes the decode kernels' prefetch hint,
// "auto" (or unset) leaves it to the engine, starting from the vendor's;
// another value is ignored with a warning, as MMGPT_ISA's.
DecodePrefetchState& decode_prefetch_state() {
    static DecodePrefetchState state = [] {
        const DecodePrefetch by_cpu = decode_prefetch_for_vendor(cpu_vendor());
        const char* env = std::getenv("MMGPT_DECODE_PREFETCH");
        DecodePrefetch forced;
        if (env == nullptr || *env == '\0' || std::string_view(env) == "auto") return DecodePrefetchState{by_cpu, true};
        if (parse_decode_prefetch(env, forced)) return DecodePrefetchState{forced, false};
        std::fprintf(stderr,
                     "mmgpt: warning: MMGPT_DECODE_PREFETCH=%s is not a decode prefetch setting (auto, nta, t0, "
                     "none); using auto\n",
                     env);
        return DecodePrefetchState{by_cpu, true};
    }();
    return state;
}

}  // namespace

const IsaTable& active_table() { return *current().load(std::memory_order_acquire); }

std::vector<const QuantKernels*> runnable_quant_kernels() {
    std::vector<const QuantKernels*> all{&scalar_quant_kernels()};
#if defined(__x86_64__) || defined(_M_X64)
    if (cpu_runs_avx2()) all.push_back(&avx2_quant_kernels());
    if (cpu_runs_avx512() && cpu_has_avx512vnni()) all.push_back(&avx512vnni_quant_kernels());
#endif
#if defined(__aarch64__)
    all.push_back(&neon_quant_kernels());
    if (cpu_has_dotprod()) all.push_back(&neon_dotprod_quant_kernels());
#endif
    return all;
}

std::vector<const Bf16DotKernels*> runnable_bf16dot_kernels() {
    std::vector<const Bf16DotKernels*> all{&scalar_bf16dot_kernels(), &scalar_arm_bf16dot_kernels()};
#if defined(__x86_64__) || defined(_M_X64)
    if (cpu_runs_avx512() && cpu_has_avx512bf16()) all.push_back(&avx512bf16_bf16dot_kernels());
#endif
#if defined(__aarch64__)
    if (cpu_has_bf16()) all.push_back(&neon_bf16_bf16dot_kernels());
#endif
    return all;
}

}  // namespace mmgpt::kernels::detail

namespace mmgpt::kernels {

std::string_view isa_name() { return detail::active_table().name; }

std::string_view quant_isa_name() { return detail::active_table().quant->name; }

std::string_view bf16_isa_name() {
    const detail::Bf16DotKernels* k = detail::active_table().bf16dot;
    return k ? k->name : "f32";
}

std::string cpu_vendor() {
#if defined(__x86_64__) || defined(_M_X64)
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (__get_cpuid(0, &eax, &ebx, &ecx, &edx) == 0) return {};
    char v[12];
    std::memcpy(v, &ebx, 4), std::memcpy(v + 4, &edx, 4), std::memcpy(v + 8, &ecx, 4);
    return std::string(v, sizeof v);
#else
    return {};
#endif
}

// Non-temporal on AMD (and Hygon, the same cores) and off x86; T0 on Intel
// and any other x86 vendor. Measured: decode_prefetch.hpp. T0 is the default
// for an unknown x86 vendor because it was never far behind (Zen 5: within
// this host's spread) while PREFETCHNTA was, on an Intel Xeon, 1.7 to 4.5
// times slower.
DecodePrefetch decode_prefetch_for_vendor(std::string_view vendor) {
    if (vendor.empty() || vendor == "AuthenticAMD" || vendor == "HygonGenuine") return DecodePrefetch::Nta;
    return DecodePrefetch::T0;
}

DecodePrefetch decode_prefetch() { return detail::decode_prefetch_state().hint.load(std::memory_order_relaxed); }

std::string_view decode_prefetch_name() { return detail::name_of(decode_prefetch()); }
std::string_view decode_prefetch_name(DecodePrefetch h) { return detail::name_of(h); }

bool decode_prefetch_auto() { return detail::decode_prefetch_state().tuned.load(std::memory_order_relaxed); }

std::string_view decode_prefetch_setting() { return decode_prefetch_auto() ? "auto" : decode_prefetch_name(); }

bool force_decode_prefetch(std::string_view name) {
    detail::DecodePrefetchState& s = detail::decode_prefetch_state();
    DecodePrefetch h;
    if (name == "auto") {
        s.hint.store(decode_prefetch_for_vendor(cpu_vendor()), std::memory_order_relaxed);
        s.tuned.store(true, std::memory_order_relaxed);
        return true;
    }
    if (!detail::parse_decode_prefetch(name, h)) return false;
    s.tuned.store(false, std::memory_order_relaxed);
    s.hint.store(h, std::memory_order_relaxed);
    return true;
}

void use_decode_prefetch(DecodePrefetch h) {
    detail::DecodePrefetchState& s = detail::decode_prefetch_state();
    if (s.tuned.load(std::memory_order_relaxed)) s.hint.store(h, std::memory_order_relaxed);
}

bool force_isa(std::string_view name, bool bf16dot) {
    const detail::IsaTable* t = detail::runnable_table(name, bf16dot);
    if (t == nullptr) return false;
    detail::current().store(t, std::memory_order_release);
    return true;
}

}  // namespace mmgpt::kernels
