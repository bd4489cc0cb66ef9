// Engine with reduced-precision weight matrices: 16-bit panels (bf16 / f16:
// the Embed op widens the token's row of wte, the MatMul ops run the 16-bit
// kernels) and block-quantized ones (q8_0 / q4_0: the Embed op dequantizes the
// row, the MatMul ops quantize their input rows and run the integer kernels).
// - Exactness: a 16-bit model computes bit for bit what the f32 panel16 model
//   holding the same (widened) values computes. (Not where bf16 weights run on
//   the bf16 dot product, which rounds the activations to bf16: there the bf16
//   model is compared under the AVX2 kernels, which widen; the dot product
//   itself is test_kernels_bf16dot.cpp's.)
// - Accuracy: a GPT-2-shaped small model's logits stay close to those of the
//   original f32 model, each dtype within its own bound, q8_0 far closer than
//   q4_0. (The budget on a trained model: tests/reference/test_dtype_accuracy.py.)
// - Decode equals prefill, and thread counts do not matter, as for f32.
#include <doctest/doctest.h>

#include <tbb/global_control.h>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "core/quant_layout.hpp"
#include "engine/executor.hpp"
#include "engine/mmgpt.hpp"
#include "engine_test_model.hpp"
#include "formats/mmgpt_file_rules.hpp"
#include "kernels/kernels.hpp"

using namespace mmgpt;
using test::all_logits;
using test::random_ids;

namespace {

// All logits of `ids` from an empty cache of type kv, with at most `threads` threads.
std::vector<float> logits_with(const std::shared_ptr<const Model>& model, const std::vector<int32_t>& ids, int threads,
                               WeightType kv = WeightType::F32) {
  tbb::global_control c(tbb::global_control::max_allowed_parallelism, threads);
  Executor ex(model);
  KVCache cache(model->config(), kv);
  auto l = ex.run(ids, cache, ids.size());
  return {l.begin(), l.end()};
}

std::string name(WeightType d) { return std::string(mmgpt::weight_type_name(d)); }

// A small model shaped like GPT-2 (tied head, tanh GELU, biases everywhere,
// width a multiple of 64 heads, MLP 4x).
ModelConfig gpt2_like() {
  ModelConfig c = test::small_config(2, 4, 128, 48, 509);
  c.gelu = GeluKind::Tanh;
  return c;
}

}  // namespace

TEST_CASE("a bf16 / f16 model computes bit for bit what its widened f32 twin computes") {
  for (WeightType dt : {WeightType::BF16, WeightType::F16})
    for (bool tied : {true, false}) {
      CAPTURE(name(dt));
      CAPTURE(tied);
      // bf16 on the bf16 dot product: both models under the same instantiation
      // without it (weights widened).
      struct Restore {
        std::string isa{kernels::isa_name()};
        ~Restore() { kernels::force_isa(isa); }
      } restore;
      if (dt == WeightType::BF16 && kernels::bf16_isa_name() != "f32")
        REQUIRE(kernels::force_isa(kernels::isa_name(), false));
      ModelConfig cfg = test::small_config(2, 3, 30, 16, 37);
      cfg.tied_lm_head = tied;
      const std::string a = test::temp_path("engine_half.mmgpt"), b = test::temp_path("engine_half_twin.mmgpt");
      test::write_random_model(a, cfg, 17, "", 0.3f, -1, Layout::Panel16, dt);
      test::write_random_model(b, cfg, 17, "", 0.3f, -1, Layout::Panel16, dt, true);
      Executor ha(Model::load(a)), fb(Model::load(b));
      CHECK(ha.model().file().tensor("h.0.mlp.fc.weight").dtype == dt);
      CHECK(ha.model().file().tensor("wte").dtype == dt);
      CHECK(ha.model().file().tensor("wpe").dtype == WeightType::F32);
      CHECK(fb.model().file().tensor("wte").dtype == WeightType::F32);
      CHECK(ha.graph().to_string().find(std::string("w=h.0.attn.qkv.weight [panel16 ") + name(dt) + "]") !=
            std::string::npos);
      auto ids = random_ids(cfg.n_ctx, cfg.vocab_size, 4);
      auto la = all_logits(ha, ids), lb = all_logits(fb, ids);
      CHECK(std::memcmp(la.data(), lb.data(), la.size() * sizeof(float)) == 0);
    }
}

