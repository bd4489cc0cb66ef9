// The scalar reference: the specification every SIMD instantiation is tested
// against. Deliberately plain: one element at a time, dot products accumulated
// in float in index order, std::erf / std::tanh / std::exp. Operation order
// follows PyTorch's CPU kernels where it matters (gelu, layernorm), so the
// reference is also what the PyTorch comparisons expect.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/half.hpp"
#include "kernels/constants.hpp"
#include "kernels/kernels.hpp"
#include "kernels/registry.hpp"

namespace mmgpt::kernels::scalar {

void matmul(const float* x, const float* w, const float* bias, float* y, size_t M, size_t K, size_t N) {
  for (size_t m = 0; m < M; ++m) {
    const float* xm = x + m * K;
    for (size_t n = 0; n < N; ++n) {
      const float* wn = w + n * K;
      float acc = 0.0f;
      for (size_t k = 0; k < K; ++k) acc += xm[k] * wn[k];
      y[m * N + n] = bias ? acc + bias[n] : acc;
    }
  }
}

float dot(const float* a, const float* b, size_t n) {
  float acc = 0.0f;
  for (size_t i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}

void axpy(float a, const float* x, float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] += a * x[i];
}

void add(float* y, const float* x, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] += x[i];
}

void layernorm(const float* x, const float* gamma, const float* beta, float* y, size_t rows, size_t dim, float eps) {
  if (dim == 0) return;
  const float fdim = static_cast<float>(dim);
  for (size_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    // Two passes (mean, then the biased variance about it) rather than
    // E[x^2] - E[x]^2, which cancels catastrophically when |mean| >> std.
    float sum = 0.0f;
    for (size_t i = 0; i < dim; ++i) sum += xr[i];
    const float mean = sum / fdim;
    float ss = 0.0f;
    for (size_t i = 0; i < dim; ++i) {
      const float d = xr[i] - mean;
      ss += d * d;
    }
    const float rstd = 1.0f / std::sqrt(ss / fdim + eps);
    for (size_t i = 0; i < dim; ++i) {
      const float v = (xr[i] - mean) * rstd * gamma[i];
      yr[i] = beta ? v + beta[i] : v;
    }
  }
}

void rmsnorm(const float* x, const float* gamma, float* y, size_t rows, size_t dim, float eps) {
  if (dim == 0) return;
  const float fdim = static_cast<float>(dim);
  for (size_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    float ss = 0.0f;
    for (size_t i = 0; i < dim; ++i) ss += xr[i] * xr[i];
    // PyTorch's order: x * rsqrt(mean(x^2) + eps), then the weight.
    const float r_rms = 1.0f / std::sqrt(ss / fdim + eps);
    for (size_t i = 0; i < dim; ++i) yr[i] = gamma ? xr[i] * r_rms * gamma[i] : xr[i] * r_rms;
  }
}

void glu(const float* in, float* out, size_t rows, size_t ff, Gate act) {
  for (size_t r = 0; r < rows; ++r) {
    const float* g = in + r * 2 * ff;
    float* o = out + r * ff;
    for (size_t j = 0; j < ff; ++j) {
      float a = g[j];
      if (act == Gate::Silu)
        a = a / (1.0f + std::exp(-a));  // PyTorch's silu: x / (1 + exp(-x))
      else if (act == Gate::GeluErf)
        gelu_erf(&a, 1);
      else
        gelu_tanh(&a, 1);
      o[j] = a * g[ff + j];
    }
  }
}

void softcap(float* x, size_t n, float cap) {
  for (size_t i = 0; i < n; ++i) x[i] = cap * std::tanh(x[i] / cap);
}

void rope(float* x, size_t heads, size_t hd, size_t rot, const float* cos, const float* sin, bool interleaved) {
  const size_t half = rot / 2;
  for (size_t h = 0; h < heads; ++h) {
    float* xh = x + h * hd;
    for (size_t i = 0; i < half; ++i) {
      float& a = interleaved ? xh[2 * i] : xh[i];
      float& b = interleaved ? xh[2 * i + 1] : xh[i + half];
      // Two rounded products, then the sum, as PyTorch's x * cos + rotate_half(x) * sin.
      const float pa = a * cos[i], qa = b * sin[i], pb = b * cos[i], qb = a * sin[i];
      const float na = pa - qa, nb = pb + qb;
      a = na;
      b = nb;
    }
  }
}

void gelu_erf(float* x, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float v = x[i];
    x[i] = v * 0.5f * (1.0f + std::erf(v * detail::kInvSqrt2));
  }
}

void gelu_tanh(float* x, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float inner = detail::kSqrt2OverPi * (v + detail::kGeluKappa * (v * v * v));
    x[i] = 0.5f * v * (1.0f + std::tanh(inner));
  }
}

void relu_squared(float* x, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float r = x[i] > 0.0f ? x[i] : 0.0f;
    x[i] = r * r;
  }
}

