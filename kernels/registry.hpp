#pragma once
// Internal: how kernels are registered, by (instruction set, weight type).
//
// Each instruction set is a folder (kernels/<arch>/<isa>/) whose translation
// units are compiled with that ISA's flags and export plain tables of
// function pointers; its set.cpp, compiled without ISA flags, detects what
// the CPU runs and composes one KernelSet. dispatch.cpp picks a KernelSet
// once per process. Everything that is not ISA-specific (threads, the choice
// of set) lives in TUs built without ISA flags, so no inline code built for
// AVX-512 can end up being called on a CPU without it.
//
// The kernels in a set are serial; the public functions in kernels.cpp split
// the work over threads (by output columns, never over a reduction).
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/quant_layout.hpp"
#include "core/weight_type.hpp"
#include "kernels/epilogue.hpp"
#include "kernels/kv_blocks.hpp"
#include "kernels/prepared_x.hpp"

namespace mmgpt::kernels::detail {

// Panels [p0, p1) of y[M, N] (+)= act(x W^T + bias) for a packed W (`w`: its
// first byte) of the entry's weight type.
using PanelKernel = void (*)(const PreparedX& x, const void* w, const float* bias, float* y, size_t M, size_t K,
                             size_t N, size_t p0, size_t p1, Epilogue e);

// The matmul kernels of one translation unit, indexed by weight type.
struct MatmulKernels {
  const char* name;
  XForm x = XForm::F32;
  std::array<PanelKernel, kWeightTypeCount> panels{};  // null: a type this set does not multiply
  // The scalar set whose results this one gives bit for bit; null for a
  // reference itself (and for the XForm::F32 sets, whose reference is
  // scalar_matmul_kernels()).
  const MatmulKernels* reference = nullptr;
};

// Causal attention of consecutive queries for consecutive heads over a KV
// cache of one element type (kernels.hpp attention_queries).
using AttentionKernel = void (*)(const float* q, size_t q_stride, const void* k, const void* v, size_t n,
                                 size_t queries, size_t heads, size_t hd, KVBlocks at, float scale, float* s,
                                 float* out, size_t out_stride, size_t window);
// x[M, K] to q8 blocks (quant_layout.hpp): q[M * Kp], scale / sum[M * Kb].
using QuantizeRows = void (*)(const float* x, size_t M, size_t K, int8_t* q, float* scale, int32_t* sum);

// A quantized-matmul set and the activation quantization compiled with it.
struct QuantKernels {
  MatmulKernels matmul;  // XForm::Q8Blocks
  QuantizeRows quantize_rows;
};

// What an instruction set registers: per weight type the set of matmul
// kernels that multiplies it, per KV cache type its attention, and the
// element-wise kernels.
struct KernelSet {
  const char* name;
  std::array<const MatmulKernels*, kWeightTypeCount> matmul{};
  std::array<AttentionKernel, kWeightTypeCount> attention{};  // null: not a KV cache type
  QuantizeRows quantize_rows = nullptr;
  float (*dot)(const float* a, const float* b, size_t n) = nullptr;
  void (*axpy)(float a, const float* x, float* y, size_t n) = nullptr;
  void (*add)(float* y, const float* x, size_t n) = nullptr;
  void (*layernorm)(const float* x, const float* gamma, const float* beta, float* y, size_t rows, size_t dim,
                    float eps) = nullptr;
  void (*gelu_erf)(float* x, size_t n) = nullptr;
  void (*gelu_tanh)(float* x, size_t n) = nullptr;
  void (*softmax)(float* x, size_t n) = nullptr;
  void (*rmsnorm)(const float* x, const float* gamma, float* y, size_t rows, size_t dim, float eps) = nullptr;
  void (*glu)(const float* in, float* out, size_t rows, size_t ff, Gate act) = nullptr;
  void (*softcap)(float* x, size_t n, float cap) = nullptr;
  void (*rope)(float* x, size_t heads, size_t hd, size_t rot, const float* cos, const float* sin,
               bool interleaved) = nullptr;
  // n floats to f16, round to nearest even (narrow_to_f16's numerics).
  void (*narrow_f16)(const float* in, size_t n, uint16_t* out) = nullptr;

