// Chooses the kernel set once per process: the first instruction set in
// kIsas the CPU runs, unless MMGPT_ISA names another one. This file is
// compiled without ISA flags and sees the instruction sets only through
// their Isa entries and the KernelSets they compose (registry.hpp).
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include "kernels/decode_prefetch_kind.hpp"
#include "kernels/kernels.hpp"
#include "kernels/registry.hpp"
#if defined(__x86_64__) || defined(_M_X64)
#include "kernels/x86/cpu.hpp"
#endif

namespace mmgpt::kernels::detail {
namespace {

// The instruction sets built into this binary, most preferred first.
const Isa* const* isas(size_t& count) {
  static const Isa* const list[] = {
#if defined(__x86_64__) || defined(_M_X64)
    &avx512_isa(),
    &avx2_isa(),
#endif
#if defined(__aarch64__)
    &neon_isa(),
#endif
    nullptr,
  };
  count = sizeof list / sizeof list[0] - 1;
  return list;
}

// MMGPT_BF16DOT: "0" keeps bf16 weights on the f32 kernels (widened,
// activations in f32) even where the bf16 dot product is available, "1"
// takes the dot product wherever the CPU has it; unset (or "auto") it is the
// CPU's default (kernels::bf16dot_for_vendor). Another value is ignored with
// a warning, as MMGPT_ISA's.
enum class Bf16DotSetting { Auto, Off, On };
Bf16DotSetting bf16dot_setting() {
  static const Bf16DotSetting setting = [] {
    const char* env = std::getenv("MMGPT_BF16DOT");
    if (env == nullptr || *env == '\0' || std::string_view(env) == "auto") return Bf16DotSetting::Auto;
    if (std::string_view(env) == "0") return Bf16DotSetting::Off;
    if (std::string_view(env) == "1") return Bf16DotSetting::On;
    std::fprintf(stderr, "mmgpt: warning: MMGPT_BF16DOT=%s is not a setting (auto, 0, 1); using auto\n", env);
    return Bf16DotSetting::Auto;
  }();
  return setting;
}

// Whether an instruction set's bf16 dot product runs on tiles here.
bool bf16_tiles(const Isa& isa) { return isa.bf16_tiles != nullptr && isa.bf16_tiles(); }

// Whether the default set of `isa` takes the bf16 dot product where the CPU
// has one: the vendor's default, or tiles (AMX-BF16), unless MMGPT_BF16DOT says.
bool bf16dot_by_default(const Isa& isa) {
  const Bf16DotSetting s = bf16dot_setting();
  return s == Bf16DotSetting::On ||
         (s == Bf16DotSetting::Auto && (bf16dot_for_vendor(cpu_vendor()) || bf16_tiles(isa)));
}

const Isa* find_isa(std::string_view name) {
  size_t n = 0;
  const Isa* const* list = isas(n);
  for (size_t i = 0; i < n; ++i)
    if (name == list[i]->name) return list[i];
  return nullptr;
}

// The set of the instruction set `name` if it is built into this binary and
// the CPU runs it; null otherwise. bf16dot: with the bf16 dot product where
// the CPU has it, unless MMGPT_BF16DOT=0; null: as by default.
const KernelSet* runnable_set(std::string_view name, std::optional<bool> bf16dot) {
  if (name == "scalar") return &scalar_kernel_set();
  const Isa* isa = find_isa(name);
  if (isa == nullptr) return nullptr;
  return isa->set(bf16dot.value_or(bf16dot_by_default(*isa)) && bf16dot_setting() != Bf16DotSetting::Off);
}

const KernelSet* best_set() {
  size_t n = 0;
  const Isa* const* list = isas(n);
  for (size_t i = 0; i < n; ++i)
    if (const KernelSet* s = list[i]->set(bf16dot_by_default(*list[i]))) return s;
  return &scalar_kernel_set();
}

// MMGPT_ISA=scalar|avx2|avx512|neon forces an instruction set. One this CPU
// (or this build) cannot run is ignored with a warning rather than failing,
// so a script that sets it still works everywhere.
const KernelSet* initial_set() {
  const KernelSet* best = best_set();
  const char* env = std::getenv("MMGPT_ISA");
  if (env == nullptr || *env == '\0') return best;
  if (const KernelSet* s = runnable_set(env, std::nullopt)) return s;
  std::fprintf(stderr,
               "mmgpt: warning: MMGPT_ISA=%s is not an instruction set this CPU and build can run "
               "(scalar, avx2, avx512, neon); using %s\n",
               env, best->name);
  return best;
}

std::atomic<const KernelSet*>& current() {
  static std::atomic<const KernelSet*> set{initial_set()};
  return set;
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

// The hint in use and whether it is the vendor's (auto).
struct DecodePrefetchState {
  std::atomic<DecodePrefetch> hint;
  std::atomic<bool> by_cpu;
};

// MMGPT_DECODE_PREFETCH=nta|t0|none fixes the decode kernels' prefetch hint,
// "auto" (or unset) takes the vendor's; another value is ignored with a
// warning, as MMGPT_ISA's.
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

// MMGPT_AMX (registry.hpp): another value is ignored with a warning, as MMGPT_ISA's.
enum class AmxSetting { Auto, Off };
AmxSetting amx_setting() {
  static const AmxSetting setting = [] {
    const char* env = std::getenv("MMGPT_AMX");
    if (env == nullptr || *env == '\0' || std::string_view(env) == "auto" || std::string_view(env) == "1")
      return AmxSetting::Auto;
    if (std::string_view(env) == "0") return AmxSetting::Off;
    std::fprintf(stderr, "mmgpt: warning: MMGPT_AMX=%s is not a setting (auto, 0, 1); using auto\n", env);
    return AmxSetting::Auto;
  }();
  return setting;
}

}  // namespace

bool amx_allowed() { return amx_setting() == AmxSetting::Auto; }

const KernelSet& active_set() { return *current().load(std::memory_order_acquire); }

std::vector<const KernelSet*> runnable_kernel_sets() {
  std::vector<const KernelSet*> sets{&scalar_kernel_set()};
  size_t n = 0;
  const Isa* const* list = isas(n);
  for (size_t i = 0; i < n; ++i)
    for (bool bf16dot : {true, false})
      if (const KernelSet* s = list[i]->set(bf16dot); s && (sets.back() != s)) sets.push_back(s);
  return sets;
}

std::vector<const QuantKernels*> runnable_quant_kernels() {
  std::vector<const QuantKernels*> quant{&scalar_quant_kernels()};
  std::vector<const MatmulKernels*> bf16dot;
  size_t n = 0;
  const Isa* const* list = isas(n);
  for (size_t i = n; i-- > 0;) list[i]->runnable(quant, bf16dot);  // the simplest first
  return quant;
}

std::vector<const MatmulKernels*> runnable_bf16dot_kernels() {
  std::vector<const QuantKernels*> quant;
  std::vector<const MatmulKernels*> bf16dot{&scalar_bf16dot_kernels(), &scalar_arm_bf16dot_kernels()};
  size_t n = 0;
  const Isa* const* list = isas(n);
  for (size_t i = n; i-- > 0;) list[i]->runnable(quant, bf16dot);
  return bf16dot;
}

}  // namespace mmgpt::kernels::detail

namespace mmgpt::kernels {

std::string_view isa_name() { return detail::active_set().name; }

std::string built_isas() {
  std::string names;
  size_t n = 0;
  const detail::Isa* const* list = detail::isas(n);
  for (size_t i = 0; i < n; ++i) names.append(list[i]->name).append(", ");
  return names + "scalar";
}

std::string_view quant_isa_name() { return detail::active_set().matmul[static_cast<size_t>(WeightType::Q8_0)]->name; }

std::string_view bf16_isa_name() {
  const detail::MatmulKernels* k = detail::active_set().matmul[static_cast<size_t>(WeightType::BF16)];
  return k->x == detail::XForm::Bf16Rows ? k->name : "f32";
}

std::string cpu_vendor() {
#if defined(__x86_64__) || defined(_M_X64)
  return detail::x86::vendor();
#else
  return {};
#endif
}

// The dot product where it does more multiply-adds a cycle than the FMAs
// (AMD's cores) and off x86 (Arm's BFDOT, not measured on Arm hardware);
// widening on Intel, whose VDPBF16PS is no faster than its FMAs once the
// activations' rounding is paid, and on other x86 vendors (docs/kernels.md,
// "bf16 dot products" has the measurements).
bool bf16dot_for_vendor(std::string_view vendor) {
  return vendor.empty() || vendor == "AuthenticAMD" || vendor == "HygonGenuine";
}

std::string describe_bf16() {
  const std::string name(bf16_isa_name());
  switch (detail::bf16dot_setting()) {
    case detail::Bf16DotSetting::Off: return name + " (MMGPT_BF16DOT=0)";
    case detail::Bf16DotSetting::On: return name + " (MMGPT_BF16DOT=1)";
    case detail::Bf16DotSetting::Auto: break;
  }
  if (name == "amx-bf16") return name + " (tiles from 16 rows, TDPBF16PS's arithmetic at every M)";
  const detail::KernelSet* with_dot = detail::runnable_set(isa_name(), true);
  const bool cpu_has_dot =
      with_dot && with_dot->matmul[static_cast<size_t>(WeightType::BF16)]->x == detail::XForm::Bf16Rows;
  const bool widened_by_table = name == "f32" && cpu_has_dot && !bf16dot_for_vendor(cpu_vendor());
  return name + (widened_by_table ? " (widened: this CPU's default)" : "");
}

std::string describe_amx() {
#if defined(__x86_64__) || defined(_M_X64)
  const bool allowed = detail::amx_allowed();  // read (and a bad value said) first, as in every process
  const bool int8 = detail::x86::has_amx_int8(), bf16 = detail::x86::has_amx_bf16();
  if (!int8 && !bf16) return "not available (this CPU or system has no AMX tiles)";
  if (!allowed) return "off (MMGPT_AMX=0)";
  std::string used;
  if (quant_isa_name() == "amx-int8") used = "int8";
  if (bf16_isa_name() == "amx-bf16") used += used.empty() ? "bf16" : ", bf16";
  std::string s = used.empty() ? "available, not in use" : "in use (" + used + ")";
  if (int8 && quant_isa_name() != "amx-int8" && std::string_view(isa_name()) == "avx512")
    s += "; int8 tiles unused: they did not give the reference's bits on this CPU (a fault: please report it)";
  if (bf16 && bf16_isa_name() != "amx-bf16") {
    const detail::KernelSet* with_dot = detail::runnable_set(isa_name(), true);
    const bool tiles = with_dot && std::string_view(with_dot->matmul[static_cast<size_t>(WeightType::BF16)]->name) ==
                                       "amx-bf16";
    s += tiles ? "; bf16 tiles not in use (MMGPT_BF16DOT=0, or another instruction set forced)"
               : "; bf16 tiles unused: TDPBF16PS does not give its reference's bits on this CPU";
  }
  return s;
#else
  return "not available (not x86-64)";
#endif
}

// Non-temporal on AMD (and Hygon, the same cores) and off x86; T0 on Intel
// and any other x86 vendor: on AMD T0 is not far behind the non-temporal
// hint, while on Intel the non-temporal hint holds decode far below the
// memory's rate, so T0 is the safer default for an unknown vendor
// (docs/kernels.md, "Decode: prefetching ahead, and the hint per CPU").
DecodePrefetch decode_prefetch_for_vendor(std::string_view vendor) {
  if (vendor.empty() || vendor == "AuthenticAMD" || vendor == "HygonGenuine") return DecodePrefetch::Nta;
  return DecodePrefetch::T0;
}

DecodePrefetch decode_prefetch() { return detail::decode_prefetch_state().hint.load(std::memory_order_relaxed); }

std::string_view decode_prefetch_name() { return detail::name_of(decode_prefetch()); }
std::string_view decode_prefetch_name(DecodePrefetch h) { return detail::name_of(h); }

std::string_view decode_prefetch_setting() {
  return detail::decode_prefetch_state().by_cpu.load(std::memory_order_relaxed) ? "auto" : decode_prefetch_name();
}

std::string describe_decode_prefetch() {
  if (decode_prefetch_setting() != "auto") return std::string(decode_prefetch_name());
  return "auto (" + std::string(decode_prefetch_name()) + ", this CPU's default)";
}

bool force_decode_prefetch(std::string_view name) {
  detail::DecodePrefetchState& s = detail::decode_prefetch_state();
  DecodePrefetch h;
  if (name == "auto") {
    s.hint.store(decode_prefetch_for_vendor(cpu_vendor()), std::memory_order_relaxed);
    s.by_cpu.store(true, std::memory_order_relaxed);
    return true;
  }
  if (!detail::parse_decode_prefetch(name, h)) return false;
  s.by_cpu.store(false, std::memory_order_relaxed);
  s.hint.store(h, std::memory_order_relaxed);
  return true;
}

bool force_isa(std::string_view name, bool bf16dot) {
  const detail::KernelSet* t = detail::runnable_set(name, bf16dot);
  if (t == nullptr) return false;
  detail::current().store(t, std::memory_order_release);
  return true;
}

}  // namespace mmgpt::kernels
