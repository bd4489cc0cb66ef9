// The kernel sets themselves (kernels/registry.hpp): every set this CPU
// runs registers a matmul for every weight type of core/weight_type.hpp and
// an attention for every KV cache type, and each registered matmul gives its
// reference's bits on awkward shapes. Driven by the sets, so a new weight
// type (a row) or instruction set (a folder) is tested here without new
// test code.
//
// Data are small integers: every product and partial sum is exact in f32, so
// the f32-form kernels (f32, and bf16 / f16 widened exactly) must equal the
// scalar reference bit for bit whatever their order of summation; the
// quantized and bf16 dot-product kernels are defined bit for bit by their
// own scalar references.
#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "core/panel_layout.hpp"
#include "core/weight_type.hpp"
#include "kernels_testing.hpp"

namespace kd = mmgpt::kernels::detail;
using mmgpt::WeightType;

namespace {

// y = the set's matmul of weight type t over panels split in two ranges.
std::vector<float> product(const kd::KernelSet& set, const kd::MatmulKernels& k, WeightType t,
                           const std::vector<float>& x, const std::vector<uint8_t>& w, const std::vector<float>& bias,
                           std::vector<float> y, size_t M, size_t K, size_t N, mmgpt::kernels::Epilogue e) {
  kd::PreparedX px;
  px.f32 = x.data();
  std::vector<int8_t> q;
  std::vector<float> scale;
  std::vector<int32_t> sum;
  std::vector<uint16_t> rounded;
  if (k.x == kd::XForm::Q8Blocks) {
    const size_t Kb = mmgpt::quant_blocks(K);
    q.resize(M * Kb * mmgpt::kQuantBlock), scale.resize(M * Kb), sum.resize(M * Kb);
    set.quantize_rows(x.data(), M, K, q.data(), scale.data(), sum.data());
    px.q8 = mmgpt::QuantizedRows{q.data(), scale.data(), sum.data(), Kb};
  } else if (k.x == kd::XForm::Bf16Rows) {
    rounded.resize(M * kd::bf16dot_row_elems(K));
    kd::bf16dot_round_rows(x.data(), M, K, rounded.data());
    px.bf16 = rounded.data();
  }
  const size_t panels = mmgpt::panel_count(N), split = panels / 2;
  const kd::PanelKernel run = k.panels[static_cast<size_t>(t)];
  run(px, w.data(), bias.data(), y.data(), M, K, N, 0, split, e);
  run(px, w.data(), bias.data(), y.data(), M, K, N, split, panels, e);
  return y;
}

}  // namespace

TEST_CASE("every kernel set registers every weight type and KV cache type") {
  const std::vector<const kd::KernelSet*> sets = kd::runnable_kernel_sets();
  for (const kd::KernelSet* s : sets) MESSAGE("kernel set runnable here: " << std::string(s->name));
  for (const kd::KernelSet* s : sets) {
    CAPTURE(std::string(s->name));
    for (uint32_t id = 0; const mmgpt::WeightTypeInfo* t = mmgpt::weight_type_by_id(id); ++id) {
      CAPTURE(std::string(t->name));
      const kd::MatmulKernels* k = s->matmul[id];
      REQUIRE(k != nullptr);
      CHECK(bool(k->panels[id]));
      CHECK((k->x == kd::XForm::Q8Blocks) == (t->prep == mmgpt::ActivationPrep::Q8Blocks));
      CHECK((s->attention[id] != nullptr) == t->element_wise);
    }
    CHECK(bool(s->quantize_rows));
  }
}

TEST_CASE("every registered matmul gives its reference's bits, on every weight type and awkward shapes") {
  const mmgpt::kernels::Epilogue plain{}, fused{mmgpt::kernels::Activation::None, true};
  size_t compared = 0;
  for (const kd::KernelSet* s : kd::runnable_kernel_sets()) {
    CAPTURE(std::string(s->name));
    for (uint32_t id = 0; const mmgpt::WeightTypeInfo* t = mmgpt::weight_type_by_id(id); ++id) {
      CAPTURE(std::string(t->name));
      const kd::MatmulKernels& k = *s->matmul[id];
      const kd::MatmulKernels& ref = k.reference ? *k.reference : *kd::scalar_kernel_set().matmul[id];
      const kd::KernelSet& ref_set = kd::scalar_kernel_set();
      CAPTURE(std::string(k.name));
      for (size_t M : {1, 2, 6, 7, 19})
        for (size_t K : {1, 31, 33, 96, 129})
          for (size_t N : {1, 16, 17, 50}) {
            CAPTURE(M);
            CAPTURE(K);
            CAPTURE(N);
            const auto x = kt::random_ints(M * K, -3, 3, uint32_t(M * 1000 + K));
            const auto wf = kt::random_ints(N * K, -3, 3, uint32_t(K * 1000 + N));
            const auto bias = kt::random_ints(N, -4, 4, uint32_t(N));
            const auto y0 = kt::random_ints(M * N, -4, 4, uint32_t(M + N));
            std::vector<uint8_t> w(mmgpt::packed_weight_bytes(t->type, N, K));
            t->pack(wf.data(), N, K, w.data());
            for (const mmgpt::kernels::Epilogue& e : {plain, fused}) {
              const auto got = product(*s, k, t->type, x, w, bias, y0, M, K, N, e);
              const auto want = product(ref_set, ref, t->type, x, w, bias, y0, M, K, N, e);
              size_t differ = 0;
              for (size_t i = 0; i < got.size(); ++i) differ += std::memcmp(&got[i], &want[i], sizeof(float)) != 0;
              CHECK(differ == 0);
              ++compared;
            }
          }
    }
  }
  CHECK(compared > 0);
}

TEST_CASE("every weight type packs a matrix panel by panel into the bytes it packs at once") {
  // The converter packs a large matrix a piece of whole panels at a time and
  // writes the pieces one after another (tools/convert/converter.cpp).
  for (size_t i = 0; i < mmgpt::kWeightTypeCount; ++i) {
    const WeightType t = static_cast<WeightType>(i);
    const mmgpt::WeightTypeInfo& info = mmgpt::weight_type_info(t);
    CAPTURE(std::string(info.name));
    for (const auto& shape : std::vector<std::pair<size_t, size_t>>{{37, 70}, {48, 33}, {16, 1}, {5, 64}, {100, 7}}) {
      const size_t N = shape.first, K = shape.second;
      CAPTURE(N);
      CAPTURE(K);
      std::vector<float> w(N * K);
      for (size_t j = 0; j < w.size(); ++j) w[j] = static_cast<float>(int((j * 7919) % 61) - 30) / 8.0f;
      std::vector<uint8_t> whole(mmgpt::packed_weight_bytes(t, N, K));
      info.pack(w.data(), N, K, whole.data());
      const size_t unit = mmgpt::pack_row_unit(t);
      CHECK(unit % mmgpt::kPanelWidth == 0);
      for (size_t piece : {unit, 2 * unit, 3 * unit}) {
        std::vector<uint8_t> joined;
        for (size_t r = 0; r < N; r += piece) {
          const size_t n = std::min(piece, N - r);
          REQUIRE(joined.size() == mmgpt::packed_weight_bytes(t, r, K));
          std::vector<uint8_t> part(mmgpt::packed_weight_bytes(t, n, K));
          info.pack(w.data() + r * K, n, K, part.data());
          joined.insert(joined.end(), part.begin(), part.end());
        }
        CHECK(joined == whole);
      }
    }
  }
}
