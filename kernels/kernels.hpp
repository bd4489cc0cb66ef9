#pragma once
// The arithmetic of the forward pass. Each function dispatches once per
// process to the best instantiation for the CPU (AVX-512, AVX2+FMA, NEON, or
// the scalar reference). The scalar reference (namespace scalar) is the
// specification: every SIMD path is tested against it.
//
// Matrices are row-major. Weights are [N, K] ("out, in"), so
//   matmul: y[M, N] = x[M, K] * W[N, K]^T (+ b[N])
// Results do not depend on the number of threads: parallel work is split over
// output rows/columns, never over a reduction.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/panel_layout.hpp"
#include "core/quant_layout.hpp"
#include "kernels/decode_prefetch_kind.hpp"
#include "kernels/epilogue.hpp"
#include "kernels/kv_blocks.hpp"
#include "kernels/prepared_x.hpp"

namespace mmgpt::kernels {

// Name of the instantiation in use: "avx512", "avx2", "neon" or "scalar".
std::string_view isa_name();
// The instruction sets built into this binary, most preferred first, then
// "scalar": e.g. "avx512, avx2, scalar". isa_name() is the one in use.
std::string built_isas();
// Name of the quantized kernels in use: "amx-int8", "avx512vnni", "avx2", "neon-dotprod", "neon" or "scalar".
std::string_view quant_isa_name();
// Name of the kernels that multiply bf16 weights: "amx-bf16", "avx512bf16" or
// "neon_bf16" (the bf16 dot product, activations rounded to bf16) or "f32" (weights
// widened to f32, the f32 kernels of isa_name()). The dot product is taken
// where the CPU has one and bf16dot_for_vendor says it pays; MMGPT_BF16DOT=0
// or 1 overrides that.
std::string_view bf16_isa_name();
// Whether CPUs of this CPUID vendor ("AuthenticAMD", "GenuineIntel", ...;
// empty off x86) take the bf16 dot product by default. Exposed for the tests.
bool bf16dot_for_vendor(std::string_view vendor);
// bf16_isa_name() and why, e.g. "f32 (widened: this CPU's default)".
std::string describe_bf16();
// Whether the AMX tiles are used and why, e.g. "in use (int8, bf16)",
// "off (MMGPT_AMX=0)", "not available (...)".
std::string describe_amx();
// Forces an instantiation (for tests and benchmarks); false if the CPU cannot
// run it. bf16dot false: without the bf16 dot product (as MMGPT_BF16DOT=0).
bool force_isa(std::string_view name, bool bf16dot = true);

// y[M, N] (+)= act(x[M, K] W^T + bias) with W packed in the panel layout
// (panel_layout.hpp), the layout the converter writes; the epilogue fuses an
// activation and/or a residual add.
void matmul_packed(const float* x, const float* wp, const float* bias, float* y, size_t M, size_t K, size_t N,
                   Epilogue e = {});
// The same over a packed W of any weight type (`wp`: its first element).
// bf16 / f16 weights are widened to f32 exactly in registers; x, the sums and
// y stay f32, with the same numerics (one FMA chain per output from zero, so
// independent of M and of the thread count). Same result as the f32 overload
// on the widened matrix, bit for bit. Except bf16 weights where bf16_isa_name()
// is not "f32": there x is rounded to bf16 and the products summed by the bf16
// dot-product instruction (defined by scalar/bf16dot.cpp), also independent of
// M and of threads.
// q8_0 / q4_0 weights (quant_layout.hpp): x is first quantized to q8 blocks,
// then integer block dot products are scaled and summed in f32 (the
// definition is scalar/quant.cpp); also independent of M and of threads.
void matmul_packed(const float* x, const void* wp, WeightType type, const float* bias, float* y, size_t M, size_t K,
                   size_t N, Epilogue e = {});
// How matmul_packed splits the panels of an M-row product for `threads`
// threads: ranges of this many panels (the last one shorter), an even number,
// each with enough work to be worth a task.
size_t panel_range_grain(size_t M, size_t K, size_t N, size_t threads);
// The product of matmul_packed, split by its caller. The constructor
// prepares x on the calling thread: quantized to q8 blocks (q8_0 / q4_0) or
// rounded to bf16 (bf16 weights on a bf16 dot-product set), into buffers of
// that thread which the next product made on it reuses. run(p0, p1) then
// computes the output columns of panels [p0, p1) of panels()
// (panel_layout.hpp), from any thread, while the product lives. Results are
// matmul_packed's bit for bit however the panels are split; matmul_packed is
// one of these whose ranges run on TBB.
class PanelProduct {
 public:
  PanelProduct(const float* x, const void* wp, WeightType type, const float* bias, float* y, size_t M, size_t K,
               size_t N, Epilogue e = {});
  size_t panels() const { return panel_count(N_); }
  void run(size_t p0, size_t p1) const;

