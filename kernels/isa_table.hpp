#pragma once
// Internal: the boundary between the dispatcher and the per-ISA translation
// units. Each ISA TU (kernels_avx2.cpp, kernels_avx512.cpp, kernels_neon.cpp,
// and the scalar reference) exports one table of plain function pointers.
// Everything that is not ISA-specific (thread parallelism with oneTBB, the
// choice of table) lives in TUs compiled without ISA flags, so no inline code
// built for AVX-512 can end up being called on a CPU without it.
//
// The table entries are serial; the public functions in kernels.cpp split the
// work over threads (by output rows, never over a reduction).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/epilogue.hpp"
#include "kernels/kv_blocks.hpp"
#include "core/quant_layout.hpp"

namespace mmgpt::kernels::detail {

// The block-quantized kernels (quant_layout.hpp). A set of its own because
// the instructions that make them fast are extensions of their own (VNNI,
// the Arm dot product): dispatch.cpp pairs each ISA table with the best set
// the CPU runs.
struct QuantKernels {
    const char* name;
    // Panels [p0, p1) of y[M, N] (+)= act(x W^T + bias) for quantized x and W.
    void (*gemm_panels_q8_0)(const QuantizedRows& x, const uint8_t* wp, const float* bias, float* y, size_t M,
                             size_t K, size_t N, size_t p0, size_t p1, Epilogue e);
    void (*gemm_panels_q4_0)(const QuantizedRows& x, const uint8_t* wp, const float* bias, float* y, size_t M,
                             size_t K, size_t N, size_t p0, size_t p1, Epilogue e);
    // Rows of x[M, K] to q8 blocks (quant_layout.hpp): q[M * Kp], scale / sum[M * Kb].
    void (*quantize_rows)(const float* x, size_t M, size_t K, int8_t* q, float* scale, int32_t* sum);
};

const QuantKernels& scalar_quant_kernels();

// The GELU of the quantized kernels' epilogue, on n finished values (bias
// added): the active table's vector GELU, the one the f32 matmul fuses, so a
// quantized matmul with GELU equals "matmul, then kernels::gelu_*" exactly as
// f32 does. It differs from the scalar reference's std::erf / std::tanh only
// within the bound test_kernels_simd.cpp gives (4 ulp + |x| 2^-22);
// test_kernels_quant.cpp bounds the fused results by that. Defined in
// scalar_quant.cpp (no ISA flags), called through the table's pointer, so no
// ISA's inline code crosses into another's TU.
void quant_gelu(Activation act, float* v, size_t n);
#if defined(__x86_64__) || defined(_M_X64)
const QuantKernels& avx2_quant_kernels();        // AVX2 + FMA + F16C
const QuantKernels& avx512vnni_quant_kernels();  // AVX-512 F/BW/VL + VNNI
#endif
#if defined(__aarch64__)
const QuantKernels& neon_quant_kernels();          // baseline Advanced SIMD
const QuantKernels& neon_dotprod_quant_kernels();  // + SDOT (Armv8.2 dot product)
#endif
// Every set this CPU and build can run (scalar first), for the tests.
std::vector<const QuantKernels*> runnable_quant_kernels();

// bf16 weights times activations rounded to bf16, with a bf16 dot-product
// instruction: AVX512_BF16's VDPBF16PS, or the Arm BF16 extension's BFDOT;
// twice the multiply-adds of an f32 FMA per instruction. A set of its own, as
// the quantized kernels: dispatch.cpp pairs it with the AVX-512 table on CPUs
// that report AVX512_BF16 and with the NEON table on CPUs that report BF16
// (unless MMGPT_BF16DOT=0). The numerics are the instruction's, and the two
// instructions round differently, so each set names the scalar reference that
// defines its results bit for bit: scalar_bf16dot.cpp (VDPBF16PS) or
// scalar_bf16dot_arm.cpp (BFDOT). Both differ from the f32 kernels': x is
// rounded to bf16 first.
struct Bf16DotKernels {
    const char* name;
    // Panels [p0, p1) of y[M, N] (+)= act(x W^T + bias): x is M rows of
    // bf16dot_row_elems(K) bf16 values (bf16dot_round_rows), wp bf16 panels
    // (panel_layout.hpp).
    void (*gemm_panels)(const uint16_t* x, const uint16_t* wp, const float* bias, float* y, size_t M, size_t K,
                        size_t N, size_t p0, size_t p1, Epilogue e);
    // The scalar set whose results this one gives bit for bit; null for a
    // scalar reference itself.
    const Bf16DotKernels* reference = nullptr;
};

// A row of rounded activations: K rounded up to even (pairs of k), the pad zero.
inline size_t bf16dot_row_elems(size_t K) { return K + (K & 1); }
// x[M, K] to bf16 rows for Bf16DotKernels: round to nearest even, NaN stays
// NaN (quiet), an f32 subnormal becomes a zero of its sign (as VCVTNE2PS2BF16
// does); out: M * bf16dot_row_elems(K) values.
void bf16dot_round_rows(const float* x, size_t M, size_t K, uint16_t* out);

const Bf16DotKernels& scalar_bf16dot_kernels();      // VDPBF16PS's arithmetic
const Bf16DotKernels& scalar_arm_bf16dot_kernels();  // BFDOT's arithmetic
#if defined(__x86_64__) || defined(_M_X64)
const Bf16DotKernels& avx512bf16_bf16dot_kernels();  // AVX-512 F/BW/VL + BF16
#endif
#if defined(__aarch64__)
const Bf16DotKernels& neon_bf16_bf16dot_kernels();  // Advanced SIMD + BF16 (BFDOT)
#endif
// Every set this CPU and build can run (scalar first), for the tests.
std::vector<const Bf16DotKernels*> runnable_bf16dot_kernels();

struct IsaTable {
    const char* name;
    // y[m, n] for all m in [0, M) and n in [n0, n1): x[M, K] . W[N, K]^T + bias[n].
    void (*matmul_cols)(const float* x, const float* w, const float* bias, float* y, size_t M, size_t K,
                        size_t N, size_t n0, size_t n1);
    // Panel-packed W (panel_layout.hpp): the output columns of panels [p0, p1),
    // y[M, N] (+)= act(x[M, K] W^T + bias); scratch: gemm_scratch_floats(M, K, p1 - p0).
    void (*gemm_panels)(const float* x, const float* wp, const float* bias, float* y, size_t M, size_t K, size_t N,
                        size_t p0, size_t p1, Epilogue e, float* scratch);
    // One query's attention for consecutive heads (kernels.hpp attention_heads).
    void (*attention_heads)(const float* q, const float* k, const float* v, size_t n, size_t heads, size_t hd,
                            KVBlocks at, float scale, float* s, float* out);
    float (*dot)(const float* a, const float* b, size_t n);
    void (*axpy)(float a, const float* x, float* y, size_t n);
    void (*add)(float* y, const float* x, size_t n);
    void (*layernorm)(const float* x, const float* gamma, const float* beta, float* y, size_t rows, size_t dim,
                      float eps);
    void (*gelu_erf)(float* x, size_t n);
    void (*gelu_tanh)(float* x, size_t n);
    void (*softmax)(float* x, size_t n);
    // gemm_panels over 16-bit panels (same layout, bf16 / f16 elements).
    void (*gemm_panels_bf16)(const float* x, const uint16_t* wp, const float* bias, float* y, size_t M, size_t K,
                             size_t N, size_t p0, size_t p1, Epilogue e, float* scratch);
    void (*gemm_panels_f16)(const float* x, const uint16_t* wp, const float* bias, float* y, size_t M, size_t K,
                            size_t N, size_t p0, size_t p1, Epilogue e, float* scratch);
    // The quantized kernels paired with this table (set by dispatch.cpp).
    const QuantKernels* quant = nullptr;
    // attention_heads over a 16-bit KV cache (bf16 / f16, widened exactly).
    void (*attention_heads_bf16)(const float* q, const uint16_t* k, const uint16_t* v, size_t n, size_t heads,
                                 size_t hd, KVBlocks at, float scale, float* s, float* out);
    void (*attention_heads_f16)(const float* q, const uint16_t* k, const uint16_t* v, size_t n, size_t heads,
                                size_t hd, KVBlocks at, float scale, float* s, float* out);
    // n floats to f16, round to nearest even (narrow_to_f16's numerics).
    void (*narrow_f16)(const float* in, size_t n, uint16_t* out);
    // The bf16 dot-product kernels paired with this table (set by dispatch.cpp),
    // or null: matmul_packed then widens bf16 weights (gemm_panels_bf16).
    const Bf16DotKernels* bf16dot = nullptr;
};

const IsaTable& scalar_table();
#if defined(__x86_64__) || defined(_M_X64)
const IsaTable& avx2_table();
const IsaTable& avx512_table();
#endif
#if defined(__aarch64__)
const IsaTable& neon_table();
#endif

// The table in use (chosen once per process; see dispatch.cpp).
const IsaTable& active_table();

}  // namespace mmgpt::kernels::detail
