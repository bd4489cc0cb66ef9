// Engine tests that need no PyTorch: KV-cache consistency, buffer planning,
// thread-count independence, sliding-window generation. Parity with PyTorch
// lives in tests/reference.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <tbb/global_control.h>

#include "engine/executor.hpp"
#include "engine/generator.hpp"
#include "engine_test_model.hpp"
#include "formats/error.hpp"

using namespace mmgpt;

namespace {

std::vector<float> all_logits(Executor& ex, const std::vector<int32_t>& ids) {
  KVCache cache(ex.model().config());
  auto l = ex.run(ids, cache, ids.size());
  return {l.begin(), l.end()};
}

float max_abs_diff(std::span<const float> a, std::span<const float> b) {
  REQUIRE(a.size() == b.size());
  float m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

std::vector<int32_t> random_ids(size_t n, uint32_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> ids(n);
  for (auto& i : ids) i = static_cast<int32_t>(rng() % vocab);
  return ids;
}

}  // namespace

TEST_CASE("decoding with the KV cache matches a full prefill, row by row") {
  for (auto cfg : {test::small_config(), test::small_config(1, 1, 8, 9, 5), test::small_config(3, 4, 60, 24, 101)}) {
    for (bool bias : {true, false}) {
      cfg.qkv_bias = cfg.linear_bias = cfg.norm_bias = bias;
      cfg.gelu = bias ? GeluKind::Tanh : GeluKind::Erf;
      const std::string path = test::temp_path("engine_cache.mmgpt");
      test::write_random_model(path, cfg, 7 + cfg.n_embd);
      Executor ex(Model::load(path));
      const size_t V = cfg.vocab_size;
      auto ids = random_ids(cfg.n_ctx, cfg.vocab_size, 3);
      auto full = all_logits(ex, ids);

      // Prefill a prefix, then one token at a time.
      for (size_t prefix : {size_t{1}, size_t{5}}) {
        KVCache cache(cfg);
        auto l = ex.run(std::span(ids).first(prefix), cache, 1);
        CHECK(max_abs_diff(l, std::span(full).subspan((prefix - 1) * V, V)) < 1e-5f);
        for (size_t t = prefix; t < ids.size(); ++t) {
          l = ex.run(std::span(ids).subspan(t, 1), cache, 1);
          CHECK(max_abs_diff(l, std::span(full).subspan(t * V, V)) < 1e-5f);
        }
        CHECK(cache.length() == cfg.n_ctx);
        CHECK_THROWS_AS(ex.run(std::span(ids).first(1), cache, 1), Error);  // past the context
      }
    }
  }
}

TEST_CASE("a prefix's logits do not depend on what follows (causal mask)") {
  auto cfg = test::small_config();
  const std::string path = test::temp_path("engine_causal.mmgpt");
  test::write_random_model(path, cfg, 11);
  Executor ex(Model::load(path));
  auto a = random_ids(10, cfg.vocab_size, 1);
  auto b = a;
  b[7] = (b[7] + 1) % cfg.vocab_size;
  auto la = all_logits(ex, a), lb = all_logits(ex, b);
  const size_t V = cfg.vocab_size;
  CHECK(max_abs_diff(std::span(la).first(7 * V), std::span(lb).first(7 * V)) == 0.0f);
  CHECK(max_abs_diff(std::span(la).subspan(7 * V), std::span(lb).subspan(7 * V)) > 0.0f);
}

TEST_CASE("results are identical for any thread count") {
  auto cfg = test::small_config(2, 4, 64, 32, 300);
  const std::string path = test::temp_path("engine_threads.mmgpt");
  test::write_random_model(path, cfg, 5);
  auto model = Model::load(path);
  auto ids = random_ids(32, cfg.vocab_size, 9);
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
}

TEST_CASE("token ids outside the vocabulary are refused") {
  auto cfg = test::small_config();
  const std::string path = test::temp_path("engine_ids.mmgpt");
  test::write_random_model(path, cfg, 2);
  Executor ex(Model::load(path));
  KVCache cache(cfg);
  std::vector<int32_t> bad = {1, static_cast<int32_t>(cfg.vocab_size)};
  CHECK_THROWS_WITH_AS(ex.run(bad, cache, 1), doctest::Contains("outside the vocabulary"), Error);
  std::vector<int32_t> negative = {-1};
  CHECK_THROWS_AS(ex.run(negative, cache, 1), Error);
  CHECK(cache.length() == 0);
}

TEST_CASE("planned buffers never overlap while both are alive") {
  auto cfg = test::small_config(3, 2, 16, 16, 50);
  const std::string path = test::temp_path("engine_plan.mmgpt");
  test::write_random_model(path, cfg, 4);
  auto model = Model::load(path);
  Graph g = build_gpt_graph(*model);
  const size_t n = g.buffers.size();
  std::vector<size_t> first(n, SIZE_MAX), last(n, 0);
  for (size_t i = 0; i < g.ops.size(); ++i)
    for (int b : {g.ops[i].input, g.ops[i].output})
      if (b >= 0) first[b] = std::min(first[b], i), last[b] = std::max(last[b], i);
  last[g.logits] = g.ops.size();
  for (auto [T, R] : {std::pair<size_t, size_t>{1, 1}, {7, 1}, {16, 16}, {13, 5}}) {
    BufferPlan p = plan_buffers(g, T, R);
    size_t total = 0;
    for (size_t a = 0; a < n; ++a) {
      total += p.sizes[a];
      CHECK(p.offsets[a] % 64 == 0);
      CHECK(p.offsets[a] + p.sizes[a] <= p.arena_bytes);
      for (size_t b = a + 1; b < n; ++b) {
        const bool alive_together = first[a] <= last[b] && first[b] <= last[a];
        const bool disjoint = p.offsets[a] + p.sizes[a] <= p.offsets[b] || p.offsets[b] + p.sizes[b] <= p.offsets[a];
        if (alive_together) CHECK(disjoint);
      }
    }
    CHECK(p.arena_bytes < total);  // reuse actually happens
  }
  CHECK(g.to_string().find("h.2.mlp.fc") != std::string::npos);
}

TEST_CASE("generation past the context slides the window like nanoGPT") {
  auto cfg = test::small_config(2, 2, 12, 8, 23);
  const std::string path = test::temp_path("engine_slide.mmgpt");
  test::write_random_model(path, cfg, 21, "", 0.5f);
  auto model = Model::load(path);
  Executor ex(model);
  std::vector<int32_t> prompt = {1, 2, 3, 4, 5};
  GenerateOptions opt;
  opt.max_new_tokens = 20;
  opt.sampling.greedy = true;
  auto got = generate(ex, prompt, opt);
  REQUIRE(got.size() == 20);

  // Reference: a fresh full forward of the last n_ctx tokens for every step.
  std::vector<int32_t> hist = prompt, expected;
  Executor ref(model);
  for (int i = 0; i < 20; ++i) {
    std::vector<int32_t> window(hist.end() - std::min<size_t>(hist.size(), cfg.n_ctx), hist.end());
    KVCache cache(cfg);
    auto l = ref.run(window, cache, 1);
    int32_t t = argmax(l);
    expected.push_back(t);
    hist.push_back(t);
  }
  CHECK(got == expected);
}

TEST_CASE("generation stops at end-of-text unless told to ignore it, and on request") {
  auto cfg = test::small_config(1, 2, 8, 32, 3);
  const std::string path = test::temp_path("engine_eos.mmgpt");
  test::write_random_model(path, cfg, 3, "", 1.0f);
  Executor ex(Model::load(path));
  std::vector<int32_t> prompt = {0};
  GenerateOptions opt;
  opt.max_new_tokens = 30;
  opt.sampling.greedy = true;
  auto all = generate(ex, prompt, opt);
  REQUIRE(all.size() == 30);
  opt.eos_id = all[3];
  auto stopped = generate(ex, prompt, opt);
  auto pos = std::find(all.begin(), all.end(), all[3]) - all.begin();
  CHECK(stopped == std::vector<int32_t>(all.begin(), all.begin() + pos));
  opt.ignore_eos = true;
  CHECK(generate(ex, prompt, opt) == all);
  opt.ignore_eos = false;
  opt.eos_id = -1;
  int calls = 0;
  auto early = generate(ex, prompt, opt, [&](int32_t) { return ++calls < 4; });
  CHECK(early.size() == 4);
}
