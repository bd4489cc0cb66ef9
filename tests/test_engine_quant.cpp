// Engine with block-quantized weight matrices (q8_0 / q4_0): the Embed op
// dequantizes the token's row of a quantized wte, the MatMul ops quantize
// their input rows and run the integer kernels.
// - Decode with the KV cache equals prefill, and the thread count does not
//   matter: the quantized matmul is independent of M and of the split.
// - Accuracy: a GPT-2-shaped small model's next-token distributions stay
//   close to those of the f32 model (mean KL and argmax agreement), q8_0
//   much closer than q4_0.
// (The accuracy budget on a trained model is tests/cli/test_dtype_accuracy.py.)
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <tbb/global_control.h>

#include "engine/executor.hpp"
#include "engine/mmgpt.hpp"
#include "engine_test_model.hpp"
#include "kernels/quant_layout.hpp"

using namespace mmgpt;

namespace {

std::vector<float> all_logits(Executor& ex, const std::vector<int32_t>& ids) {
  KVCache cache(ex.model().config());
  auto l = ex.run(ids, cache, ids.size());
  return {l.begin(), l.end()};
}

std::vector<int32_t> random_ids(size_t n, uint32_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> ids(n);
  for (auto& i : ids) i = static_cast<int32_t>(rng() % vocab);
  return ids;
}

const char* name(DType d) { return d == DType::Q8_0 ? "q8_0" : "q4_0"; }

}  // namespace

TEST_CASE("q8_0 / q4_0 model: quantized matmuls in the graph, dequantized embedding rows") {
  for (DType dt : {DType::Q8_0, DType::Q4_0}) {
    CAPTURE(std::string(name(dt)));
    ModelConfig cfg = test::small_config(2, 3, 30, 16, 37);  // width 30: blocks of 32 padded
    const std::string path = test::temp_path("engine_quant.mmgpt");
    test::write_random_model(path, cfg, 17, "", 0.3f, -1, Layout::Panel16, dt);
    Executor ex(Model::load(path));
    const TensorView& wte = ex.model().file().tensor("wte");
    CHECK(wte.dtype == dt);
    CHECK(ex.model().file().tensor("wpe").dtype == DType::F32);
    CHECK(wte.nbytes == kernels::packed_weight_bytes(static_cast<kernels::WeightType>(dt), 37, 30));
    CHECK(ex.graph().to_string().find(std::string("w=h.0.mlp.fc.weight [panel16 ") + name(dt) + "]") !=
          std::string::npos);
    // The logits of one token at position 0 depend on its embedding row: the
    // model must run and give finite logits for every token id.
    for (int32_t id : {0, 15, 16, 36}) {
      KVCache cache(cfg);
      const std::vector<int32_t> one{id};
      auto l = ex.run(one, cache, 1);
      CHECK(std::all_of(l.begin(), l.end(), [](float v) { return std::isfinite(v); }));
    }
  }
}

TEST_CASE("q8_0 / q4_0 model: decode with the KV cache matches prefill, for any thread count") {
  for (DType dt : {DType::Q8_0, DType::Q4_0}) {
    CAPTURE(std::string(name(dt)));
    ModelConfig cfg = test::small_config(2, 4, 64, 24, 101);
    cfg.tied_lm_head = dt == DType::Q4_0;
    const std::string path = test::temp_path("engine_quant_cache.mmgpt");
    test::write_random_model(path, cfg, 8, "", 0.2f, -1, Layout::Panel16, dt);
    auto model = Model::load(path);
    auto ids = random_ids(cfg.n_ctx, cfg.vocab_size, 3);
    std::vector<float> one, two;
    {
      tbb::global_control c(tbb::global_control::max_allowed_parallelism, 1);
      Executor ex(model);
      one = all_logits(ex, ids);
    }
    {
      tbb::global_control c(tbb::global_control::max_allowed_parallelism, 2);
      Executor ex(model);
      two = all_logits(ex, ids);
    }
    CHECK(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)) == 0);
    Executor ex(model);
    const size_t V = cfg.vocab_size;
    KVCache cache(cfg);
    auto l = ex.run(std::span(ids).first(3), cache, 1);
    float worst = 0;
    for (size_t v = 0; v < V; ++v) worst = std::max(worst, std::fabs(l[v] - one[2 * V + v]));
    for (size_t t = 3; t < ids.size(); ++t) {
      l = ex.run(std::span(ids).subspan(t, 1), cache, 1);
      for (size_t v = 0; v < V; ++v) worst = std::max(worst, std::fabs(l[v] - one[t * V + v]));
    }
    CHECK(worst < 1e-5f);
  }
}

TEST_CASE("GPT-2-shaped model: q8_0 / q4_0 next-token distributions stay close to the f32 model's") {
  ModelConfig cfg = test::small_config(2, 4, 128, 48, 509);
  cfg.gelu = GeluKind::Tanh;
  const std::string f = test::temp_path("engine_quant_f32.mmgpt");
  test::write_random_model(f, cfg, 99, "", 0.08f, -1, Layout::Panel16);
  Executor ef(Model::load(f));
  auto ids = random_ids(cfg.n_ctx, cfg.vocab_size, 12);
  const auto want = all_logits(ef, ids);
  const size_t V = cfg.vocab_size, T = ids.size();
  double kl_of[2] = {0, 0};
  for (DType dt : {DType::Q8_0, DType::Q4_0}) {
    CAPTURE(std::string(name(dt)));
    const std::string h = test::temp_path("engine_quant_gpt2.mmgpt");
    test::write_random_model(h, cfg, 99, "", 0.08f, -1, Layout::Panel16, dt);
    Executor eh(Model::load(h));
    const auto got = all_logits(eh, ids);
    REQUIRE(got.size() == want.size());
    double kl_sum = 0;
    size_t argmax_differ = 0;
    for (size_t t = 0; t < T; ++t) {
      const float* a = want.data() + t * V;
      const float* b = got.data() + t * V;
      const double amax = *std::max_element(a, a + V), bmax = *std::max_element(b, b + V);
      double za = 0, zb = 0;
      for (size_t v = 0; v < V; ++v) za += std::exp(a[v] - amax), zb += std::exp(b[v] - bmax);
      double kl = 0;
      for (size_t v = 0; v < V; ++v) {
        const double lp = a[v] - amax - std::log(za), lq = b[v] - bmax - std::log(zb);
        kl += std::exp(lp) * (lp - lq);
      }
      kl_sum += kl;
      argmax_differ += (std::max_element(a, a + V) - a) != (std::max_element(b, b + V) - b);
    }
    const double mean_kl = kl_sum / T;
    kl_of[dt == DType::Q4_0] = mean_kl;
    MESSAGE(std::string(name(dt)) << ": mean KL " << mean_kl << ", argmax differs at " << argmax_differ << " of " << T);
    // Random weights give flat distributions with near-ties, so the argmax
    // bound is loose; the trained-model budget is in test_dtype_accuracy.py.
    CHECK(mean_kl < (dt == DType::Q8_0 ? 1e-3 : 5e-2));
    CHECK(argmax_differ <= T / (dt == DType::Q8_0 ? 10 : 3));
  }
  // 8-bit blocks must be far closer than 4-bit ones.
  CHECK(kl_of[0] * 4 < kl_of[1]);
}
