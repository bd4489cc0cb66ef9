#pragma once
// The SIMD kernels, written once against xsimd 8.1 batch types and
// instantiated per ISA by the kernels.cpp of x86/avx2, x86/avx512 and
// arm/neon (each compiled with its folder's flags, sources.cmake). Include
// this only from those files: everything here is compiled for the TU's ISA.
//
// Numerics (the scalar reference in scalar/ is the specification):
// - dot products use FMA and several accumulators, so they differ from the
//   index-order reference by rounding only (identical on integer data);
// - add/axpy do an unfused multiply then add, bit-identical to the reference;
// - gelu/softmax use xsimd::erf/tanh/exp (measured against the correctly
//   rounded double results: erf <= 2 ulp, tanh <= 1 ulp, exp <= 1 ulp for
//   normal results; exp flushes results below FLT_MIN to 0, which is harmless
//   in softmax since the sum is >= 1);
// - elementwise tails go through a padded vector, so every element of every
//   length gets the same vector arithmetic, wherever it sits in the array.
#include <cstddef>

#include <xsimd/xsimd.hpp>

#include "kernels/constants.hpp"
#include "kernels/registry.hpp"
#include "kernels/simd/attention_simd.hpp"
#include "kernels/simd/gemm_simd.hpp"

// Each ISA TU compiles the same inline functions (std::, xsimd internals)
// with different -m flags; where the compiler emits them out of line the
// linker keeps one copy for all TUs, which could put AVX-512 code on the AVX2
// or scalar path. So every kernel a set registers is flattened (all its
// callees inlined, but for the GEMM's microkernels, members of
// PanelGemm<Arch, ...> flattened on their own: gemm_simd.hpp), and this
// header avoids std:: helpers. At -O0 GCC ignores flatten and a few xsimd
// helpers are shared by the two x86 TUs, but their AVX-512-TU copies contain only VEX (AVX)
// instructions and are reached only from the SIMD paths, so even a Debug
// build cannot run AVX-512 code on an AVX2 CPU.
#define MMGPT_SIMD_ENTRY [[gnu::flatten]]

namespace mmgpt::kernels::simd {

template <class Arch>
struct Kernels {
  using B = xsimd::batch<float, Arch>;
  static constexpr size_t W = B::size;

  // ---------------------------------------------------------------- matmul
  // The panel GEMMs, the longest to compile: declared here, defined in
  // gemm_entries.hpp, and instantiated by each set's gemm_f32.cpp,
  // gemm_bf16.cpp and gemm_f16.cpp, so they build in parallel with the rest.
  MMGPT_SIMD_ENTRY static void gemm_panels(const float* x, const float* wp, const float* bias, float* y, size_t M,
                                           size_t K, size_t N, size_t p0, size_t p1, Epilogue e);
  MMGPT_SIMD_ENTRY static void gemm_panels_bf16(const float* x, const uint16_t* wp, const float* bias, float* y,
                                                size_t M, size_t K, size_t N, size_t p0, size_t p1, Epilogue e);
  MMGPT_SIMD_ENTRY static void gemm_panels_f16(const float* x, const uint16_t* wp, const float* bias, float* y,
                                               size_t M, size_t K, size_t N, size_t p0, size_t p1, Epilogue e);

  // Queries over heads of a KV cache of element type WT (k, v: its elements).
  template <class WT = WeightF32>
  MMGPT_SIMD_ENTRY static void attention_queries(const float* q, size_t q_stride, const void* k, const void* v,
                                                 size_t n, size_t queries, size_t heads, size_t hd, KVBlocks at,
                                                 float scale, float* s, float* out, size_t out_stride,
                                                 size_t window) {
    using E = typename WT::E;
    AttentionHeads<Arch, Kernels, WT>::run_queries(q, q_stride, static_cast<const E*>(k), static_cast<const E*>(v), n,
                                                   queries, heads, hd, at, scale, s, out, out_stride, window);
  }