TEST_CASE("q8_0 / q4_0 model: quantized matmuls in the graph, dequantized embedding rows") {
  for (WeightType dt : {WeightType::Q8_0, WeightType::Q4_0}) {
    CAPTURE(name(dt));
    ModelConfig cfg = test::small_config(2, 3, 30, 16, 37);  // width 30: blocks of 32 padded
    const std::string path = test::temp_path("engine_quant.mmgpt");
    test::write_random_model(path, cfg, 17, "", 0.3f, -1, Layout::Panel16, dt);
    Executor ex(Model::load(path));
    const TensorView& wte = ex.model().file().tensor("wte");
    CHECK(wte.dtype == dt);
    CHECK(ex.model().file().tensor("wpe").dtype == WeightType::F32);
    CHECK(wte.nbytes == mmgpt::packed_weight_bytes(static_cast<mmgpt::WeightType>(dt), 37, 30));
    CHECK(ex.graph().to_string().find("w=h.0.mlp.fc.weight [panel16 " + name(dt) + "]") != std::string::npos);
    // Every token's embedding row is read (dequantized) at position 0.
    for (int32_t id : {0, 15, 16, 36}) {
      KVCache cache(cfg);
      const std::vector<int32_t> one{id};
      auto l = ex.run(one, cache, 1);
      CHECK(std::all_of(l.begin(), l.end(), [](float v) { return std::isfinite(v); }));
    }
  }
}

TEST_CASE("GPT-2-shaped model: reduced-precision logits stay close to the f32 model's") {
  const ModelConfig cfg = gpt2_like();
  const std::string f = test::temp_path("engine_half_f32.mmgpt");
  test::write_random_model(f, cfg, 99, "", 0.08f, -1, Layout::Panel16);
  Executor ef(Model::load(f));
  auto ids = random_ids(cfg.n_ctx, cfg.vocab_size, 12);
  const auto want = all_logits(ef, ids);
  const size_t V = cfg.vocab_size, T = ids.size();
  double kl_q8 = 0, kl_q4 = 0;
  for (WeightType dt : {WeightType::BF16, WeightType::F16, WeightType::Q8_0, WeightType::Q4_0}) {
    CAPTURE(name(dt));
    const std::string h = test::temp_path("engine_half_gpt2.mmgpt");
    test::write_random_model(h, cfg, 99, "", 0.08f, -1, Layout::Panel16, dt);
    Executor eh(Model::load(h));
    const auto got = all_logits(eh, ids);
    REQUIRE(got.size() == want.size());
    // Per position: the largest logit error relative to the spread of that row,
    // and the KL divergence of the next-token distributions.
    double worst_rel = 0, kl_sum = 0;
    size_t argmax_differ = 0;
    for (size_t t = 0; t < T; ++t) {
      const float* a = want.data() + t * V;
      const float* b = got.data() + t * V;
      const double amax = *std::max_element(a, a + V), amin = *std::min_element(a, a + V);
      const double bmax = *std::max_element(b, b + V);
      double err = 0, za = 0, zb = 0;
      for (size_t v = 0; v < V; ++v) {
        err = std::max(err, std::fabs(double(a[v]) - b[v]));
        za += std::exp(a[v] - amax);
        zb += std::exp(b[v] - bmax);
      }
      worst_rel = std::max(worst_rel, err / (amax - amin));
      double kl = 0;
      for (size_t v = 0; v < V; ++v) {
        const double lp = a[v] - amax - std::log(za), lq = b[v] - bmax - std::log(zb);
        kl += std::exp(lp) * (lp - lq);
      }
      kl_sum += kl;
      argmax_differ += (std::max_element(a, a + V) - a) != (std::max_element(b, b + V) - b);
    }
    const double mean_kl = kl_sum / T;
    MESSAGE(name(dt) << ": worst |logit error| / logit range " << worst_rel << ", mean KL " << mean_kl
                     << ", argmax differs at " << argmax_differ << " of " << T);
    // bf16 keeps 8 significant bits (relative rounding <= 2^-9), f16 11 (<= 2^-12);
    // q8_0 / q4_0 round weights to 1/254 / 1/16 of their block's range, and
    // the activations to 1/254 of theirs. Random weights give flat
    // distributions with near-ties, so the argmax bounds are loose.
    switch (dt) {
      case WeightType::BF16:
        CHECK(worst_rel < 0.02);
        CHECK(mean_kl < 1e-4);
        CHECK(argmax_differ <= T / 10);
        break;
      case WeightType::F16:
        CHECK(worst_rel < 0.003);
        CHECK(mean_kl < 2e-6);
        CHECK(argmax_differ <= T / 10);
        break;
      case WeightType::Q8_0:
        CHECK(worst_rel < 0.05);
        CHECK(mean_kl < 1e-3);
        CHECK(argmax_differ <= T / 10);
        kl_q8 = mean_kl;
        break;
      default:
        CHECK(worst_rel < 0.3);
        CHECK(mean_kl < 5e-2);
        CHECK(argmax_differ <= T / 3);
        kl_q4 = mean_kl;
        break;
    }
  }
  // 8-bit blocks must be far closer than 4-bit ones.
  CHECK(kl_q8 * 4 < kl_q4);
}

