// Scalar reference of the panel-packed matmul: the specification of
// gemm_simd.hpp. One output at a time, summed in float in index order, then
// the epilogue in the documented order (epilogue.hpp). 16-bit weights are
// widened to f32 exactly (core/half.hpp) before the same arithmetic; their
// panels go in pairs (panel_layout.hpp).
#include <vector>

#include "core/half.hpp"
#include "core/panel_layout.hpp"
#include "kernels/kernels.hpp"
#include "kernels/registry.hpp"

namespace mmgpt::kernels::scalar {
namespace {

template <class E, class Widen>
void gemm_panels_of(const float* x, const E* wp, const float* bias, float* y, size_t M, size_t K, size_t N, size_t p0,
                    size_t p1, Epilogue e, Widen widen) {
  const size_t n1 = p1 * kPanelWidth < N ? p1 * kPanelWidth : N;
  for (size_t m = 0; m < M; ++m) {
    const float* xm = x + m * K;
    for (size_t n = p0 * kPanelWidth; n < n1; ++n) {
      const PanelSteps steps = panel_steps_of<E>(N, K, n / kPanelWidth);
      const E* wn = wp + n % kPanelWidth;
      float acc = 0.0f;
      for (size_t k = 0; k < K; ++k) acc += xm[k] * widen(wn[steps.at(K, k)]);
      store_epilogue(acc, bias ? bias + n : nullptr, e, y[m * N + n]);
    }
  }
}

}  // namespace

void store_epilogue(float acc, const float* bias, Epilogue e, float& dst) {
  float v = bias ? acc + *bias : acc;
  if (e.act == Activation::GeluErf) gelu_erf(&v, 1);
  if (e.act == Activation::GeluTanh) gelu_tanh(&v, 1);
  if (e.act == Activation::ReluSquared) relu_squared(&v, 1);
  dst = e.accumulate ? dst + v : v;
}

void gemm_panels(const float* x, const float* wp, const float* bias, float* y, size_t M, size_t K, size_t N, size_t p0,
                 size_t p1, Epilogue e) {
  gemm_panels_of(x, wp, bias, y, M, K, N, p0, p1, e, [](float v) { return v; });
}

void gemm_panels_bf16(const float* x, const uint16_t* wp, const float* bias, float* y, size_t M, size_t K, size_t N,
                      size_t p0, size_t p1, Epilogue e) {
  gemm_panels_of(x, wp, bias, y, M, K, N, p0, p1, e, [](uint16_t v) { return bf16_to_f32(v); });
}

void gemm_panels_f16(const float* x, const uint16_t* wp, const float* bias, float* y, size_t M, size_t K, size_t N,
                     size_t p0, size_t p1, Epilogue e) {
  gemm_panels_of(x, wp, bias, y, M, K, N, p0, p1, e, [](uint16_t v) { return f16_to_f32(v); });
}

}  // namespace mmgpt::kernels::scalar

namespace mmgpt::kernels::detail {

const MatmulKernels& scalar_matmul_kernels() {
  static const MatmulKernels k = [] {
    MatmulKernels m{"scalar", XForm::F32};
    m.panels[static_cast<size_t>(WeightType::F32)] = &f32_entry<&scalar::gemm_panels>;
    m.panels[static_cast<size_t>(WeightType::BF16)] = &half_entry<&scalar::gemm_panels_bf16>;
    m.panels[static_cast<size_t>(WeightType::F16)] = &half_entry<&scalar::gemm_panels_f16>;
    return m;
  }();
  return k;
}

}  // namespace mmgpt::kernels::detail

namespace mmgpt::kernels::scalar {

void matmul_packed(const float* x, const float* wp, const float* bias, float* y, size_t M, size_t K, size_t N,
                   Epilogue e) {
  gemm_panels(x, wp, bias, y, M, K, N, 0, panel_count(N), e);
}

void matmul_packed(const float* x, const void* wp, WeightType type, const float* bias, float* y, size_t M, size_t K,
                   size_t N, Epilogue e) {
  // The scalar set's kernel for the type, with x prepared as it wants.
  const detail::KernelSet& set = detail::scalar_kernel_set();
  const detail::MatmulKernels& k = *set.matmul[static_cast<size_t>(type)];
  detail::PreparedX px;
  px.f32 = x;
  std::vector<int8_t> q;
  std::vector<float> scale;
  std::vector<int32_t> sum;
  if (k.x == detail::XForm::Q8Blocks) {
    const size_t Kb = quant_blocks(K);
    q.resize(M * Kb * kQuantBlock), scale.resize(M * Kb), sum.resize(M * Kb);
    set.quantize_rows(x, M, K, q.data(), scale.data(), sum.data());
    px.q8 = QuantizedRows{q.data(), scale.data(), sum.data(), Kb};
  }
  k.panels[static_cast<size_t>(type)](px, wp, bias, y, M, K, N, 0, panel_count(N), e);
}

}  // namespace mmgpt::kernels::scalar