  // f32 -> f16, round to nearest even (the hardware conversion; the tail
  // through a padded vector, so every element gets the same instruction).
  static auto narrow_vec_f16(B v) {
#if defined(__AVX512F__)
    if constexpr (W == 16) return _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
#endif
#if defined(__F16C__)
    if constexpr (W == 8) return _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
#endif
#if defined(__aarch64__)
    if constexpr (W == 4) return vreinterpret_u16_f16(vcvt_f16_f32(v));
#endif
  }

  static void store_f16(uint16_t* p, B v) {
#if defined(__AVX512F__)
    if constexpr (W == 16) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), narrow_vec_f16(v));
      return;
    }
#endif
#if defined(__F16C__)
    if constexpr (W == 8) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(p), narrow_vec_f16(v));
      return;
    }
#endif
#if defined(__aarch64__)
    if constexpr (W == 4) vst1_u16(p, narrow_vec_f16(v));
#endif
  }

  MMGPT_SIMD_ENTRY static void narrow_f16(const float* in, size_t n, uint16_t* out) {
    size_t i = 0;
    for (; i + W <= n; i += W) store_f16(out + i, B::load_unaligned(in + i));
    if (i < n) {
      alignas(64) float t[W] = {};
      alignas(64) uint16_t o[W];
      for (size_t j = 0; i + j < n; ++j) t[j] = in[i + j];
      store_f16(o, B::load_aligned(t));
      for (size_t j = 0; i + j < n; ++j) out[i + j] = o[j];
    }
  }

  // ------------------------------------------------------------ reductions
  MMGPT_SIMD_ENTRY static float dot(const float* a, const float* b, size_t n) {
    // Four accumulators hide the FMA latency.
    B acc0(0.0f), acc1(0.0f), acc2(0.0f), acc3(0.0f);
    size_t i = 0;
    for (; i + 4 * W <= n; i += 4 * W) {
      acc0 = xsimd::fma(B::load_unaligned(a + i), B::load_unaligned(b + i), acc0);
      acc1 = xsimd::fma(B::load_unaligned(a + i + W), B::load_unaligned(b + i + W), acc1);
      acc2 = xsimd::fma(B::load_unaligned(a + i + 2 * W), B::load_unaligned(b + i + 2 * W), acc2);
      acc3 = xsimd::fma(B::load_unaligned(a + i + 3 * W), B::load_unaligned(b + i + 3 * W), acc3);
    }
    for (; i + W <= n; i += W) acc0 = xsimd::fma(B::load_unaligned(a + i), B::load_unaligned(b + i), acc0);
    float s = xsimd::hadd((acc0 + acc1) + (acc2 + acc3));
    for (; i < n; ++i) s += a[i] * b[i];
    return s;
  }

  static float sum(const float* x, size_t n) {
    B acc0(0.0f), acc1(0.0f);
    size_t i = 0;
    for (; i + 2 * W <= n; i += 2 * W) {
      acc0 += B::load_unaligned(x + i);
      acc1 += B::load_unaligned(x + i + W);
    }
    for (; i + W <= n; i += W) acc0 += B::load_unaligned(x + i);
    float s = xsimd::hadd(acc0 + acc1);
    for (; i < n; ++i) s += x[i];
    return s;
  }

  // sum of (x[i] - mean)^2
  static float sum_sq_dev(const float* x, float mean, size_t n) {
    const B mv(mean);
    B acc0(0.0f), acc1(0.0f);
    size_t i = 0;
    for (; i + 2 * W <= n; i += 2 * W) {
      const B d0 = B::load_unaligned(x + i) - mv;
      const B d1 = B::load_unaligned(x + i + W) - mv;
      acc0 = xsimd::fma(d0, d0, acc0);
      acc1 = xsimd::fma(d1, d1, acc1);
    }
    for (; i + W <= n; i += W) {
      const B d = B::load_unaligned(x + i) - mv;
      acc0 = xsimd::fma(d, d, acc0);
    }
    float s = xsimd::hadd(acc0 + acc1);
    for (; i < n; ++i) {
      const float d = x[i] - mean;
      s += d * d;
    }
    return s;
  }

  // ----------------------------------------------------------- elementwise
  MMGPT_SIMD_ENTRY static void axpy(float a, const float* x, float* y, size_t n) {
    const B av(a);
    size_t i = 0;
    for (; i + W <= n; i += W) (B::load_unaligned(y + i) + av * B::load_unaligned(x + i)).store_unaligned(y + i);
    for (; i < n; ++i) y[i] += a * x[i];
  }

  MMGPT_SIMD_ENTRY static void add(float* y, const float* x, size_t n) {
    size_t i = 0;
    for (; i + W <= n; i += W) (B::load_unaligned(y + i) + B::load_unaligned(x + i)).store_unaligned(y + i);
    for (; i < n; ++i) y[i] += x[i];
  }

  // x[i] = f(x[i]) for a vector function f; the tail is padded with `pad`.
  template <class F>
  static void map_inplace(float* x, size_t n, float pad, F f) {
    size_t i = 0;
    for (; i + W <= n; i += W) f(B::load_unaligned(x + i)).store_unaligned(x + i);
    if (i < n) {
      alignas(64) float buf[W];
      for (size_t j = 0; j < W; ++j) buf[j] = i + j < n ? x[i + j] : pad;
      f(B::load_aligned(buf)).store_aligned(buf);
      for (size_t j = 0; i + j < n; ++j) x[i + j] = buf[j];
    }
  }

  static B gelu_erf_vec(B v) { return v * B(0.5f) * (B(1.0f) + xsimd::erf(v * B(detail::kInvSqrt2))); }

  static B gelu_tanh_vec(B v) {
    const B inner = B(detail::kSqrt2OverPi) * (v + B(detail::kGeluKappa) * (v * v * v));
    return B(0.5f) * v * (B(1.0f) + xsimd::tanh(inner));
  }

  MMGPT_SIMD_ENTRY static void gelu_erf(float* x, size_t n) { map_inplace(x, n, 0.0f, gelu_erf_vec); }
  MMGPT_SIMD_ENTRY static void gelu_tanh(float* x, size_t n) { map_inplace(x, n, 0.0f, gelu_tanh_vec); }

  // a / b correctly rounded, as the reference's float division. xsimd 8.1
  // divides float batches on NEON with a reciprocal estimate and two Newton
  // steps (up to 1 ulp off), so on AArch64 use its IEEE vector division
  // instruction instead.
  static B divide(B a, B b) {
#if defined(__aarch64__)
    if constexpr (__is_same(Arch, xsimd::neon64)) return B(vdivq_f32(a, b));
#endif
    return a / b;
  }

  MMGPT_SIMD_ENTRY static void softmax(float* x, size_t n) {
    if (n == 0) return;
    constexpr float neg_inf = -__builtin_inff();
    B mv(neg_inf);
    size_t i = 0;
    for (; i + W <= n; i += W) mv = xsimd::max(mv, B::load_unaligned(x + i));
    alignas(64) float lanes[W];
    mv.store_aligned(lanes);
    float mx = neg_inf;
    for (size_t j = 0; j < W; ++j) mx = lanes[j] > mx ? lanes[j] : mx;
    for (; i < n; ++i) mx = x[i] > mx ? x[i] : mx;

    // exp(x - max) and its sum; padding with -inf contributes exp(-inf) = 0.
    const B mxv(mx);
    B acc(0.0f);
    map_inplace(x, n, neg_inf, [&](B v) {
      const B e = xsimd::exp(v - mxv);
      acc += e;
      return e;
    });
    const float total = xsimd::hadd(acc);

    const B tv(total);
    i = 0;
    for (; i + W <= n; i += W) divide(B::load_unaligned(x + i), tv).store_unaligned(x + i);
    for (; i < n; ++i) x[i] = x[i] / total;
  }

  MMGPT_SIMD_ENTRY static void layernorm(const float* x, const float* gamma, const float* beta, float* y, size_t rows,
                                         size_t dim, float eps) {
    if (dim == 0) return;
    // Divisions rather than products with 1/dim: a product followed by
    // "+ eps" may be contracted into an FMA in this ISA-flagged TU, which
    // would round differently from the reference.
    const float fdim = static_cast<float>(dim);
    for (size_t r = 0; r < rows; ++r) {
      const float* xr = x + r * dim;
      float* yr = y + r * dim;
      // Two passes, as in the reference: mean, then the biased variance.
      const float mean = sum(xr, dim) / fdim;
      const float rstd = 1.0f / __builtin_sqrtf(sum_sq_dev(xr, mean, dim) / fdim + eps);
      const B mv(mean), rv(rstd);
      size_t i = 0;
      // Same operation order as the reference: ((x - mean) * rstd) * gamma + beta.
      if (beta) {
        for (; i + W <= dim; i += W) {
          const B v = (B::load_unaligned(xr + i) - mv) * rv * B::load_unaligned(gamma + i);
          (v + B::load_unaligned(beta + i)).store_unaligned(yr + i);
        }
        for (; i < dim; ++i) yr[i] = (xr[i] - mean) * rstd * gamma[i] + beta[i];
      } else {
        for (; i + W <= dim; i += W)
          ((B::load_unaligned(xr + i) - mv) * rv * B::load_unaligned(gamma + i)).store_unaligned(yr + i);
        for (; i < dim; ++i) yr[i] = (xr[i] - mean) * rstd * gamma[i];
      }
    }
  }

  // sum of x[i]^2
  static float sum_sq(const float* x, size_t n) {
    B acc0(0.0f), acc1(0.0f);
    size_t i = 0;
    for (; i + 2 * W <= n; i += 2 * W) {
      const B a = B::load_unaligned(x + i), b = B::load_unaligned(x + i + W);
      acc0 = xsimd::fma(a, a, acc0);
      acc1 = xsimd::fma(b, b, acc1);
    }
    for (; i + W <= n; i += W) {
      const B a = B::load_unaligned(x + i);
      acc0 = xsimd::fma(a, a, acc0);
    }
    float s = xsimd::hadd(acc0 + acc1);
    for (; i < n; ++i) s += x[i] * x[i];
    return s;
  }

  MMGPT_SIMD_ENTRY static void rmsnorm(const float* x, const float* gamma, float* y, size_t rows, size_t dim,
                                       float eps) {
    if (dim == 0) return;
    const float fdim = static_cast<float>(dim);
    for (size_t r = 0; r < rows; ++r) {
      const float* xr = x + r * dim;
      float* yr = y + r * dim;
      const float r_rms = 1.0f / __builtin_sqrtf(sum_sq(xr, dim) / fdim + eps);
      const B rv(r_rms);
      size_t i = 0;
      // The reference's order: (x * r) * gamma.
      if (gamma) {
        for (; i + W <= dim; i += W)
          (B::load_unaligned(xr + i) * rv * B::load_unaligned(gamma + i)).store_unaligned(yr + i);
        for (; i < dim; ++i) yr[i] = xr[i] * r_rms * gamma[i];
      } else {
        for (; i + W <= dim; i += W) (B::load_unaligned(xr + i) * rv).store_unaligned(yr + i);
        for (; i < dim; ++i) yr[i] = xr[i] * r_rms;
      }
    }
  }

  static B silu_vec(B v) { return divide(v, B(1.0f) + xsimd::exp(-v)); }

  template <class F>
  static void glu_rows(const float* in, float* out, size_t rows, size_t ff, F act) {
    for (size_t r = 0; r < rows; ++r) {
      const float* g = in + r * 2 * ff;
      const float* u = g + ff;
      float* o = out + r * ff;
      size_t j = 0;
      for (; j + W <= ff; j += W) (act(B::load_unaligned(g + j)) * B::load_unaligned(u + j)).store_unaligned(o + j);
      if (j < ff) {  // the tail through a padded vector: the same arithmetic for every element
        alignas(64) float gb[W], ub[W];
        for (size_t k = 0; k < W; ++k) gb[k] = j + k < ff ? g[j + k] : 0.0f, ub[k] = j + k < ff ? u[j + k] : 0.0f;
        (act(B::load_aligned(gb)) * B::load_aligned(ub)).store_aligned(gb);
        for (size_t k = 0; j + k < ff; ++k) o[j + k] = gb[k];
      }
    }
  }

  MMGPT_SIMD_ENTRY static void glu(const float* in, float* out, size_t rows, size_t ff, Gate act) {
    if (act == Gate::Silu) return glu_rows(in, out, rows, ff, silu_vec);
    if (act == Gate::GeluErf) return glu_rows(in, out, rows, ff, gelu_erf_vec);
    glu_rows(in, out, rows, ff, gelu_tanh_vec);
  }

  MMGPT_SIMD_ENTRY static void softcap(float* x, size_t n, float cap) {
    const B c(cap);
    map_inplace(x, n, 0.0f, [&](B v) { return c * xsimd::tanh(divide(v, c)); });
  }

  MMGPT_SIMD_ENTRY static void rope(float* x, size_t heads, size_t hd, size_t rot, const float* cos, const float* sin,
                                    bool interleaved) {
    const size_t half = rot / 2;
    for (size_t h = 0; h < heads; ++h) {
      float* xh = x + h * hd;
      size_t i = 0;
      if (!interleaved) {
        for (; i + W <= half; i += W) {
          const B a = B::load_unaligned(xh + i), b = B::load_unaligned(xh + half + i);
          const B c = B::load_unaligned(cos + i), s = B::load_unaligned(sin + i);
          (a * c - b * s).store_unaligned(xh + i);
          (b * c + a * s).store_unaligned(xh + half + i);
        }
      }
      for (; i < half; ++i) {
        float& a = interleaved ? xh[2 * i] : xh[i];
        float& b = interleaved ? xh[2 * i + 1] : xh[i + half];
        const float na = a * cos[i] - b * sin[i], nb = b * cos[i] + a * sin[i];
        a = na;
        b = nb;
      }
    }
  }

  // The panel matmuls (f32, and bf16 / f16 widened to f32), by weight type.
  static const detail::MatmulKernels& matmul_kernels(const char* name) {
    static const detail::MatmulKernels k = [name] {
      detail::MatmulKernels m{name, detail::XForm::F32, {}, &detail::scalar_matmul_kernels()};
      m.panels[static_cast<size_t>(WeightType::F32)] = &detail::f32_entry<&gemm_panels>;
      m.panels[static_cast<size_t>(WeightType::BF16)] = &detail::half_entry<&gemm_panels_bf16>;
      m.panels[static_cast<size_t>(WeightType::F16)] = &detail::half_entry<&gemm_panels_f16>;
      return m;
    }();
    return k;
  }

  // Everything of this instruction set but the intrinsics kernels, which
  // its set.cpp adds where the CPU has their extensions.
  static detail::KernelSet set(const char* name) {
    detail::KernelSet s{name};
    s.use(matmul_kernels(name));
    s.attention[static_cast<size_t>(WeightType::F32)] = &attention_queries<WeightF32>;
    s.attention[static_cast<size_t>(WeightType::BF16)] = &attention_queries<WeightBF16>;
    s.attention[static_cast<size_t>(WeightType::F16)] = &attention_queries<WeightF16>;
    s.dot = &dot, s.axpy = &axpy, s.add = &add, s.layernorm = &layernorm;
    s.gelu_erf = &gelu_erf, s.gelu_tanh = &gelu_tanh, s.softmax = &softmax, s.narrow_f16 = &narrow_f16;
    s.rmsnorm = &rmsnorm, s.glu = &glu, s.softcap = &softcap, s.rope = &rope;
    return s;
  }
};

}  // namespace mmgpt::kernels::simd