  // Registers `m` for every weight type it multiplies (replacing what was there).
  KernelSet& use(const MatmulKernels& m) {
    for (size_t t = 0; t < kWeightTypeCount; ++t)
      if (m.panels[t] != nullptr) matmul[t] = &m;
    return *this;
  }
  KernelSet& use(const QuantKernels& q) {
    quantize_rows = q.quantize_rows;
    return use(q.matmul);
  }
};

// The scalar reference: the specification every set is tested against.
const KernelSet& scalar_kernel_set();
const MatmulKernels& scalar_matmul_kernels();       // f32, bf16, f16 (widened)
const QuantKernels& scalar_quant_kernels();         // q8_0, q4_0
const MatmulKernels& scalar_bf16dot_kernels();      // bf16, VDPBF16PS's arithmetic
const MatmulKernels& scalar_arm_bf16dot_kernels();  // bf16, BFDOT's arithmetic
const MatmulKernels& scalar_tdpbf16ps_kernels();    // bf16, AMX TDPBF16PS's arithmetic
// TDPBF16PS's chunk: the pairs of k one instruction sums in its two chains
// (a 64-byte tile row), in the reference and the AMX-BF16 kernels.
inline constexpr size_t kTdpbf16psChunkPairs = 16;

// An instruction set: one folder (kernels/<arch>/<isa>/), whose set.cpp
// defines its Isa. dispatch.cpp lists them in order of preference.
struct Isa {
  const char* name;  // as MMGPT_ISA names it
  // Its kernels where this CPU runs it, else null. bf16dot false: bf16
  // weights widened to f32 even where the CPU has a bf16 dot product (as
  // MMGPT_BF16DOT=0).
  const KernelSet* (*set)(bool bf16dot);
  // Appends every quantized and bf16 dot-product set of the folder that
  // this CPU runs (for the tests, which compare each with its reference).
  void (*runnable)(std::vector<const QuantKernels*>& quant, std::vector<const MatmulKernels*>& bf16dot);
  // Whether its bf16 dot product runs on matrix tiles on this CPU (AMX-BF16),
  // where it pays whatever the vendor table says; null: never.
  bool (*bf16_tiles)() = nullptr;
};
// MMGPT_AMX: "0" keeps the AMX tiles unused; unset, "auto" or "1" uses them
// where the CPU has them (dispatch.cpp; read once).
bool amx_allowed();
#if defined(__x86_64__) || defined(_M_X64)
const Isa& avx2_isa();
const Isa& avx512_isa();
#endif
#if defined(__aarch64__)
const Isa& neon_isa();
#endif

// Every kernel set this CPU and build can run: the scalar reference, then
// each instruction set's with and without its bf16 dot product (for the tests).
std::vector<const KernelSet*> runnable_kernel_sets();
// Every quantized / bf16 dot-product set this CPU and build can run (the
// scalar ones first), for the tests.
std::vector<const QuantKernels*> runnable_quant_kernels();
std::vector<const MatmulKernels*> runnable_bf16dot_kernels();

// A row of rounded activations: K rounded up to even (pairs of k), the pad zero.
inline size_t bf16dot_row_elems(size_t K) { return K + (K & 1); }
// x[M, K] to bf16 rows for XForm::Bf16Rows: round to nearest even, NaN stays
// NaN (quiet), an f32 subnormal becomes a zero of its sign (as VCVTNE2PS2BF16
// does); out: M * bf16dot_row_elems(K) values.
void bf16dot_round_rows(const float* x, size_t M, size_t K, uint16_t* out);

// The activation of the intrinsics kernels' epilogues, on n finished values
// (bias added): the active set's vector GELU (ReLU squared is exact anywhere), the one the f32 matmul fuses, so a
// quantized matmul with GELU equals "matmul, then kernels::gelu_*" exactly as
// f32 does. Defined in scalar/quant.cpp (no ISA flags), so no ISA's inline
// code crosses into another's TU.
void quant_gelu(Activation act, float* v, size_t n);

// The set in use (chosen once per process; see dispatch.cpp).
const KernelSet& active_set();

namespace {
// Adapters from a kernel's own signature to PanelKernel. Internal linkage:
// each TU that registers a kernel instantiates its own copy, with its flags.
template <auto F>
void f32_entry(const PreparedX& x, const void* w, const float* bias, float* y, size_t M, size_t K, size_t N, size_t p0,
               size_t p1, Epilogue e) {
  F(x.f32, static_cast<const float*>(w), bias, y, M, K, N, p0, p1, e);
}
template <auto F>
void half_entry(const PreparedX& x, const void* w, const float* bias, float* y, size_t M, size_t K, size_t N, size_t p0,
                size_t p1, Epilogue e) {
  F(x.f32, static_cast<const uint16_t*>(w), bias, y, M, K, N, p0, p1, e);
}
template <auto F>
void quant_entry(const PreparedX& x, const void* w, const float* bias, float* y, size_t M, size_t K, size_t N,
                 size_t p0, size_t p1, Epilogue e) {
  F(x.q8, static_cast<const uint8_t*>(w), bias, y, M, K, N, p0, p1, e);
}
template <auto F>
void bf16dot_entry(const PreparedX& x, const void* w, const float* bias, float* y, size_t M, size_t K, size_t N,
                   size_t p0, size_t p1, Epilogue e) {
  F(x.bf16, static_cast<const uint16_t*>(w), bias, y, M, K, N, p0, p1, e);
}
// The quantized kernels of one TU, q8_0 and q4_0.
template <auto Q8, auto Q4>
QuantKernels quant_kernels(const char* name, QuantizeRows quantize, const MatmulKernels* reference) {
  QuantKernels k{{name, XForm::Q8Blocks, {}, reference}, quantize};
  k.matmul.panels[static_cast<size_t>(WeightType::Q8_0)] = &quant_entry<Q8>;
  k.matmul.panels[static_cast<size_t>(WeightType::Q4_0)] = &quant_entry<Q4>;
  return k;
}
// The bf16 dot-product kernel of one TU.
template <auto F>
MatmulKernels bf16dot_kernels(const char* name, const MatmulKernels* reference) {
  MatmulKernels k{name, XForm::Bf16Rows, {}, reference};
  k.panels[static_cast<size_t>(WeightType::BF16)] = &bf16dot_entry<F>;
  return k;
}
}  // namespace

}  // namespace mmgpt::kernels::detail