TEST_CASE("reduced-precision model: decode with the KV cache matches prefill, for any thread count") {
  for (WeightType dt : {WeightType::BF16, WeightType::F16, WeightType::Q8_0, WeightType::Q4_0}) {
    CAPTURE(name(dt));
    ModelConfig cfg = test::small_config(2, 4, 64, 24, 101);
    cfg.tied_lm_head = dt == WeightType::F16 || dt == WeightType::Q4_0;
    const std::string path = test::temp_path("engine_half_cache.mmgpt");
    test::write_random_model(path, cfg, 8, "", 0.2f, -1, Layout::Panel16, dt);
    auto model = Model::load(path);
    auto ids = random_ids(cfg.n_ctx, cfg.vocab_size, 3);
    const auto one = logits_with(model, ids, 1), two = logits_with(model, ids, 2);
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

TEST_CASE("KV cache in bf16 / f16: thread-independent, decode matches prefill, close to the f32 cache") {
  ModelConfig cfg = test::small_config(2, 4, 64, 24, 101);
  const std::string path = test::temp_path("engine_kv16.mmgpt");
  // f32 weights: quantized ones would turn the cache's tiny rounding into
  // flips of activation quanta, hiding the bound below.
  test::write_random_model(path, cfg, 8, "", 0.2f, -1, Layout::Panel16);
  auto model = Model::load(path);
  auto ids = random_ids(cfg.n_ctx, cfg.vocab_size, 5);
  const size_t V = cfg.vocab_size;
  const auto f32 = logits_with(model, ids, 2);
  for (WeightType kv : {WeightType::BF16, WeightType::F16}) {
    CAPTURE(name(kv));
    KVCache cache(cfg, kv);
    CHECK(cache.dtype() == kv);
    const auto one = logits_with(model, ids, 1, kv), two = logits_with(model, ids, 2, kv);
    CHECK(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)) == 0);
    // Decode one token at a time reads the rounded keys and values that prefill wrote and read.
    Executor ex(model);
    KVCache dc(cfg, kv);
    float worst = 0;
    for (size_t t = 0; t < ids.size(); ++t) {
      auto l = ex.run(std::span(ids).subspan(t, 1), dc, 1);
      for (size_t v = 0; v < V; ++v) worst = std::max(worst, std::fabs(l[v] - one[t * V + v]));
    }
    CHECK(worst < 1e-5f);
    // Against the f32 cache: rounding keys and values to 8 / 11 significant bits.
    double err = 0, range = 0;
    for (size_t i = 0; i < f32.size(); ++i) {
      err = std::max(err, std::fabs(double(one[i]) - f32[i]));
      range = std::max(range, std::fabs(double(f32[i])));
    }
    MESSAGE(name(kv) << " KV cache: largest logit change " << err << " (largest logit " << range << ")");
    CHECK(err > 0);  // the cache really holds 16-bit values
    CHECK(err < (kv == WeightType::BF16 ? 0.02 : 0.003) * range);
  }
  CHECK_THROWS_AS(KVCache(cfg, WeightType::Q8_0), Error);
}