void attention_row(const float* q, const float* k, const float* v, size_t n, size_t hd, float scale, float* s,
                   float* out) {
  for (size_t j = 0; j < n; ++j) s[j] = dot(q, k + j * hd, hd) * scale;
  softmax(s, n);
  for (size_t d = 0; d < hd; ++d) out[d] = 0.0f;
  for (size_t j = 0; j < n; ++j) axpy(s[j], v + j * hd, out, hd);
}

namespace {

// The reference on a 16-bit cache: widen the rows exactly, then the f32 row.
template <class Widen>
void attention_row_widened(const float* q, const uint16_t* k, const uint16_t* v, size_t n, size_t hd, float scale,
                           float* s, float* out, Widen widen) {
  std::vector<float> kw(n * hd), vw(n * hd);
  for (size_t i = 0; i < n * hd; ++i) kw[i] = widen(k[i]), vw[i] = widen(v[i]);
  attention_row(q, kw.data(), vw.data(), n, hd, scale, s, out);
}

}  // namespace

void attention_row_bf16(const float* q, const uint16_t* k, const uint16_t* v, size_t n, size_t hd, float scale,
                        float* s, float* out) {
  attention_row_widened(q, k, v, n, hd, scale, s, out, [](uint16_t e) { return bf16_to_f32(e); });
}

void attention_row_f16(const float* q, const uint16_t* k, const uint16_t* v, size_t n, size_t hd, float scale, float* s,
                       float* out) {
  attention_row_widened(q, k, v, n, hd, scale, s, out, [](uint16_t e) { return f16_to_f32(e); });
}

void narrow_f16(const float* in, size_t n, uint16_t* out) { narrow_to_f16(in, n, out); }

void softmax(float* x, size_t n) {
  if (n == 0) return;
  float mx = -std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
  float sum = 0.0f;
  for (size_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  for (size_t i = 0; i < n; ++i) x[i] = x[i] / sum;
}

}  // namespace mmgpt::kernels::scalar

namespace mmgpt::kernels::detail {

namespace {
// The scalar set's attention entries: each head's rows gathered from the blocks
// into one run, then the reference row.
// With a window, only the last `window` rows are gathered (the others get
// probability 0).
template <class E, class Row>
void attention_entry_of(const float* q, const E* k, const E* v, size_t n, size_t heads, size_t hd, KVBlocks at,
                        float scale, float* s, size_t s_stride, float* out, Row row, size_t window) {
  const size_t first = window != 0 && n > window ? n - window : 0, m = n - first;
  std::vector<E> kr(m * hd), vr(m * hd);
  for (size_t h = 0; h < heads; ++h) {
    for (size_t j = first; j < n; ++j) {
      const size_t from = (j / at.block) * at.block_stride + at.head_offset(h) + (j % at.block) * hd;
      std::copy(k + from, k + from + hd, kr.begin() + (j - first) * hd);
      std::copy(v + from, v + from + hd, vr.begin() + (j - first) * hd);
    }
    std::fill(s + h * s_stride, s + h * s_stride + first, 0.0f);
    row(q + h * hd, kr.data(), vr.data(), m, hd, scale, s + h * s_stride + first, out + h * hd);
  }
}
// Query i against n + i positions, one query at a time.
template <class E, auto Row>
void attention_entry(const float* q, size_t q_stride, const void* k, const void* v, size_t n, size_t queries,
                     size_t heads, size_t hd, KVBlocks at, float scale, float* s, float* out, size_t out_stride,
                     size_t window) {
  const size_t S = n + queries - 1;
  for (size_t i = 0; i < queries; ++i)
    attention_entry_of(q + i * q_stride, static_cast<const E*>(k), static_cast<const E*>(v), n + i, heads, hd, at,
                       scale, s + i * heads * S, S, out + i * out_stride, Row, window);
}
}  // namespace

const KernelSet& scalar_kernel_set() {
  static const KernelSet set = [] {
    KernelSet s{"scalar"};
    s.use(scalar_matmul_kernels()).use(scalar_quant_kernels());
    s.attention[static_cast<size_t>(WeightType::F32)] = &attention_entry<float, &scalar::attention_row>;
    s.attention[static_cast<size_t>(WeightType::BF16)] = &attention_entry<uint16_t, &scalar::attention_row_bf16>;
    s.attention[static_cast<size_t>(WeightType::F16)] = &attention_entry<uint16_t, &scalar::attention_row_f16>;
    s.dot = &scalar::dot, s.axpy = &scalar::axpy, s.add = &scalar::add;
    s.layernorm = &scalar::layernorm, s.gelu_erf = &scalar::gelu_erf, s.gelu_tanh = &scalar::gelu_tanh;
    s.softmax = &scalar::softmax, s.narrow_f16 = &scalar::narrow_f16;
    s.rmsnorm = &scalar::rmsnorm, s.glu = &scalar::glu, s.softcap = &scalar::softcap, s.rope = &scalar::rope;
    return s;
  }();
  return set;
}

}  // namespace mmgpt::kernels::detail