 private:
  detail::PreparedX x_;  // x in the form the weight type's kernels want
  const void* wp_;
  WeightType type_;
  const float* bias_;
  float* y_;
  size_t M_, K_, N_;
  Epilogue e_;
};
// One query's causal attention for `heads` consecutive heads over n positions:
//   out_h[d] = sum_j softmax_j(scale * q_h . k_hj) v_hj[d],
// q and out: the heads' hd floats one after another; k, v: the first head's
// block 0, elements of `kv` (F32, or a 16-bit KV cache: BF16 / F16, widened
// exactly as loaded, so the result is bit for bit the f32 one on the widened
// values), laid out as `at` says. s: heads * n floats of scratch (left holding
// head h's probabilities at s + h * n). Serial: the engine runs tokens and
// groups of heads in parallel. Each head's result is the same whatever the
// block size and whichever heads share the call (attention_simd.hpp).
// window (0: all): a query sees only its last `window` positions (a sliding
// window, itself included); the earlier ones get probability 0 in s.
void attention_heads(const float* q, const void* k, const void* v, WeightType kv, size_t n, size_t heads, size_t hd,
                     KVBlocks at, float scale, float* s, float* out, size_t window = 0);
// attention_heads for `queries` consecutive positions of one sequence (a
// prefill): query i (q + i * q_stride) over the first n + i positions, its
// output at out + i * out_stride. Bit for bit attention_heads of each query
// alone; the SIMD kernels read each key and value row once for a tile of
// queries. s: queries * heads * (n + queries - 1) floats (query i's head h at
// (i * heads + h) * (n + queries - 1)).
void attention_queries(const float* q, size_t q_stride, const void* k, const void* v, WeightType kv, size_t n,
                       size_t queries, size_t heads, size_t hd, KVBlocks at, float scale, float* s, float* out,
                       size_t out_stride, size_t window = 0);
// One head over n contiguous rows of hd floats (s: n floats).
void attention_row(const float* q, const float* k, const float* v, size_t n, size_t hd, float scale, float* s,
                   float* out);
// Rounds n floats to bf16 / f16 (nearest, ties to even; as narrow_to_bf16 /
// narrow_to_f16, vectorized where the CPU converts f16 in hardware).
void narrow(const float* in, size_t n, WeightType to, uint16_t* out);
// n floats as elements of a KV cache of type `kv`: copied (f32) or narrowed.
void store_kv(const float* in, size_t n, WeightType kv, void* out);
// x[M, K] to q8 blocks (quant_layout.hpp); q: M * 32 * quant_blocks(K) bytes,
// scale and sum: M * quant_blocks(K) each.
void quantize_rows(const float* x, size_t M, size_t K, int8_t* q, float* scale, int32_t* sum);
float dot(const float* a, const float* b, size_t n);
void axpy(float a, const float* x, float* y, size_t n);                // y += a*x
void add(float* y, const float* x, size_t n);                          // y += x
void layernorm(const float* x, const float* gamma, const float* beta,  // beta may be null
               float* y, size_t rows, size_t dim, float eps);
void gelu_erf(float* x, size_t n);   // x * 0.5 * (1 + erf(x / sqrt(2)))
void gelu_tanh(float* x, size_t n);  // x * 0.5 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))
void softmax(float* x, size_t n);    // in place, max-subtracted
// y = x * (1 / sqrt(mean(x^2) + eps)) (* gamma), per row of dim; gamma may be null.
void rmsnorm(const float* x, const float* gamma, float* y, size_t rows, size_t dim, float eps);
// The gated MLP's activation: out[r, j] = act(in[r, j]) * in[r, ff + j] for
// rows of 2 ff values (the gate's, then the up projection's).
// (Gate, in epilogue.hpp: Silu, GeluErf, GeluTanh; silu(v) = v / (1 + exp(-v)).)
void glu(const float* in, float* out, size_t rows, size_t ff, Gate act);
void softcap(float* x, size_t n, float cap);  // x = cap * tanh(x / cap)
// Rotary positions on `heads` heads of hd values (x: one after another), in
// place: the first `rot` values of each head rotated by the angles whose
// cosines and sines are cos[i], sin[i], i < rot / 2. Pairs (i, i + rot / 2),
// or (2i, 2i + 1) when interleaved:
//   x'[a] = x[a] cos - x[b] sin,  x'[b] = x[b] cos + x[a] sin.
void rope(float* x, size_t heads, size_t hd, size_t rot, const float* cos, const float* sin, bool interleaved);

namespace scalar {
// The plain algorithmic reference: W row-major [N, K], sums in index order.
void matmul(const float* x, const float* w, const float* bias, float* y, size_t M, size_t K, size_t N);
void matmul_packed(const float* x, const float* wp, const float* bias, float* y, size_t M, size_t K, size_t N,
                   Epilogue e = {});
void matmul_packed(const float* x, const void* wp, WeightType type, const float* bias, float* y, size_t M, size_t K,
                   size_t N, Epilogue e = {});
void attention_row(const float* q, const float* k, const float* v, size_t n, size_t hd, float scale, float* s,
                   float* out);
void attention_row_bf16(const float* q, const uint16_t* k, const uint16_t* v, size_t n, size_t hd, float scale,
                        float* s, float* out);
void attention_row_f16(const float* q, const uint16_t* k, const uint16_t* v, size_t n, size_t hd, float scale, float* s,
                       float* out);
void narrow_f16(const float* in, size_t n, uint16_t* out);
// The scalar set's kernels behind matmul_packed (registry.hpp).
void gemm_panels(const float* x, const float* wp, const float* bias, float* y, size_t M, size_t K, size_t N, size_t p0,
                 size_t p1, Epilogue e);
void gemm_panels_bf16(const float* x, const uint16_t* wp, const float* bias, float* y, size_t M, size_t K, size_t N,
                      size_t p0, size_t p1, Epilogue e);
void gemm_panels_f16(const float* x, const uint16_t* wp, const float* bias, float* y, size_t M, size_t K, size_t N,
                     size_t p0, size_t p1, Epilogue e);
// One finished sum through the epilogue, in the documented order:
// v = acc (+ *bias); v = act(v); dst = v, or dst += v when accumulating.
void store_epilogue(float acc, const float* bias, Epilogue e, float& dst);
void gemm_panels_q8_0(const QuantizedRows& x, const uint8_t* wp, const float* bias, float* y, size_t M, size_t K,
                      size_t N, size_t p0, size_t p1, Epilogue e);
void gemm_panels_q4_0(const QuantizedRows& x, const uint8_t* wp, const float* bias, float* y, size_t M, size_t K,
                      size_t N, size_t p0, size_t p1, Epilogue e);
void quantize_rows(const float* x, size_t M, size_t K, int8_t* q, float* scale, int32_t* sum);
float dot(const float* a, const float* b, size_t n);
void axpy(float a, const float* x, float* y, size_t n);
void add(float* y, const float* x, size_t n);
void layernorm(const float* x, const float* gamma, const float* beta, float* y, size_t rows, size_t dim, float eps);
void gelu_erf(float* x, size_t n);
void gelu_tanh(float* x, size_t n);
void relu_squared(float* x, size_t n);  // max(x, 0)^2
void softmax(float* x, size_t n);
void rmsnorm(const float* x, const float* gamma, float* y, size_t rows, size_t dim, float eps);
void glu(const float* in, float* out, size_t rows, size_t ff, Gate act);
void softcap(float* x, size_t n, float cap);
void rope(float* x, size_t heads, size_t hd, size_t rot, const float* cos, const float* sin, bool interleaved);
}  // namespace scalar

}  // namespace mmgpt::kernels
